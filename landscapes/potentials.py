"""Toy energies with exact truths, for exploring and teaching.

Each potential's ``loss`` is its energy U(w) = -log p(w) up to the constant ``log_z``; it is
sampled with nbeta = 1. The teaching potentials use the MCMC Interactive Gallery's definitions;
the funnels follow Neal (2003) and the SGRLD paper (Yu et al., Sec. 4.2). Gradients are analytic and
tested against autograd.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from .base import Batch, ParamError, Target, as_tuple
from .formula import compile_formula
from .truths import normal_crossing_llc_at, normal_crossing_rlct

LOG_2PI = math.log(2 * math.pi)


def _normal_logpdf(var: float) -> Callable[[Tensor], Tensor]:
    return lambda x: -0.5 * (LOG_2PI + math.log(var) + x * x / var)


def _randn(generator: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
    return torch.randn(*shape, generator=generator, device=generator.device, dtype=dtype)


def _rand(generator: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
    return torch.rand(*shape, generator=generator, device=generator.device, dtype=dtype)


def haar_rotation(dim: int, seed: int) -> Tensor:
    """A Haar-distributed orthogonal matrix (QR of a Gaussian matrix with the sign fix)."""
    g = torch.Generator().manual_seed(seed)
    q, r = torch.linalg.qr(torch.randn(dim, dim, generator=g, dtype=torch.float64))
    return q * torch.sign(torch.diagonal(r))


class Gaussian(Target):
    """N(0, cov) with cov = R diag(stds^2) R^T; energy 1/2 w^T P w with P = cov^-1."""

    def __init__(
        self, stds: tuple[float, ...], rotation: Tensor | None = None, name: str = "gaussian"
    ):
        self.name, self.dim = name, len(stds)
        self.layout = {"w": (self.dim,)}
        s = torch.tensor(stds, dtype=torch.float64)
        rot = torch.eye(self.dim, dtype=torch.float64) if rotation is None else rotation
        self.factor = rot * s  # cov = factor @ factor.T, so w = z @ factor.T is exact
        self.cov = self.factor @ self.factor.T
        self.precision = (rot / s**2) @ rot.T
        self.mean = torch.zeros(self.dim, dtype=torch.float64)
        self.minimum = self.mean.clone()  # the mode: where an LLC's w0 "truth" starts
        self.log_z = 0.5 * self.dim * LOG_2PI + float(torch.log(s).sum())
        self.marginals = {i: _normal_logpdf(float(self.cov[i, i])) for i in range(self.dim)}
        if self.dim >= 2:
            sx, sy = (3.5 * math.sqrt(float(self.cov[i, i])) for i in (0, 1))
            self.bounds = ((-sx, sx), (-sy, sy))

    def _loss(self, w: Tensor, batch: Batch) -> Tensor:
        return 0.5 * ((w @ self.precision) * w).sum(-1)

    def _grad(self, w: Tensor, batch: Batch) -> Tensor:
        return w @ self.precision

    def exact_sample(self, generator: torch.Generator, chains: int) -> Tensor:
        return _randn(generator, (chains, self.dim), self.dtype) @ self.factor.T


def make_gaussian(
    dim: int, scales: tuple[float, ...], condition: float, rotate: bool, seed: int
) -> Gaussian:
    stds = as_tuple(scales, dim, "gaussian.scales")
    if condition != 1.0:
        if dim < 2:
            raise ParamError(
                "gaussian.condition", "needs dim >= 2 (a 1-D Gaussian has condition 1)"
            )
        if len(set(stds)) != 1:
            raise ParamError(
                "gaussian.condition",
                "set either per-coordinate scales or a condition number, not both",
            )
        # Variances log-spaced from s^2 down to s^2/condition: cov has condition number `condition`.
        stds = tuple(stds[0] * condition ** (-0.5 * i / (dim - 1)) for i in range(dim))
    return Gaussian(stds, haar_rotation(dim, seed) if rotate else None)


def make_harmonic(dim: int, a: float) -> Gaussian:
    """L = a |theta|^2 (TATi's harmonic oscillator): exactly N(0, 1/(2a)) per coordinate."""
    return Gaussian((1.0 / math.sqrt(2 * a),) * dim, name="harmonic")


def _column(x: Tensor, i: int) -> Tensor:
    """[d] bool, True at column i (i < 0 counts from the end) of x [C, d].

    The functions a step evaluates (energies, gradients) assemble their [C, d] results with
    ``torch.where`` on such a mask, not with torch.stack/cat of columns: compiled, every stacked
    piece is a buffer allocated at each step, which at 64 chains costs more than the arithmetic,
    while this mask is an iota the compiler folds away (measured: SGLD on the banana at 64
    chains 1.35x faster; a stored mask or unit vector, loaded from memory, gave 1.1x). Eager,
    it is one small kernel on the tensor's device, never a host copy."""
    return torch.arange(x.shape[-1], device=x.device) == i % x.shape[-1]


class TwistedGaussian(Target):
    """x such that y = T(x) ~ N(mu, Sigma) for a unit-Jacobian map T, so log p(x) = log N(T(x)).

    Subclasses give ``forward`` (T), ``pullback`` (J^T g) and ``inverse`` (T^-1, for exact draws).
    ``forward`` and ``pullback`` take and return the two coordinates as [C, 1] columns, with
    the constants as Python numbers: a compiled step then reads each position once and keeps
    every intermediate in registers (a [C, 2] intermediate read column by column is a buffer).
    """

    def __init__(
        self,
        name: str,
        mu: tuple[float, float],
        sigma: list[list[float]],
        bounds: tuple[tuple[float, float], tuple[float, float]],
    ):
        self.name, self.dim, self.layout, self.bounds = name, 2, {"w": (2,)}, bounds
        self.mu = torch.tensor(mu, dtype=torch.float64)
        self.sigma = torch.tensor(sigma, dtype=torch.float64)
        self.sigma_inv = torch.linalg.inv(self.sigma)
        self.chol = torch.linalg.cholesky(self.sigma)
        self.log_z = LOG_2PI + 0.5 * float(torch.logdet(self.sigma))
        self.constants = (*mu, *self.sigma_inv.flatten().tolist())
        # The mode: p(x) = N(T(x); mu, Sigma) exactly (|det J_T| = 1), largest where T(x) = mu.
        self.minimum = self.inverse(self.mu[None])[0]

    def _whitened(self, w: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """r = T(w) - mu and s = Sigma^-1 r, as [C, 1] columns r0, r1, s0, s1."""
        return self._whiten(w[:, :1], w[:, 1:])

    def _whiten(self, x0: Tensor, x1: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``_whitened`` of the position's two columns."""
        m0, m1, p00, p01, p10, p11 = self.constants
        y0, y1 = self.forward(x0, x1)
        r0, r1 = y0 - m0, y1 - m1
        return r0, r1, r0 * p00 + r1 * p10, r0 * p01 + r1 * p11

    @staticmethod
    def _energy(r0: Tensor, r1: Tensor, s0: Tensor, s1: Tensor) -> Tensor:
        """-log N(T(w)) up to its constant: r^T Sigma^-1 r / 2, [C]."""
        return 0.5 * (r0 * s0 + r1 * s1)[:, 0]

    def _loss(self, w: Tensor, batch: Batch) -> Tensor:
        return self._energy(*self._whitened(w))

    def _grad(self, w: Tensor, batch: Batch) -> Tensor:
        return self._loss_and_grad(w, batch)[1]

    def _loss_and_grad(self, w: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
        # one T(w) for both: two would be two equal buffers a step in a compiled chunk
        x0, x1 = w[:, :1], w[:, 1:]
        r0, r1, s0, s1 = self._whiten(x0, x1)
        g0, g1 = self.pullback(x0, x1, s0, s1)
        if torch.compiler.is_compiling():
            grad = torch.where(_column(w, 0), g0, g1)
        else:  # eager, one operation where the mask takes three (the same numbers)
            grad = torch.cat([g0, g1], 1)
        return self._energy(r0, r1, s0, s1), grad

    def exact_sample(self, generator: torch.Generator, chains: int) -> Tensor:
        y = self.mu + _randn(generator, (chains, 2), self.dtype) @ self.chol.T
        return self.inverse(y)


class Banana(TwistedGaussian):
    """y0 = x0/a, y1 = a x1 + a b (x0^2 + a^2), y ~ N([0, 4], [[1, .5], [.5, 1]])."""

    def __init__(self, a: float = 2.0, b: float = 0.2):
        self.a, self.b = a, b
        super().__init__("banana", (0.0, 4.0), [[1.0, 0.5], [0.5, 1.0]], ((-6, 6), (-12, 3)))

    def forward(self, x0: Tensor, x1: Tensor) -> tuple[Tensor, Tensor]:
        a, b = self.a, self.b
        return x0 / a, a * x1 + a * b * (x0 * x0 + a * a)

    def pullback(self, x0: Tensor, x1: Tensor, g0: Tensor, g1: Tensor) -> tuple[Tensor, Tensor]:
        a, b = self.a, self.b
        return g0 / a + 2 * a * b * x0 * g1, a * g1

    def inverse(self, y: Tensor) -> Tensor:
        a, b = self.a, self.b
        x0 = a * y[:, 0]
        return torch.stack([x0, (y[:, 1] - a * b * (x0**2 + a * a)) / a], -1)


class Squiggle(TwistedGaussian):
    """y = (x0, x1 + sin 5 x0), y ~ N(0, [[2, .25], [.25, .5]])."""

    def __init__(self):
        super().__init__("squiggle", (0.0, 0.0), [[2.0, 0.25], [0.25, 0.5]], ((-5, 5), (-3.5, 3.5)))

    def forward(self, x0: Tensor, x1: Tensor) -> tuple[Tensor, Tensor]:
        return x0, x1 + torch.sin(5 * x0)

    def pullback(self, x0: Tensor, x1: Tensor, g0: Tensor, g1: Tensor) -> tuple[Tensor, Tensor]:
        return g0 + 5 * torch.cos(5 * x0) * g1, g1

    def inverse(self, y: Tensor) -> Tensor:
        return torch.stack([y[:, 0], y[:, 1] - torch.sin(5 * y[:, 0])], -1)


class Donut(Target):
    """log p = -(|x| - radius)^2 / width: a ring; its radius has a 1-D law r exp(-(r-R)^2/width)."""

    def __init__(self, radius: float = 2.6, width: float = 0.033):
        self.name, self.dim, self.layout = "donut", 2, {"w": (2,)}
        self.radius, self.width = radius, width
        edge = radius + 1.5
        self.bounds = ((-edge, edge), (-edge, edge))
        # Z = 2 pi int_0^inf r exp(-(r-R)^2 / (2 s^2)) dr with s^2 = width / 2.
        s2, mu = width / 2, radius
        s = math.sqrt(s2)
        radial = s2 * math.exp(-mu * mu / (2 * s2)) + mu * s * math.sqrt(2 * math.pi) * (
            0.5 * math.erfc(-mu / (s * math.sqrt(2)))
        )
        self.log_z = math.log(2 * math.pi * radial)

    def _loss(self, w: Tensor, batch: Batch) -> Tensor:
        r = torch.linalg.vector_norm(w, dim=-1)
        return (r - self.radius) ** 2 / self.width

    def _grad(self, w: Tensor, batch: Batch) -> Tensor:
        r = torch.linalg.vector_norm(w, dim=-1, keepdim=True)
        # At the origin the energy has a cone point; 0 is its (sub)gradient of least norm.
        unit = torch.where(r > 0, w / r.clamp_min(torch.finfo(w.dtype).tiny), torch.zeros_like(w))
        return 2 * (r - self.radius) / self.width * unit

    def exact_sample(self, generator: torch.Generator, chains: int) -> Tensor:
        # Radius by rejection from N(m, s^2) with m the mode of r exp(-(r-R)^2/(2 s^2)): the
        # ratio target/proposal is proportional to r exp(-r/m), so accept with (r/m) e^(1 - r/m).
        s2, mu = self.width / 2, self.radius
        m = 0.5 * (mu + math.sqrt(mu * mu + 4 * s2))
        r = torch.empty(chains, device=generator.device, dtype=self.dtype)
        todo = torch.ones(chains, dtype=torch.bool, device=generator.device)
        while bool(todo.any()):
            k = int(todo.sum())
            prop = m + math.sqrt(s2) * _randn(generator, (k,), self.dtype)
            u = _rand(generator, (k,), self.dtype)
            ok = (prop > 0) & (u < (prop / m) * torch.exp(1 - prop / m))
            idx = todo.nonzero().squeeze(-1)[ok]
            r[idx] = prop[ok]
            todo[idx] = False
        theta = 2 * math.pi * _rand(generator, (chains,), self.dtype)
        return torch.stack([r * torch.cos(theta), r * torch.sin(theta)], -1)


class Mixture(Target):
    """Equal-weight mixture of isotropic Gaussians (the Gallery's three-mode example)."""

    MEANS = ((-1.5, -1.5), (1.5, 1.5), (-2.0, 2.0))
    VARIANCES = (0.8, 0.8, 0.5)

    def __init__(self):
        self.name, self.dim, self.layout = "mixture", 2, {"w": (2,)}
        self.bounds = ((-5, 5), (-5, 5))
        self.means = torch.tensor(self.MEANS, dtype=torch.float64)
        self.variances = torch.tensor(self.VARIANCES, dtype=torch.float64)
        k = len(self.MEANS)
        self.log_z = 0.0
        self.mean = self.means.mean(0)
        second = (
            sum(
                v * torch.eye(2, dtype=torch.float64) + torch.outer(m, m)
                for m, v in zip(self.means, self.variances, strict=True)
            )
            / k
        )
        self.cov = second - torch.outer(self.mean, self.mean)
        self.marginals = {i: self._marginal(i) for i in range(2)}

    def _log_components(self, w):
        diff = w[:, None, :] - self.means  # [C, K, 2]
        return (
            -math.log(len(self.MEANS))
            - torch.log(2 * math.pi * self.variances)
            - 0.5 * (diff * diff).sum(-1) / self.variances
        ), diff

    def _loss(self, w: Tensor, batch: Batch) -> Tensor:
        return -torch.logsumexp(self._log_components(w)[0], dim=-1)

    def _grad(self, w: Tensor, batch: Batch) -> Tensor:
        logc, diff = self._log_components(w)
        resp = torch.softmax(logc, dim=-1)  # [C, K]
        return ((resp / self.variances)[..., None] * diff).sum(1)

    def _marginal(self, i):
        def logpdf(x):
            var = self.variances.to(x)
            mu = self.means[:, i].to(x)
            comp = -0.5 * (LOG_2PI + torch.log(var) + (x[..., None] - mu) ** 2 / var)
            return torch.logsumexp(comp, -1) - math.log(len(self.MEANS))

        return logpdf

    def exact_sample(self, generator: torch.Generator, chains: int) -> Tensor:
        k = torch.randint(len(self.MEANS), (chains,), generator=generator, device=generator.device)
        z = _randn(generator, (chains, 2), self.dtype)
        return self.means[k] + self.variances[k].sqrt()[:, None] * z


class Funnel(Target):
    """Neal's funnel: v ~ N(0, 3^2), x_i | v ~ N(0, e^v), i < D-1. Coordinates (x_1..x_{D-1}, v)."""

    SCALE = 3.0

    def __init__(self, dim: int = 10):
        self.name, self.dim = "funnel", dim
        self.layout = {"x": (dim - 1,), "v": (1,)}
        self.bounds = ((-20, 20), (-9, 9))
        var = self.SCALE**2
        self.log_z = 0.5 * dim * LOG_2PI + math.log(self.SCALE)
        self.marginals = {dim - 1: _normal_logpdf(var)}
        self.mean = torch.zeros(dim, dtype=torch.float64)
        # Var x_i = E e^v = e^(9/2); x_i and v are uncorrelated.
        self.cov = torch.diag(
            torch.tensor([math.exp(var / 2)] * (dim - 1) + [var], dtype=torch.float64)
        )

    def _loss(self, w: Tensor, batch: Batch) -> Tensor:
        x, v = w[:, :-1], w[:, -1]
        return (
            v * v / (2 * self.SCALE**2)
            + 0.5 * (self.dim - 1) * v
            + 0.5 * (x * x).sum(-1) * torch.exp(-v)
        )

    def _grad(self, w: Tensor, batch: Batch) -> Tensor:
        x, v = w[:, :-1], w[:, -1]
        ev = torch.exp(-v)
        gv = v / self.SCALE**2 + 0.5 * (self.dim - 1) - 0.5 * (x * x).sum(-1) * ev
        return torch.where(_column(w, -1), gv[:, None], w * ev[:, None])  # (x e^-v, gv)

    def exact_sample(self, generator: torch.Generator, chains: int) -> Tensor:
        v = self.SCALE * _randn(generator, (chains, 1), self.dtype)
        x = torch.exp(v / 2) * _randn(generator, (chains, self.dim - 1), self.dtype)
        return torch.cat([x, v], -1)


def log_softplus(v: Tensor) -> Tensor:
    """log(log(1 + e^v)) without underflow for very negative v (where it is v - e^v/2 + ...)."""
    return torch.where(
        v < -15, v - 0.5 * torch.exp(v.clamp_max(-15)), torch.log(F.softplus(v.clamp_min(-15)))
    )


class SoftplusFunnel(Target):
    """The SGRLD funnel: x | v ~ N(mu, softplus(v) I), v ~ N(0, sigma2); mu = 2, sigma2 = 80.

    softplus(v) is the variance. Coordinates (x_1..x_{D-1}, v). Each x_i has the marginal
    int N(x; mu, softplus(v)) N(v; 0, sigma2) dv, by quadrature over v.
    """

    QUADRATURE = 4001  # nodes over v in [-12 sd, 12 sd]: the log-integrand is smooth there

    def __init__(self, dim: int = 2, mu: float = 2.0, sigma2: float = 80.0):
        self.name, self.dim, self.mu, self.sigma2 = "softplus-funnel", dim, mu, sigma2
        self.layout = {"x": (dim - 1,), "v": (1,)}
        self.bounds = ((-5, 9), (-25, 25))
        self.log_z = 0.5 * (dim - 1) * LOG_2PI + 0.5 * (LOG_2PI + math.log(sigma2))
        self.marginals = dict.fromkeys(range(dim - 1), self._x_marginal)
        self.marginals[dim - 1] = _normal_logpdf(sigma2)

    def _nodes(self) -> tuple[Tensor, Tensor, Tensor]:
        """v, log softplus(v) and log(N(v; 0, sigma2) x trapezoid weight) of the quadrature."""
        sd = math.sqrt(self.sigma2)
        v = torch.linspace(-12 * sd, 12 * sd, self.QUADRATURE, dtype=torch.float64)
        log_w = -0.5 * (LOG_2PI + math.log(self.sigma2) + v * v / self.sigma2)
        log_w = log_w + math.log(float(v[1] - v[0]))
        log_w[[0, -1]] -= math.log(2)
        return v, log_softplus(v), log_w

    def _x_marginal(self, x: Tensor) -> Tensor:
        """log p(x_i), any shape of x. It has a cusp at mu: deep in the neck (v < -14, 6% of
        the mass) x lies within 1e-3 of mu, so histograms compare best with ``x_cdf``."""
        _, logsp, log_w = self._nodes()

        def part(x: Tensor) -> Tensor:
            z = (x[:, None] - self.mu) ** 2
            return torch.logsumexp(log_w - 0.5 * (LOG_2PI + logsp) - 0.5 * z / logsp.exp(), -1)

        return self._by_chunks(part, x)

    def x_cdf(self, x: Tensor) -> Tensor:
        """P(x_i <= x), any shape of x: int Phi((x - mu) / sqrt(softplus(v))) N(v; 0, sigma2) dv."""
        _, logsp, log_w = self._nodes()

        def part(x: Tensor) -> Tensor:
            return (
                torch.special.ndtr((x[:, None] - self.mu) * torch.exp(-0.5 * logsp)) @ log_w.exp()
            )

        return self._by_chunks(part, x)

    @staticmethod
    def _by_chunks(fn, x: Tensor, size: int = 2048) -> Tensor:
        """``fn`` over x's elements (float64, ``size`` at a time: each holds ``QUADRATURE``)."""
        flat = x.detach().double().reshape(-1).cpu()
        out = torch.cat([fn(flat[s : s + size]) for s in range(0, len(flat), size)] or [flat])
        return out.reshape(x.shape).to(x)

    def _loss(self, w: Tensor, batch: Batch) -> Tensor:
        x, v = w[:, :-1] - self.mu, w[:, -1]
        logsp = log_softplus(v)
        return (
            0.5 * (self.dim - 1) * logsp
            + 0.5 * (x * x).sum(-1) * torch.exp(-logsp)
            + v * v / (2 * self.sigma2)
        )

    def _grad(self, w: Tensor, batch: Batch) -> Tensor:
        x, v = w[:, :-1] - self.mu, w[:, -1]
        logsp = log_softplus(v)
        inv_sp = torch.exp(-logsp)
        # sigmoid(v) / softplus(v); log sigmoid(v) = -softplus(-v): F.logsigmoid took 0.4-6.6 ms a
        # call on a loaded CPU, softplus microseconds
        dlogsp = torch.exp(-F.softplus(-v) - logsp)
        gv = (
            0.5 * (self.dim - 1) * dlogsp
            - 0.5 * (x * x).sum(-1) * inv_sp * dlogsp
            + v / self.sigma2
        )
        return torch.where(_column(w, -1), gv[:, None], (w - self.mu) * inv_sp[:, None])

    def exact_sample(self, generator: torch.Generator, chains: int) -> Tensor:
        v = math.sqrt(self.sigma2) * _randn(generator, (chains, 1), self.dtype)
        z = _randn(generator, (chains, self.dim - 1), self.dtype)
        return torch.cat([self.mu + torch.exp(0.5 * log_softplus(v)) * z, v], -1)


class NormalCrossing(Target):
    """Energy n K(w) with K = prod_i w_i^(2 k_i) ("product") or sum_i w_i^(2 k_i) ("sum").

    The resolved standard form of singular learning theory; its RLCT is known exactly. The
    optional prior N(0, prior_std^2 I) is kept out of the loss, so E[loss] is t E_t[K], t = n.
    """

    def __init__(self, k: tuple[int, ...], form: str, n: int, prior_std: float | None):
        self.name, self.dim, self.k, self.form = "normal-crossing", len(k), k, form
        self.layout = {"w": (self.dim,)}
        self.sample_size, self.prior_std = n, prior_std
        self.powers = torch.tensor([2.0 * ki for ki in k], dtype=torch.float64)
        self.w0 = torch.zeros(self.dim, dtype=torch.float64)
        self.bounds = ((-1.5, 1.5), (-1.5, 1.5))
        self.true_llc = normal_crossing_rlct(k, form=form)

    def llc_at(self, nbeta: float = 1.0) -> float:
        """The exact finite-temperature value t E_t[K], t = nbeta n, that an LLC estimate
        nbeta (E[loss] - loss(0)) converges to (by quadrature; d <= 2 or the sum form)."""
        if self.prior_std is None:
            raise ParamError("normal-crossing.prior_std", "finite-t values need a prior (> 0)")
        return normal_crossing_llc_at(self.k, nbeta * self.sample_size, self.prior_std, self.form)

    def _loss(self, w: Tensor, batch: Batch) -> Tensor:
        terms = w**self.powers
        k = terms.prod(-1) if self.form == "product" else terms.sum(-1)
        return self.sample_size * k

    def _grad(self, w: Tensor, batch: Batch) -> Tensor:
        p = self.powers
        dterms = p * w ** (p - 1).clamp_min(0)
        if self.form == "sum":
            return self.sample_size * dterms
        terms = w**p
        # prod over i != j without dividing by w_j (which may be 0): prefix x suffix products.
        ones = torch.ones_like(terms[:, :1])
        prefix = torch.cumprod(torch.cat([ones, terms[:, :-1]], -1), -1)
        suffix = torch.cumprod(torch.cat([ones, terms.flip(-1)[:, :-1]], -1), -1).flip(-1)
        return self.sample_size * dterms * prefix * suffix


class Custom(Target):
    """An energy typed by the user (see ``formula.compile_formula``); gradient by autograd."""

    def __init__(self, formula: str, dim: int | None):
        self.formula = formula
        self.energy, self.dim = compile_formula(formula, dim)
        self.name, self.layout = "custom", {"w": (self.dim,)}
        self.bounds = ((-3.0, 3.0), (-3.0, 3.0))

    def _loss(self, w: Tensor, batch: Batch) -> Tensor:
        return self.energy(w)
