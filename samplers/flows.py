"""The variational family of "Variational inference via resolution of singularities" (the VI
paper; docs/methods/vi.md): mean-field sources and the normalizing flow G.

Sources (``torch.nn.Module``; ``rsample(n, generator) -> [n, d]``, ``log_prob(xi) -> [n]``,
``entropy() -> []``, ``moment(p) -> [d]`` = E|xi_j|^p):

- ``GeneralizedGamma``: q(xi_j) ∝ |xi_j|^(2 k_j lambda_j - 1) exp(-beta_j |xi_j|^(2 k_j)) on R, the
  paper's untruncated family (h = 2 k lambda - 1) on |xi_j| with a fair random sign. Its lambda, k,
  beta are stored as logs and mapped through exp: positive, and scale-free, so one learning rate
  moves beta = 1 and beta = n = 1e6 by the same factor (beta spans six decades in the
  normal-crossing check). The paper's nf_gamma_lambda0_k0_beta0 start is
  ``GeneralizedGamma.paper_init``.
- ``GaussianSource``: N(mean_j, var_j), fixed by default (the paper's nf_gaussian_mu0_v0); with
  ``learn=True`` it is the Gaussian mean-field family.

Draws are reproducible from a ``torch.Generator``: torch.distributions.Gamma(lambda, beta).rsample
reads the global RNG (it takes no generator), so ``GeneralizedGamma.rsample`` draws a seed from
the caller's generator and runs Gamma.rsample inside ``torch.random.fork_rng`` seeded with it:
the public API's law and implicit reparameterised gradients, and the global RNG as it was
before (no private torch API). The sign is then a uniform draw from the caller's generator.

``Flow``: affine couplings (RealNVP) with alternating parity masks r. The VI paper (Sec. 6)
writes v = (1-r) u + r (u exp(s(r u)) + t(r u)), which conditions on the same half it transforms
(its Jacobian is then not triangular); here the masked half is kept and conditions the other:
v = r u + (1-r) (u exp(s(r u)) + t(r u)), log|det| = sum (1-r) s(r u). With d = 1, a layer whose
mask keeps the coordinate is the identity and one whose mask transforms it conditions on nothing
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

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
        with beta_1 fixed at n (the essential coordinate taken first, the VI paper's Sec. 6)."""
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
        """-E log q, analytic (the VI paper's App. B.2), log 2 per coordinate for the sign."""
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
    starts as the identity resolution, so training starts from the source's own Psi (the
    normal-crossing check's g = identity) rather than from a random map that may put nK far off;
    the last layers still get gradients through the random hidden layers, so the flow learns from
    the first step."""

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
