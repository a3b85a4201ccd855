"""Exact values for variational inference via resolution of singularities (docs/methods/vi.md):
the bounds a variational fit is checked against.


The normal-crossing check: for a normal crossing K(w) = prod_j w_j^(2 k_j) with an N(0, I) prior and
the identity resolution, Psi_K is closed-form over both mean-field families
(``psi_normal_crossing``), ``sup_psi`` maximises it, ``log_z_bar_k`` is the exact log Z_bar_K by
quadrature and ``slope``

``log_z_bar_tanh1`` is the exact log Z_bar of the H = 1 tanh net (the small tanh experiment of
docs/methods/vi.md), the bound the fitted Psi cannot pass.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor, nn

from .flows import LOG_2PI, GaussianSource, GeneralizedGamma

# -- Closed-form Psi_K on a normal crossing, identity resolution, N(0, I) prior ---------------


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
    On K = w1^2 w2^4 all three reach the same maximum to 1e-7 at every n of the normal-crossing
    check."""
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
    from scipy import optimize  # lazily: ~0.4 s to import with scipy.integrate

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
    total = sum(_quad(f, lo, hi) for lo, hi in itertools.pairwise(cuts))
    return 2.0 * total / math.sqrt(2 * math.pi)


def log_z_bar_k(n: float, ks: Sequence[float]) -> float:
    """log Z_bar_K(n) = log int exp(-n prod_j w_j^(2 k_j)) N(w; 0, I) dw, by quadrature: the
    exact value that sup Psi_K cannot exceed (eq 2). Practical for d <= 3."""
    return math.log(_mean_exp_crossing(float(n), list(ks)))


def slope(ns: Sequence[float], psi: Sequence[float]) -> float:
    """Least-squares slope of -psi against log n: about the RLCT lambda (eq 6)."""
    return float(np.polyfit(np.log(np.asarray(ns, float)), -np.asarray(psi, float), 1)[0])


def log_z_bar_tanh1(n: float, x, y, prior_mean, prior_std, sigma: float = 1.0) -> float:
    """log Z_bar(n) = log int exp(-n K_n(a, b)) phi(a, b) da db for the tanh net with H = 1,
    f(x) = b tanh(a x), truth w0 = 0, phi = N(prior_mean, prior_std^2 I) on w = (a, b), K_n the
    mean over the given points (x, y) (so n = len(x) is the posterior; another n tempers it).
    The bound Psi <= log Z_bar (the paper's eq. 2) for the H = 1 check of docs/methods/vi.md.

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

    total = sum(_quad(f, u, v) for u, v in itertools.pairwise(cuts))
    return math.log(total) + shift


def _quad(f, lo: float, hi: float) -> float:
    """int_lo^hi f by scipy's adaptive quadrature, to relative error 1e-12."""
    from scipy import integrate  # lazily: ~0.4 s to import with scipy.optimize

    return integrate.quad(f, lo, hi, epsabs=0, epsrel=1e-12, limit=200)[0]


def _log_normal_1d(v: float, mean: float, std: float) -> float:
    return -0.5 * (LOG_2PI + ((v - mean) / std) ** 2) - math.log(std)
