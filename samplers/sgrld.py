"""SGRLD in five metrics (Yu, Hartmann, Williams & Klami, "Scalable SGRLD in non-diagonal
metrics", TMLR): identity (SGLD), rmsprop (pSGLD), wenzel (layer-wise), monge and shampoo.

Every metric shares the Euler-Maruyama step of Riemannian Langevin dynamics at tau = 1,

    w <- w - h n G^-1 g + sqrt(2 h) G^-1/2 xi,   g = grad U / n,   xi ~ N(0, I),

with g the paper's per-datum gradient (n the training-set size, 1 for potentials; the prior is
part of U, so of every statistic) and G built from g. For networks this is the paper's NN
parametrisation with learning rate l = h n (w <- w - l G^-1 g + sqrt(2 l / n) G^-1/2 xi: its
tables' l are step_size x n); for potentials (n = 1) it is the toy code's, w <- w + h G^-1 grad
log p + sqrt(2h) G^-1/2 xi. Each step updates the metric's statistics with the current g BEFORE
the metric is formed, as the paper's code does.

The drift term tau Gamma(w) h, Gamma_j = sum_k d(G^-1)_jk / dw_k, is omitted in every metric, as
the paper does: adaptive metrics then sample a biased law, even on a Gaussian (N(0, I_2) at h =
0.01: RMSprop variance 1.33, Shampoo 1.6, Monge 1.3 at alpha2 = 0.1 and 12-16 at alpha2 = 1;
measured in docs/methods/sgrld.md; tests/test_sgrld.py pins them). Runs with a metric other than
identity carry the warning ``dropped_gamma``.

``metric=rmsprop`` is not ``rmsprop-sgld`` (Hitchcock & Hoogland, ``samplers.rmsprop_sgld``), which
adapts on the raw loss gradient, starts v at 1 with a bias correction and steps with eps / 2:
two estimators of a diagonal RMSprop metric, each as its paper writes it, so both are kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from .base import Kernel, State
from .spec import BATCH, LOC, NBETA, P001, Param, aligned, kernel_spec

METRICS = ("identity", "rmsprop", "wenzel", "monge", "shampoo")
# The paper's settings (Yu et al. Sec. 4.1 and App. A.4), as (networks, potentials).
DECAY = {
    "rmsprop": (0.99, 0.995),
    "wenzel": (0.99, 0.99),
    "monge": (0.9, 0.7),
    "shampoo": (0.99, 0.9995),
}
EPSILON = {"rmsprop": (1e-8, 0.0), "wenzel": (1e-8, 1e-8), "shampoo": (1e-8, 1e-6)}
SHAMPOO_EVERY = (100, 1)  # steps between two root computations
MONGE_FALLBACK = 1000.0  # the funnel code's bound on |G^-1 g| (potentials only, as the paper)

GAMMA_OMITTED = (
    "SGRLD drops the metric's drift term Gamma, as the paper does, so an adaptive metric samples a "
    "biased law even on a Gaussian (N(0, I) at step 0.01: variance 1.33 with rmsprop, 1.6 with "
    "shampoo, 1.3 with monge at alpha2 = 0.1 and 12-16 at alpha2 = 1); part of a metric's "
    "'exploration' is this inflation: compare with metric identity"
)


@dataclass
class SGRLDState(State):
    t: int = 0  # steps taken, on the host: refreshes every few steps need no device sync
    stat: Tensor | None = None  # V (rmsprop, wenzel), m (monge) [C, d]; H (shampoo) [C, d, d]
    scale: Tensor | None = None  # wenzel's sigma~ per coordinate [C, d]; shampoo's H^-1/4
    factors: tuple[Tensor, ...] = ()  # shampoo on networks: H_i of each mode of each matrix
    roots: tuple[Tensor, ...] = ()  # and their H_i^(-1/(4 rank))


def inverse_root(h: Tensor, power: float, epsilon: float) -> Tensor:
    """H^-power of symmetric PSD matrices [..., n, n] by eigh, with the ridge epsilon lambda_max.
    A diverged chain's H (NaN/Inf, which eigh refuses for the whole batch) is replaced by I:
    its chain is frozen and flagged anyway (``samplers.base.contain``)."""
    finite = torch.isfinite(h).flatten(-2).all(-1)[..., None, None]
    h = torch.where(finite, h, torch.eye(h.shape[-1], dtype=h.dtype, device=h.device))
    lam, q = torch.linalg.eigh(h)
    tiny = torch.finfo(h.dtype).tiny
    lam = lam.clamp_min(0) + epsilon * lam[..., -1:].clamp_min(tiny)
    return (q * lam.pow(-power).unsqueeze(-2)) @ q.transpose(-1, -2)


def _along(moved: Tensor, matrix: Tensor) -> Tensor:
    """moved [C, ..., n] times matrix [C, n, n] along its last axis (a mode product)."""
    c, n = moved.shape[0], moved.shape[-1]
    out = moved.reshape(c, -1, n) @ matrix
    return out.reshape(moved.shape)


def monge_coefficients(norm2: Tensor, alpha2: float) -> tuple[Tensor, Tensor]:
    """f_-1 and f_-1/2 of G^n x = x + f_n m <m, x> at |m|^2 = ``norm2``. The paper's
    f_-1/2 = (1/sqrt(1 + a |m|^2) - 1) / |m|^2 is written here without its cancellation, as
    -a / (r (1 + r)) with r = sqrt(1 + a |m|^2): the same number, whose value at |m| -> 0 is
    the README's small-norm guard, -alpha2 / 2, with no branch."""
    root = (1 + alpha2 * norm2).sqrt()
    return -alpha2 / (1 + alpha2 * norm2), -alpha2 / (root * (1 + root))


