"""Variational inference via resolution of singularities (reference 004): sources, flow, Psi_K.

A variational posterior over w is w = G(xi), xi ~ q, with q a mean-field *source* and G a
normalizing flow, a learned resolution map (reference 004 section 2). Its objective is the
normalized ELBO Psi(q, G) = -E_q n K_n(G(xi)) - KL(q || phi(G) |G'|) <= log Z_bar(n) (eq 2).

Sources (``torch.nn.Module``; ``rsample(n, generator) -> [n, d]``, ``log_prob(xi) -> [n]``,
``entropy() -> []``, ``moment(p) -> [d]`` = E|xi_j|^p):

- ``GeneralizedGamma``: q(xi_j) ∝ |xi_j|^(2 k_j lambda_j - 1) exp(-beta_j |xi_j|^(2 k_j)) on R, the
  paper's untruncated family (h = 2 k lambda - 1) on |xi_j| with a fair random sign. Its lambda, k,
  beta are stored as logs and mapped through exp: positive, and scale-free, so one learning rate
  moves beta = 1 and beta = n = 1e6 by the same factor (beta spans six decades in section 5(A)).
  The paper's nf_gamma_lambda0_k0_beta0 start is ``GeneralizedGamma.paper_init``.
- ``GaussianSource``: N(mean_j, var_j), fixed by default (the paper's nf_gaussian_mu0_v0); with
  ``learn=True`` it is the Gaussian mean-field family.

Draws are reproducible from a ``torch.Generator``: torch.distributions.Gamma(lambda, beta).rsample
reads the global RNG (it takes no generator), so ``GeneralizedGamma.rsample`` draws a seed from
the caller's generator and runs Gamma.rsample inside ``torch.random.fork_rng`` seeded with it:
the public API's law and implicit reparameterised gradients, and the global RNG as it was
before (no private torch API). The sign is then a uniform draw from the caller's generator.

``Flow``: affine couplings (RealNVP) with alternating parity masks r. Reference 004 writes
v = (1-r) u + r (u exp(s(r u)) + t(r u)), which conditions on the same half it transforms (its
Jacobian is then not triangular); here the masked half is kept and conditions the other:
v = r u + (1-r) (u exp(s(r u)) + t(r u)), log|det| = sum (1-r) s(r u). With d = 1, a layer whose
mask keeps the coordinate is the identity and one whose mask transforms it conditions on nothing
(r u = 0): its s and t are constants, a learnable affine map, so the flow is affine in d = 1.

Section 5(A) check: for a normal crossing K(w) = prod_j w_j^(2 k_j) with an N(0, I) prior and the
identity resolution, Psi_K is closed-form over both mean-field families (``psi_normal_crossing``),
``sup_psi`` maximises it, ``log_z_bar_k`` is the exact log Z_bar_K by quadrature and ``slope``
regresses -Psi on log n (it should be about the RLCT, 1 / (2 max_j k_j)).

Section 5(C), on a target (``landscapes``): ``log_likelihood_scale`` reads a target's loss as
sum_i log p(y_i | x_i, w) (a Gaussian of sd ``sigma`` for regression, the cross-entropy for
classification, the energy itself for a potential); ``psi_estimate`` is the Monte Carlo
Psi = E_q[-n K_n(G xi)] + E_q[log phi(G xi) + log|G'(xi)|] + H(q) with the draws as the target's
chains, on all n points or unbiased on a minibatch; ``fit`` trains it with the paper's Adam groups
and minibatches and returns the per-epoch curve and the final full-data Psi; ``log_z_bar_tanh1``
is the exact log Z_bar of the H = 1 tanh net, the bound Psi cannot pass. The prior
phi = N(prior_mean, prior_std^2 I) takes a standard deviation: the paper's pairs (5, 100) and
(0, 1) are (mean, variance), so (5, 100) is prior_std = 10.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy import integrate, optimize
from torch import Tensor, nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

LOG_2PI = math.log(2 * math.pi)


def _vector(value, d: int, dtype) -> Tensor:
    """``value`` (a scalar or d values) as a float tensor of shape [d]."""
    return torch.as_tensor(value, dtype=dtype).reshape(-1).expand(d).clone()


def _powers(p, like: Tensor) -> Tensor:
    return torch.as_tensor(p, dtype=like.dtype, device=like.device).expand_as(like)


class GeneralizedGamma(nn.Module):
    """Mean-field generalized gamma on R^d with a random sign (module doc). ``fixed_beta``: a
    [d] bool mask of beta entries held at their initial value (the paper's beta_1 = n); ``learn``
    False freezes every parameter (the paper's flag False: the source is absorbed into G)."""

    def __init__(self, lam, k, beta, *, fixed_beta=None, learn: bool = True, dtype=None):
        super().__init__()
        dtype = dtype or torch.get_default_dtype()
        d = max(torch.as_tensor(v).numel() for v in (lam, k, beta))
        lam, k, beta = (_vector(v, d, dtype) for v in (lam, k, beta))
        if not ((lam > 0).all() and (k > 0).all() and (beta > 0).all()):
            raise ValueError("lambda, k and beta must be positive")
        self.dim = d
        self.log_lam = nn.Parameter(lam.log(), requires_grad=learn)
        self.log_k = nn.Parameter(k.log(), requires_grad=learn)
        self.log_beta = nn.Parameter(beta.log(), requires_grad=learn)
        mask = torch.zeros(d, dtype=torch.bool) if fixed_beta is None else fixed_beta
        self.register_buffer("fixed_beta", torch.as_tensor(mask, dtype=torch.bool).clone())
        self.register_buffer("beta_fixed_value", beta.clone())

    @classmethod
    def paper_init(
        cls,
        d: int,
        n: float,
        lambda0: float,
        k0: float,
        beta0: float = 100.0,
        *,
        learn: bool = True,
        dtype=None,
    ) -> GeneralizedGamma:
        """nf_gamma_lambda0_k0_beta0: lambda = (1, lambda0, ...), k = k0, beta = (n, beta0, ...),
        with beta_1 fixed at n (the essential coordinate taken first, reference 004 section 2)."""
        lam = [1.0] + [lambda0] * (d - 1)
        beta = [float(n)] + [beta0] * (d - 1)
        fixed = [True] + [False] * (d - 1)
        return cls(lam, [k0] * d, beta, fixed_beta=fixed, learn=learn, dtype=dtype)

    @property
    def lam(self) -> Tensor:
        return self.log_lam.exp()

    @property
    def k(self) -> Tensor:
        return self.log_k.exp()

    @property
    def beta(self) -> Tensor:
        return torch.where(self.fixed_beta, self.beta_fixed_value, self.log_beta.exp())

    def rsample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """[n, d] draws, differentiable in lambda, k, beta: V ~ Gamma(lambda, rate beta) (implicit
        reparameterisation), xi = sign * V^(1 / 2k). The generator gives the gammas, then signs."""
        lam, k, beta = self.lam, self.k, self.beta
        seed = int(torch.randint(2**62, (1,), generator=generator))
        devices = [lam.device] if lam.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):  # the global RNG is restored on exit
            # only the generator Gamma reads: torch.manual_seed seeds every device (~1 ms)
            if lam.device.type == "cuda":
                with torch.cuda.device(lam.device):
                    torch.cuda.manual_seed(seed)
            else:
                torch.default_generator.manual_seed(seed)
            v = torch.distributions.Gamma(lam, beta).rsample((n,))
        u = torch.rand(n, self.dim, generator=generator, dtype=v.dtype, device=v.device)
        return (1 - 2 * (u < 0.5).to(v)) * (v.log() / (2 * k)).exp()

    def log_prob(self, xi: Tensor) -> Tensor:
        """log q(xi), summed over coordinates: [n]."""
        lam, k, beta = self.lam, self.k, self.beta
        a = xi.abs()
        per = (
            torch.log(2 * k)
            + lam * beta.log()
            - torch.lgamma(lam)
            + (2 * k * lam - 1) * a.log()
            - beta * a ** (2 * k)
            - math.log(2)
        )
        return per.sum(-1)

    def entropy(self) -> Tensor:
        """-E log q, analytic (reference 004 section 5(A)), log 2 per coordinate for the sign."""
        lam, k, beta = self.lam, self.k, self.beta
        per = (
            -torch.log(2 * k)
            - lam * beta.log()
            + torch.lgamma(lam)
            - (2 * k * lam - 1) * (torch.digamma(lam) - beta.log()) / (2 * k)
            + lam
            + math.log(2)
        )
        return per.sum()

    def moment(self, p) -> Tensor:
        """E|xi_j|^p = beta^(-p / 2k) Gamma(lambda + p / 2k) / Gamma(lambda), [d]; p a scalar or
        d values, each > -2 k lambda."""
        lam, k, beta = self.lam, self.k, self.beta
        e = _powers(p, lam) / (2 * k)
        return (-e * beta.log() + torch.lgamma(lam + e) - torch.lgamma(lam)).exp()


class GaussianSource(nn.Module):
    """N(mean_j, var_j) on R^d: fixed (the paper's nf_gaussian_mu0_v0), or with ``learn=True``
    the Gaussian mean-field family (mean and log variance learned)."""

    def __init__(self, d: int, mean=0.0, var=1.0, *, learn: bool = False, dtype=None):
        super().__init__()
        dtype = dtype or torch.get_default_dtype()
        var = _vector(var, d, dtype)
        if not (var > 0).all():
            raise ValueError("var must be positive")
        self.dim = d
        self.mean = nn.Parameter(_vector(mean, d, dtype), requires_grad=learn)
        self.log_var = nn.Parameter(var.log(), requires_grad=learn)

    @classmethod
    def like_gamma(cls, d: int, lambda0: float, beta0: float, *, dtype=None) -> GaussianSource:
        """The paper's baseline beside nf_gamma_lambda0_*_beta0: mu0 = lambda0 / beta0,
        v0 = lambda0 / beta0^2, the Gamma(lambda0, beta0) mean and variance."""
        return cls(d, lambda0 / beta0, lambda0 / beta0**2, dtype=dtype)

    @property
    def var(self) -> Tensor:
        return self.log_var.exp()

    def rsample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        eps = torch.randn(
            n, self.dim, generator=generator, dtype=self.mean.dtype, device=self.mean.device
        )
        return self.mean + self.var.sqrt() * eps

    def log_prob(self, xi: Tensor) -> Tensor:
        return (-0.5 * (LOG_2PI + self.log_var + (xi - self.mean) ** 2 / self.var)).sum(-1)

    def entropy(self) -> Tensor:
        return 0.5 * (self.dim * (LOG_2PI + 1) + self.log_var.sum())

    def moment(self, p) -> Tensor:
        """E xi_j^p for even integers p >= 0 (a scalar or d values): sum_i C(p, 2i)
        mean^(p - 2i) var^i (2i - 1)!!, exact with any mean."""
        ps = _powers(p, self.mean).tolist()
        if any(v < 0 or v % 2 for v in ps):
            raise ValueError(f"GaussianSource.moment needs even integers p >= 0, got {p}")
        ps = [int(v) for v in ps]
        out = []
        for j, pj in enumerate(ps):
            m, v = self.mean[j], self.var[j]
            terms = [
                math.comb(pj, 2 * i) * _double_factorial(2 * i - 1) * m ** (pj - 2 * i) * v**i
                for i in range(pj // 2 + 1)
            ]
            out.append(torch.stack(terms).sum())
        return torch.stack(out)


def _double_factorial(m: int) -> int:
    return math.prod(range(m, 0, -2)) if m > 0 else 1


class AffineCoupling(nn.Module):
    """v = r u + (1 - r) (u exp(s(r u)) + t(r u)): the coordinates with r = 1 pass through and
    condition the others (module doc). s and t: Linear(d, hidden) and ``depth`` - 1 more hidden
    Linear layers, each followed by LeakyReLU(0.01), then Linear(hidden, d); tanh on s. With
    ``identity_init`` the last layers start at zero, so the coupling starts as the identity."""

    def __init__(self, mask: Tensor, hidden: int = 16, depth: int = 3, identity_init: bool = True):
        super().__init__()
        d = mask.numel()
        self.register_buffer("mask", mask.clone())
        self.s = _mlp(d, hidden, depth, identity_init)
        self.t = _mlp(d, hidden, depth, identity_init)

    def _st(self, u: Tensor) -> tuple[Tensor, Tensor]:
        r = self.mask.to(u)
        cond = r * u
        return (1 - r) * torch.tanh(self.s(cond)), (1 - r) * self.t(cond)

    def forward(self, u: Tensor) -> tuple[Tensor, Tensor]:
        s, t = self._st(u)
        return u * s.exp() + t, s.sum(-1)

    def inverse(self, v: Tensor) -> tuple[Tensor, Tensor]:
        s, t = self._st(v)  # the kept half is the same in u and v
        return (v - t) * (-s).exp(), -s.sum(-1)


def _mlp(d: int, hidden: int, depth: int, zero_last: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    width = d
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.LeakyReLU(0.01)]
        width = hidden
    last = nn.Linear(width, d)
    if zero_last:
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)
    return nn.Sequential(*layers, last)


class Flow(nn.Module):
    """G: ``layers`` affine couplings, masks alternating by coordinate parity (r_j = 1 where
    j + layer is even). ``forward(xi) -> (w, log|det dG/dxi|)`` on [n, d]; ``inverse(w) ->
    (xi, log|det dG^-1/dw|)``. ``identity_init`` (default) zeroes each s and t's last layer: G
    starts as the identity resolution, so training starts from the source's own Psi (section
    5(A)'s g = identity) rather than from a random map that may put nK far off; the last layers
    still get gradients through the random hidden layers, so the flow learns from the first step."""

    def __init__(
        self, d: int, layers: int = 4, hidden: int = 16, depth: int = 3, identity_init: bool = True
    ):
        super().__init__()
        self.dim = d
        parity = torch.arange(d)
        self.couplings = nn.ModuleList(
            AffineCoupling(((parity + l) % 2 == 0).float(), hidden, depth, identity_init)
            for l in range(layers)
        )

    def forward(self, xi: Tensor) -> tuple[Tensor, Tensor]:
        logdet = xi.new_zeros(xi.shape[:-1])
        for c in self.couplings:
            xi, ld = c(xi)
            logdet = logdet + ld
        return xi, logdet

    def inverse(self, w: Tensor) -> tuple[Tensor, Tensor]:
        logdet = w.new_zeros(w.shape[:-1])
        for c in reversed(self.couplings):
            w, ld = c.inverse(w)
            logdet = logdet + ld
        return w, logdet


# -- Section 5(A): closed-form Psi_K on a normal crossing, identity resolution, N(0, I) prior --


def psi_normal_crossing(source: nn.Module, n: float, ks: Sequence[float]) -> Tensor:
    """Psi_K(q) = -n E_q K - KL(q || N(0, I)) for K(w) = prod_j w_j^(2 k_j), q mean-field:
    E_q K = prod_j E xi_j^(2 k_j) and KL = -H(q) + (d/2) log 2 pi + (1/2) sum_j E xi_j^2."""
    ks_t = torch.as_tensor(ks, dtype=torch.float64)
    e_k = source.moment(2 * ks_t).prod()
    kl = -source.entropy() + 0.5 * source.dim * LOG_2PI + 0.5 * source.moment(2.0).sum()
    return -n * e_k - kl


def _starts(family: str, n: float, ks: Sequence[float]) -> list[nn.Module]:
    """Three starts per family: the prior N(0, I); a Gaussian shrunk to the scale of nK (below);
    and, for the Gaussian, an off-centre one, for the gamma, the start of the theory (Bhattacharya
    et al. / Lemma C.1: lambda_j = 1 / 2k_j, k_j = K's, beta = n on the essential coordinate).
    On K = w1^2 w2^4 all three reach the same maximum to 1e-7 at every n of section 5(A)."""
    d, kmax = len(ks), max(ks)
    f64 = torch.float64
    # a Gaussian shrunk so that each factor w_j^(2 k_j) carries n^(-1/d) of nK
    var = [n ** (-1 / (d * kj)) if kj > 0 else 1.0 for kj in ks]
    if family == "gaussian":
        return [
            GaussianSource(d, 0.0, 1.0, learn=True, dtype=f64),
            GaussianSource(d, 0.0, var, learn=True, dtype=f64),
            GaussianSource(d, 0.3, 0.5, learn=True, dtype=f64),
        ]
    if family == "gamma":  # lambda = 1/2, k = 1, beta = 1 / (2 var) is N(0, var)
        lam = [1 / (2 * kj) if kj > 0 else 0.5 for kj in ks]
        k = [kj if kj > 0 else 1.0 for kj in ks]
        beta = [float(n) if kj == kmax else 1.0 for kj in ks]
        return [
            GeneralizedGamma(0.5, 1.0, [0.5] * d, dtype=f64),
            GeneralizedGamma(lam, k, beta, dtype=f64),
            GeneralizedGamma(0.5, 1.0, [1 / (2 * v) for v in var], dtype=f64),
        ]
    raise ValueError(f"family must be 'gaussian' or 'gamma', got {family!r}")


def sup_psi(family: str, n: float, ks: Sequence[float]) -> tuple[float, nn.Module]:
    """max over the mean-field ``family`` ("gaussian" or "gamma") of ``psi_normal_crossing``:
    (the maximum, the maximising source). scipy's BFGS on the unconstrained parameters with torch
    gradients in float64, from each of ``_starts``, keeping the best."""
    best: tuple[float, nn.Module] | None = None
    for source in _starts(family, n, ks):
        params = [p for p in source.parameters() if p.requires_grad]
        shapes = [p.shape for p in params]

        def load(x: np.ndarray, params=params, shapes=shapes) -> None:
            chunks = np.split(x, np.cumsum([math.prod(s) for s in shapes])[:-1])
            with torch.no_grad():
                for p, c, s in zip(params, chunks, shapes, strict=True):
                    p.copy_(torch.as_tensor(c).reshape(s))

        def objective(x: np.ndarray, source=source, params=params, load=load):
            load(x)
            value = -psi_normal_crossing(source, n, ks)
            if not torch.isfinite(value):
                return math.inf, np.zeros_like(x)
            grads = torch.autograd.grad(value, params)
            return value.item(), torch.cat([g.reshape(-1) for g in grads]).numpy()

        x0 = torch.cat([p.detach().reshape(-1) for p in params]).numpy()
        res = optimize.minimize(
            objective, x0, jac=True, method="BFGS", options={"gtol": 1e-10, "maxiter": 2000}
        )
        load(res.x)
        value = psi_normal_crossing(source, n, ks).item()
        if best is None or value > best[0]:
            best = (value, source)
    return best


def _mean_exp_crossing(a: float, ks: Sequence[float]) -> float:
    """E_{w ~ N(0, I)} exp(-a prod_j w_j^(2 k_j)), by nested quadrature (the last coordinate
    outermost), each coordinate split at the scale where its factor turns off."""
    *rest, k = ks
    if not rest:
        if k == 1:
            return 1.0 / math.sqrt(1.0 + 2.0 * a)  # the Gaussian integral, exactly
        if k == 0:
            return math.exp(-a)

        def f(w):
            return math.exp(-a * w ** (2 * k) - 0.5 * w * w)
    else:

        def f(w):
            return _mean_exp_crossing(a * w ** (2 * k), rest) * math.exp(-0.5 * w * w)

    scale = a ** (-1 / (2 * k)) if a > 0 and k > 0 else 1.0
    cuts = sorted({0.0, *(c * scale for c in (0.1, 1.0, 10.0) if c * scale < 40), 1.0, 40.0})
    total = sum(
        integrate.quad(f, lo, hi, epsabs=0, epsrel=1e-12, limit=200)[0]
        for lo, hi in itertools.pairwise(cuts)
    )
    return 2.0 * total / math.sqrt(2 * math.pi)


def log_z_bar_k(n: float, ks: Sequence[float]) -> float:
    """log Z_bar_K(n) = log int exp(-n prod_j w_j^(2 k_j)) N(w; 0, I) dw, by quadrature: the
    exact value that sup Psi_K cannot exceed (eq 2). Practical for d <= 3."""
    return math.log(_mean_exp_crossing(float(n), list(ks)))


def slope(ns: Sequence[float], psi: Sequence[float]) -> float:
    """Least-squares slope of -psi against log n: about the RLCT lambda (eq 6)."""
    return float(np.polyfit(np.log(np.asarray(ns, float)), -np.asarray(psi, float), 1)[0])


# -- Section 5(C): the objective Psi = ELBO + n S_n on a target, and its fit ------------------


@dataclass(frozen=True)
class LogLikelihood:
    """How a target's loss becomes the log-likelihood of its data:

        sum_i log p(y_i | x_i, w) = -count * (scale * loss(w) + offset),

    with ``loss`` the target's mean per-sample loss (``count`` = n) or a potential's energy
    (``count`` = 1). ``kind`` says which reading applies (``log_likelihood_scale``)."""

    kind: str  # "gaussian", "categorical" or "energy"
    count: int
    scale: float
    offset: float

    def __call__(self, target, w: Tensor, batch=None) -> Tensor:
        """[C]: sum_i log p(y_i | x_i, w) at ``w: [C, d]`` (any dtype; cast to the target's and
        back, differentiably). On a minibatch the loss is the batch's mean, so n times it is
        (n / B) sum over the batch: an unbiased estimate of the full sum."""
        x = w.to(dtype=target.dtype, device=target.device)
        loss = target.full_loss(x) if batch is None else target.loss(x, batch)
        return (-self.count * (self.scale * loss + self.offset)).to(w.dtype)


def log_likelihood_scale(target, sigma: float = 1.0) -> LogLikelihood:
    """Basin's losses read as log-likelihoods (targets carry no noise scale, landscapes.base):

    - regression networks (squared error summed over the ``out`` outputs, averaged over the
      n points, no 1/(2 sigma^2)): y ~ N(f_w(x), sigma^2 I), so
      sum_i log p = -(n out / 2) log(2 pi sigma^2) - n L_n(w) / (2 sigma^2). ``sigma`` is the
      noise sd the data were drawn with: 1 for tanh, rrr and dln; pass polynomial's
      ``noise_std``;
    - classification networks (mean cross-entropy): sum_i log p = -n L_n(w);
    - potentials (``n`` None, the energy is the loss): the energy read as -sum_i log p itself,
      sum_i log p = -E(w). For normal-crossing, E = n K(w) with K(w0) = 0, so Psi is the
      deterministic Psi_K of section 5(A); its ELBO is that of exp(-E) phi (no constant)."""
    if target.n is None:
        return LogLikelihood("energy", 1, 1.0, 0.0)
    task = getattr(target, "task", None)
    if task == "classification":
        return LogLikelihood("categorical", target.n, 1.0, 0.0)
    if task == "regression":
        if not sigma > 0:
            raise ValueError(f"sigma must be > 0, got {sigma}")
        log_norm = 0.5 * target.y.shape[-1] * math.log(2 * math.pi * sigma**2)  # per point
        return LogLikelihood("gaussian", target.n, 1 / (2 * sigma**2), log_norm)
    raise ValueError(f"{target.name}: no likelihood reading for a target with n but no task")


def log_normal(w: Tensor, mean, std) -> Tensor:
    """[C]: log N(w; mean, std^2 I), ``mean`` and ``std`` scalars or [d]."""
    mean, std = (torch.as_tensor(v, dtype=w.dtype, device=w.device) for v in (mean, std))
    z = (w - mean) / std
    return (-0.5 * (LOG_2PI + z * z) - std.log().expand_as(w)).sum(-1)


@dataclass
class PsiEstimate:
    """One Monte Carlo estimate (``psi_estimate``); tensors keep their graph for training.

    psi = -n_k + log_prior + log_det + entropy     (None where the target has no w0)
    elbo = log_lik + log_prior + log_det + entropy, and psi = elbo + n_s on the full data.
    ``value`` is what ``fit`` maximises and plots: psi, or the ELBO where psi is None."""

    value: Tensor
    psi: Tensor | None
    elbo: Tensor
    log_lik: Tensor  # E_q sum_i log p(y_i | x_i, G(xi)), n / B times the batch's sum
    n_k: Tensor | None  # E_q n K_n(G(xi)), on the same points at G(xi) and at w0
    log_prior: Tensor  # E_q log phi(G(xi))
    log_det: Tensor  # E_q log|G'(xi)|
    entropy: Tensor  # H(q), analytic
    n_s: float | None  # n S_n = -sum_i log p(y_i | x_i, w0), full data only (batch None)
    # Monte Carlo standard error of ``value`` over the draws (the entropy is exact); on all n
    # points only (the final estimate): a minibatch step would pay a host sync for nothing
    se: float | None


def psi_estimate(
    target,
    source: nn.Module,
    flow: nn.Module,
    prior_mean,
    prior_std,
    samples: int,
    generator: torch.Generator | None,
    batch=None,
    sigma: float = 1.0,
) -> PsiEstimate:
    """Psi = E_q[-n K_n(G(xi))] + E_q[log phi(G(xi)) + log|G'(xi)|] + H(q) (reference 004 eq 2-3)
    over ``samples`` draws xi ~ q, the draws batched as the target's chains. phi = N(prior_mean,
    prior_std^2 I): reference 004's prior pairs such as (5, 100) are (mean, VARIANCE), so
    (5, 100) is prior_std = 10 (the paper's code takes --prior_dist "mean and variance").

    n K_n(w) = sum_i [log p(y_i | x_i, w0) - log p(y_i | x_i, w)] (``log_likelihood_scale``),
    both terms on the same ``batch`` (None: all n points), so the w0 term cancels the data's
    noise and a minibatch estimate stays unbiased. Without a truth w0 there is no n S_n: psi is
    None and ``value`` is the ELBO. A prior the target defines itself (normal-crossing's
    prior_std, an MLP's) is not used: phi is this one."""
    if not (torch.as_tensor(prior_std) > 0).all():
        raise ValueError(f"prior_std must be > 0, got {prior_std}")
    lik = log_likelihood_scale(target, sigma)
    xi = source.rsample(samples, generator)
    w, log_det = flow(xi)
    w0 = None if target.w0 is None else target.w0.to(w)[None]
    log_lik_all = lik(target, w if w0 is None else torch.cat([w, w0]), batch)
    log_lik = log_lik_all[:samples]
    log_prior = log_normal(w, prior_mean, prior_std)
    entropy = source.entropy().to(w)
    rest = log_prior.mean() + log_det.mean() + entropy
    se = None
    if batch is None:
        per_draw = (log_lik if w0 is None else log_lik - log_lik_all[samples]) + log_prior
        per_draw = per_draw + log_det
        se = per_draw.detach().std().item() / math.sqrt(samples) if samples > 1 else math.inf
    elbo = log_lik.mean() + rest
    psi = n_k = n_s = None
    if w0 is not None:
        n_k = (log_lik_all[samples] - log_lik).mean()
        psi = -n_k + rest
        if batch is None:
            n_s = -log_lik_all[samples].item()
    return PsiEstimate(
        psi if psi is not None else elbo,
        psi,
        elbo,
        log_lik.mean(),
        n_k,
        log_prior.mean(),
        log_det.mean(),
        entropy,
        n_s,
        se,
    )


@dataclass
class FitResult:
    """``curve``: per epoch, the mean of its minibatch estimates of Psi (the ELBO without w0).
    ``psi``, ``elbo``, ``n_s``: the final full-data estimate with ``final_samples`` draws and the
    analytic entropy (None when the fit diverged). ``epochs``: completed epochs. ``diverged``:
    a non-finite objective or gradient, or an update that left the source degenerate (lambda, k
    or beta at 0 or inf), stopped the fit in epoch ``diverged_epoch`` (1-based); that step's
    update is not kept, so the parameters are the last usable ones. ``stopped``: the
    ``on_epoch`` callback asked to stop."""

    curve: list[float]
    psi: float | None
    elbo: float | None
    n_s: float | None
    final: PsiEstimate | None
    epochs: int
    steps: int
    diverged: bool = False
    diverged_epoch: int | None = None
    stopped: bool = False
    seconds: float = 0.0


def param_groups(source: nn.Module, flow: nn.Module, lr_flow, lr_k, lr_lambda_beta) -> list[dict]:
    """Adam's groups (reference 004 section 2): the flow's weights and k at 1e-3, lambda and
    beta (a learned Gaussian's mean and log variance too) at 1e-1; frozen parameters left out."""
    k = [p for name, p in source.named_parameters() if name == "log_k" and p.requires_grad]
    other = [p for name, p in source.named_parameters() if name != "log_k" and p.requires_grad]
    weights = [p for p in flow.parameters() if p.requires_grad]
    groups = [(weights, lr_flow), (k, lr_k), (other, lr_lambda_beta)]
    return [{"params": params, "lr": lr} for params, lr in groups if params]


def epoch_batches(target, batch_fraction: float, generator: torch.Generator) -> list:
    """One epoch's minibatches: a random permutation of the n points cut into batches of
    round(n * batch_fraction) (the last one may be smaller), drawn without replacement. A
    potential has no data: round(1 / batch_fraction) full evaluations (batch None), so an
    epoch is as many steps as on a network."""
    if not 0 < batch_fraction <= 1:
        raise ValueError(f"batch_fraction must be in (0, 1], got {batch_fraction}")
    if target.n is None:
        return [None] * max(1, round(1 / batch_fraction))
    size = max(1, round(target.n * batch_fraction))
    order = torch.randperm(target.n, generator=generator).to(target.device)
    return [target.batch(index) for index in order.split(size)]


def _finite(value: Tensor, params: list[Tensor]) -> bool:
    """The objective and every gradient finite: safe to step (one check, one host sync)."""
    grads = [p.grad.reshape(-1) for p in params if p.grad is not None]
    return bool(torch.isfinite(torch.cat([value.reshape(1).detach(), *grads])).all())


def _usable(source: nn.Module, params: list[Tensor]) -> bool:
    """The source's parameters finite and its entropy too: lambda, k and beta (exp of the
    stored logs) are neither 0 nor inf, so it can still be sampled. (An Adam step from finite
    gradients moves each weight by at most about its learning rate: the flow stays finite.)"""
    with torch.no_grad():
        finite = bool(torch.isfinite(torch.cat([p.reshape(-1) for p in params])).all())
        return finite and bool(torch.isfinite(source.entropy()))


def fit(
    target,
    source: nn.Module,
    flow: nn.Module,
    *,
    prior_mean,
    prior_std,
    epochs: int,
    batch_fraction: float = 0.1,
    samples: int = 5,
    lr_flow: float = 1e-3,
    lr_k: float = 1e-3,
    lr_lambda_beta: float = 1e-1,
    generator: torch.Generator,
    on_epoch=None,
    sigma: float = 1.0,
    final_samples: int = 100,
) -> FitResult:
    """Maximise Psi (the ELBO without w0) over the flow and the source's learnable parameters
    with Adam (``param_groups``), ``samples`` draws per step on minibatches of n *
    ``batch_fraction`` without replacement (reference 004: M = 5, n / 10, so 10 steps an
    epoch). ``on_epoch(epoch, value) -> bool`` sees each epoch's mean objective (a live curve)
    and stops the fit by returning True. A NaN or Inf objective or gradient, or an update that
    leaves the source degenerate, stops it with ``diverged`` set; nothing raises. The end: Psi
    on all n points with ``final_samples`` draws and the analytic entropy (reference 004
    section 2's evaluation). One host sync a step (the finiteness check): CPU-sized work."""
    start = time.perf_counter()
    groups = param_groups(source, flow, lr_flow, lr_k, lr_lambda_beta)
    params = [p for g in groups for p in g["params"]]
    own = [p for p in source.parameters() if p.requires_grad]  # what a step can make degenerate
    optimiser = torch.optim.Adam(groups, foreach=True)  # one kernel per group: ~1 ms a step less
    curve: list[float] = []
    steps, diverged_epoch, stopped = 0, None, False
    for epoch in range(1, epochs + 1):
        total, count = 0.0, 0
        for batch in epoch_batches(target, batch_fraction, generator):
            optimiser.zero_grad()
            value = psi_estimate(
                target, source, flow, prior_mean, prior_std, samples, generator, batch, sigma
            ).value
            if torch.isfinite(value):
                (-value).backward()
            if not _finite(value, params):
                diverged_epoch = epoch
                break
            last = parameters_to_vector(params).detach()  # one copy, to undo a bad step
            optimiser.step()
            if own and not _usable(source, own):  # e.g. beta = exp(log beta) overflowed
                with torch.no_grad():
                    vector_to_parameters(last, params)
                diverged_epoch = epoch
                break
            steps += 1
            total, count = total + value.item(), count + 1
        if diverged_epoch is not None:
            break
        curve.append(total / count)
        if on_epoch is not None and on_epoch(epoch, curve[-1]):
            stopped = True
            break
    final = None
    if diverged_epoch is None:
        with torch.no_grad():
            final = psi_estimate(
                target, source, flow, prior_mean, prior_std, final_samples, generator, None, sigma
            )
        if not torch.isfinite(final.value):
            diverged_epoch, final = len(curve), None
    return FitResult(
        curve,
        psi=None if final is None or final.psi is None else final.psi.item(),
        elbo=None if final is None else final.elbo.item(),
        n_s=None if final is None else final.n_s,
        final=final,
        epochs=len(curve),
        steps=steps,
        diverged=diverged_epoch is not None,
        diverged_epoch=diverged_epoch,
        stopped=stopped,
        seconds=time.perf_counter() - start,
    )


def log_z_bar_tanh1(n: float, x, y, prior_mean, prior_std, sigma: float = 1.0) -> float:
    """log Z_bar(n) = log int exp(-n K_n(a, b)) phi(a, b) da db for the tanh net with H = 1,
    f(x) = b tanh(a x), truth w0 = 0, phi = N(prior_mean, prior_std^2 I) on w = (a, b), K_n the
    mean over the given points (x, y) (so n = len(x) is the posterior; another n tempers it).
    The bound Psi <= log Z_bar (reference 004 eq 2) for section 5(C)'s H = 1 check.

    With t_i = tanh(a x_i), n K_n = (c/2) (A b^2 - 2 B b) with A = sum t_i^2, B = sum y_i t_i,
    c = n / (len(x) sigma^2): quadratic in b, so the b integral is a Gaussian one in closed form,
        I(a) = int exp(-n K_n) N(b; m_b, s_b^2) db
             = exp((M^2 / P - m_b^2 / s_b^2) / 2) / (s_b P^0.5),
    P = c A + 1 / s_b^2, M = c B + m_b / s_b^2, and log Z_bar = log int N(a; m_a, s_a^2) I(a) da
    by adaptive quadrature. I(a) falls from 1 at a = 0 (where b is free) over the scale
    a* = 1 / (s_b (c sum x^2)^0.5) (the singular axis, about 0.006 at n = 1000, s_b = 10), so the
    a range (m_a +- 40 s_a) is cut at 0, +-a* 10^k and the saturation scale +-1, +-3. Checked
    in tests/test_vi.py against a 2-D trapezoid on sinh-spaced (a, b) grids of 750^2 and 1500^2
    points (no closed-form b integral): all three agree to 1e-13 at n = 1000, prior N(5, 10^2)."""
    x = np.asarray(x, dtype=float).reshape(-1)
    y = np.asarray(y, dtype=float).reshape(-1)
    (m_a, m_b), (s_a, s_b) = np.broadcast_to(prior_mean, 2), np.broadcast_to(prior_std, 2)
    c = n / (len(x) * sigma**2)

    def log_inner(a: float) -> float:
        t = np.tanh(a * x)
        p = c * (t @ t) + 1 / s_b**2
        m = c * (y @ t) + m_b / s_b**2
        return 0.5 * (m * m / p - m_b**2 / s_b**2) - 0.5 * math.log(s_b**2 * p)

    lo, hi = m_a - 40 * s_a, m_a + 40 * s_a
    a_star = 1 / (s_b * math.sqrt(c * (x @ x)))
    marks = [0.0, m_a, 1.0, -1.0, 3.0, -3.0]
    marks += [sign * a_star * 10.0**k for k in range(-1, 4) for sign in (1, -1)]
    cuts = sorted({lo, hi, *(v for v in marks if lo < v < hi)})
    shift = max(log_inner(v) + _log_normal_1d(v, m_a, s_a) for v in cuts)

    def f(a: float) -> float:
        return math.exp(log_inner(a) + _log_normal_1d(a, m_a, s_a) - shift)

    total = sum(
        integrate.quad(f, u, v, epsabs=0, epsrel=1e-12, limit=200)[0]
        for u, v in itertools.pairwise(cuts)
    )
    return math.log(total) + shift


def _log_normal_1d(v: float, mean: float, std: float) -> float:
    return -0.5 * (LOG_2PI + ((v - mean) / std) ** 2) - math.log(std)