class SGRLD(Kernel):
    """w <- w - h n G^-1 g + sqrt(2h) G^-1/2 xi, g = grad U / n (module doc), with G:
    identity: I.   rmsprop: diag(sqrt(V) + eps), V <- decay V + (1 - decay) g^2, V_0 = 0.
    wenzel: sigma~_l I per parameter tensor l, sigma_l = sqrt(eps + mean V_l) over min_k sigma_k,
      V_0 = 1, refreshed every ``update_every`` steps (default one epoch).
    monge: I + alpha2 m m^T, m <- decay m + (1 - decay) g; matrix-free: G^-1 x = x + f_-1 m <m, x>,
      G^-1/2 x = x + f_-1/2 m <m, x> with inner products over all parameters.
    shampoo: potentials: H^1/2 with H <- decay H + (1 - decay) g g^T, H_0 = eps I; networks: per
      matrix parameter the Kronecker factors H_1 = g g^T, H_2 = g^T g (EMAs), G^-1 g =
      H_1^-1/4 g H_2^-1/4 and G^-1/2 xi = H_1^-1/8 xi H_2^-1/8; biases unpreconditioned; roots
      by eigh with the ridge eps lambda_max, every ``update_every`` steps (100 for networks).
    The drift term Gamma is omitted, as in the paper: adaptive metrics are biased (module doc)."""

    SPEC = kernel_spec(
        "sgrld",
        "sgmcmc",
        P001 + ", eqs. 3-4, sections 3.1-3.2",
        [
            Param(
                "step_size",
                "float",
                1e-3,
                "step size h (the paper's; for networks its learning rate l = h n)",
                1e-12,
                10.0,
            ),
            NBETA,
            LOC,
            BATCH,
            Param("metric", "choice", "identity", "the metric G", choices=METRICS),
            Param("alpha2", "float", 0.1, "monge: alpha^2 of G = I + alpha^2 m m^T", 0.0, 1e6),
            Param(
                "decay",
                "float",
                None,
                "lambda of the metric's EMA (empty: the paper's: rmsprop 0.99 / 0.995 on "
                "potentials, wenzel 0.99, monge 0.9 / 0.7, shampoo 0.99 / 0.9995; 1: frozen)",
                0.0,
                1.0,
                optional=True,
            ),
            Param(
                "epsilon",
                "float",
                None,
                "rmsprop/wenzel stability eps, shampoo's H_0 = eps I and ridge (empty: 1e-8; "
                "on potentials rmsprop 0, shampoo 1e-6)",
                0.0,
                1.0,
                optional=True,
            ),
            Param(
                "update_every",
                "int",
                None,
                "steps between shampoo's roots (empty: 100; 1 on potentials) or wenzel's "
                "refreshes (empty: one epoch)",
                1,
                10_000_000,
                optional=True,
            ),
        ],
        equation=aligned(
            r"w_{t+1} = w_t - h\,n\,G^{-1} \hat g_t + \sqrt{2h}\,G^{-1/2}\,\xi_t,"
            r"\qquad \hat g_t = \nabla U(w_t) / n",
            r"\text{rmsprop: } G = \mathrm{diag}(\sqrt{V_t} + \epsilon),\ "
            r"V_t = \lambda V_{t-1} + (1 - \lambda)\,\hat g_t^2",
            r"\text{monge: } G = I + \alpha^2 m_t m_t^\top,\ "
            r"m_t = \lambda m_{t-1} + (1 - \lambda)\,\hat g_t",
            r"\text{shampoo: } G^{-1} \hat g = H_1^{-1/4}\,\hat g\,H_2^{-1/4},\ "
            r"H_1 \leftarrow \lambda H_1 + (1 - \lambda)\,\hat g \hat g^\top,\ "
            r"H_2 \leftarrow \lambda H_2 + (1 - \lambda)\,\hat g^\top \hat g",
        ),
        text="Stochastic gradient Riemannian Langevin dynamics (Yu, Hartmann, Williams & Klami): "
        "an Euler-Maruyama step of Langevin dynamics in a metric G built from the gradients seen "
        "so far, n the training-set size (1 for potentials; for networks the paper's learning "
        "rate is l = h n). identity is SGLD; rmsprop and wenzel are diagonal (wenzel: one scale "
        "per layer, refreshed once an epoch); monge (I + alpha^2 m m^T, rank one, at the cost of "
        "two inner products) and shampoo (Kronecker factors of a matrix parameter; on a potential "
        "the full-matrix H) are the paper's non-diagonal metrics, which reach further into a "
        "funnel's neck. Each statistic takes the current gradient before the metric is formed. "
        "The drift term Gamma(w) = div G^-1 is omitted, as in the paper, so every adaptive metric "
        "samples a biased law, even on a Gaussian (variance 1.3-1.6 instead of 1 at h = 0.01; "
        "12-16 with monge at alpha^2 = 1): part of its gain in the funnel is that inflation.",
    )
    minibatch = True

    @property
    def caveats(self) -> dict[str, str]:  # identity is SGLD: its G is constant, Gamma = 0
        return {} if self.metric == "identity" else {"dropped_gamma": GAMMA_OMITTED}

    # -- the paper's settings where the user left them empty ----------------------------------
    def settings(self, target) -> tuple[float, float, int]:
        """(decay, epsilon, update_every) for ``target``: the given ones, else the paper's."""
        kind = 1 if target.n is None else 0
        decay = self.decay if self.decay is not None else DECAY.get(self.metric, (0, 0))[kind]
        eps = self.epsilon if self.epsilon is not None else EPSILON.get(self.metric, (0, 0))[kind]
        every = self.update_every
        if every is None:
            if self.metric == "shampoo":
                every = SHAMPOO_EVERY[kind]
            else:  # wenzel: once per epoch
                size = self.batch_size if self.uses_batches(target) else target.n
                every = 1 if target.n is None else math.ceil(target.n / size)
        return decay, eps, every

    def matrices(self, target) -> list[tuple[str, tuple[int, ...]]]:
        """Shampoo's Kronecker-factored tensors: a network's parameters of rank >= 2."""
        return [(k, s) for k, s in target.layout.items() if len(s) >= 2]

    def start(self, state, target, generator):
        w = state.position
        chains, d = w.shape
        _, eps, every = self.settings(target)
        stat = scale = None
        factors: tuple[Tensor, ...] = ()
        if self.metric in ("rmsprop", "monge"):
            stat = torch.zeros_like(w)
        elif self.metric == "wenzel":
            stat, scale = torch.ones_like(w), torch.ones_like(w)
        elif self.metric == "shampoo" and target.n is None:  # a vector: the full d x d H
            stat = eps * torch.eye(d, dtype=w.dtype, device=w.device).expand(chains, d, d).clone()
            scale = torch.zeros_like(stat)
        elif self.metric == "shampoo":
            eye = lambda m: torch.eye(m, dtype=w.dtype, device=w.device).expand(chains, m, m)  # noqa: E731
            factors = tuple(eps * eye(m) for _, shape in self.matrices(target) for m in shape)
        # a refresh every few steps reads the host counter t, which a compiled chunk would fix
        self.compilable = every == 1 and not factors
        return SGRLDState(**vars(state), stat=stat, scale=scale, factors=factors, roots=factors)

    # -- the step ------------------------------------------------------------------------------
    def update(self, state, target, batch, noise):
        e = self.energy(state.position, state, target, batch)
        n = target.n or 1
        g = e.grad / n if n != 1 else e.grad
        xi = noise["xi"]
        state, drift, diffusion = getattr(self, "_" + self.metric)(state, target, g, xi)
        w = (
            state.position
            - (self.step_size * n) * drift
            + math.sqrt(2 * self.step_size) * diffusion
        )
        ones = torch.ones_like(e.loss)
        return replace(state, position=w, t=state.t + 1), e.loss, ones

    def _refresh(self, state: SGRLDState, every: int) -> bool:
        return every == 1 or state.t % every == 0

    def _identity(self, state, target, g, xi):
        return state, g, xi

    def _rmsprop(self, state, target, g, xi):
        decay, eps, _ = self.settings(target)
        v = decay * state.stat + (1 - decay) * g * g
        root = v.sqrt() + eps  # G
        return replace(state, stat=v), g / root, xi / root.sqrt()

    def _wenzel(self, state, target, g, xi):
        decay, eps, every = self.settings(target)
        v = decay * state.stat + (1 - decay) * g * g
        scale = state.scale
        if self._refresh(state, every):
            parts = list(target.unflatten(v).values())  # sigma_l per tensor, over the least
            sigma = [(eps + p.flatten(1).mean(1, keepdim=True)).sqrt() for p in parts]
            least = torch.cat(sigma, 1).min(1, keepdim=True).values
            scale = torch.cat(
                [(s / least).expand(-1, p[0].numel()) for s, p in zip(sigma, parts, strict=True)], 1
            )
        return replace(state, stat=v, scale=scale), g / scale, xi / scale.sqrt()

    def _monge(self, state, target, g, xi):
        decay, _, _ = self.settings(target)
        a2 = self.alpha2
        m = decay * state.stat + (1 - decay) * g
        f_inv, f_half = monge_coefficients((m * m).sum(-1, keepdim=True), a2)
        drift = g + f_inv * m * (m * g).sum(-1, keepdim=True)
        diffusion = xi + f_half * m * (m * xi).sum(-1, keepdim=True)
        if target.n is None:  # the funnel code's fallback: the identity metric up to a scale
            size = torch.linalg.vector_norm(drift, dim=-1, keepdim=True)
            factor = (torch.linalg.vector_norm(g, dim=-1, keepdim=True) / MONGE_FALLBACK).clamp_min(
                torch.finfo(g.dtype).tiny
            )
            big = size > MONGE_FALLBACK
            drift = torch.where(big, g / factor, drift)
            diffusion = torch.where(big, xi / factor.sqrt(), diffusion)
        return replace(state, stat=m), drift, diffusion

    def _shampoo(self, state, target, g, xi):
        decay, eps, every = self.settings(target)
        refresh = self._refresh(state, every)
        if target.n is None:  # a vector: full-matrix RMSprop, G^-1 = H^-1/2, G^-1/2 = H^-1/4
            h = decay * state.stat + (1 - decay) * g[:, :, None] * g[:, None, :]
            r = inverse_root(h, 0.25, eps) if refresh else state.scale
            drift = (r @ (r @ g[:, :, None]))[..., 0]
            return replace(state, stat=h, scale=r), drift, (r @ xi[:, :, None])[..., 0]
        gs, xs = target.unflatten(g), target.unflatten(xi)
        factors, roots, i = list(state.factors), list(state.roots), 0
        for name, shape in self.matrices(target):
            rank = len(shape)
            for mode in range(rank):  # mode-i contraction: g_(i) g_(i)^T
                unfold = gs[name].movedim(mode + 1, 1).flatten(2)
                factors[i + mode] = decay * factors[i + mode] + (1 - decay) * (
                    unfold @ unfold.transpose(1, 2)
                )
                if refresh:
                    roots[i + mode] = inverse_root(factors[i + mode], 1 / (4 * rank), eps)
            drift, diffusion = gs[name], xs[name]
            for mode in range(rank):
                r = roots[i + mode]
                drift = _along(_along(drift.movedim(mode + 1, -1), r), r).movedim(-1, mode + 1)
                diffusion = _along(diffusion.movedim(mode + 1, -1), r).movedim(-1, mode + 1)
            gs[name], xs[name] = drift, diffusion
            i += rank
        flat = lambda parts: torch.cat([p.flatten(1) for p in parts.values()], 1)  # noqa: E731
        new = replace(state, factors=tuple(factors), roots=tuple(roots))
        return new, flat(gs), flat(xs)
