"""Exact learning coefficients (RLCT lambda and multiplicity m): the oracles LLC estimates are
tested against. Pure Python with exact rational arithmetic; returns (float lambda, int m).

- Deep linear networks: Aoyagi (2024, Thm 1) as stated in the local-sampling benchmark
  (Hitchcock & Hoogland 2025, Thm 3.4), with condition 3 using "min" (the paper's "max" is a
  typo; corrected in docs/methods/local-sampling.md).
- Reduced-rank regression: Aoyagi & Watanabe (2005), four cases.
- Normal crossings: lambda_j = (h_j + 1) / (2 k_j); product -> min, sum -> sum of the parts.
- One-input tanh networks at the zero truth: Aoyagi & Watanabe (2006).
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Sequence
from fractions import Fraction
from itertools import combinations

from .base import ParamError


def _check_sizes(field_name: str, sizes: Sequence[int], minimum: int = 1) -> None:
    if any(int(h) != h or h < minimum for h in sizes):
        raise ParamError(field_name, f"must be integers >= {minimum}, got {list(sizes)}")


def dln_llc(widths: Sequence[int], rank: int) -> tuple[float, int]:
    """True LLC and multiplicity of a deep linear network with layer widths H_0..H_M whose
    generating product W_M...W_1 has rank ``rank``."""
    widths = list(widths)
    if len(widths) < 2:
        raise ParamError("widths", f"needs at least 2 entries (H_0, H_1), got {widths}")
    _check_sizes("widths", widths)
    if not 0 <= rank <= min(widths):
        raise ParamError("rank", f"must be in [0, {min(widths)}] (the smallest width), got {rank}")
    r = rank
    deltas = sorted(h - r for h in widths)
    for size in range(2, len(deltas) + 1):  # a singleton always fails condition 3
        inside, outside = deltas[:size], deltas[size:]
        ell, s = size - 1, sum(inside)
        if outside and not max(inside) < min(outside):
            continue
        if s < ell * max(inside):
            continue
        if outside and not s < ell * min(outside):
            continue
        a = s - ell * (math.ceil(Fraction(s, ell)) - 1)
        pairs = sum(x * y for x, y in combinations(inside, 2))
        lam = (
            Fraction(r * (widths[0] + widths[-1]) - r * r, 2)
            + Fraction(a * (ell - a), 4 * ell)
            - Fraction((ell - 1) * s * s, 4 * ell)
            + Fraction(pairs, 2)
        )
        return float(lam), a * (ell - a) + 1
    raise AssertionError(f"no admissible set for widths={widths}, rank={r}")  # cannot happen


def rrr_llc(inputs: int, hidden: int, outputs: int, rank: int) -> tuple[float, int]:
    """Reduced-rank regression y = B A x, A: hidden x inputs, B: outputs x hidden, truth rank r."""
    _check_sizes("rrr sizes", (inputs, hidden, outputs))
    M, H, N, r = inputs, hidden, outputs, rank
    if not 0 <= r <= min(M, H, N):
        raise ParamError("rank", f"must be in [0, {min(M, H, N)}], got {r}")
    if M + H < N + r:
        return float(Fraction(H * M - H * r + N * r, 2)), 1
    if N + H < M + r:
        return float(Fraction(H * N - H * r + M * r, 2)), 1
    if M + N < H + r:
        return float(Fraction(M * N, 2)), 1
    numerator = 2 * (H + r) * (M + N) - (M - N) ** 2 - (H + r) ** 2
    if (M + H + N + r) % 2:
        return float(Fraction(numerator + 1, 8)), 2
    return float(Fraction(numerator, 8)), 1


def normal_crossing_rlct(
    k: Sequence[int], h: Sequence[int] | None = None, form: str = "product"
) -> tuple[float, int]:
    """RLCT of K = prod w_j^(2 k_j) (or sum) with prior Jacobian prod w_j^(h_j)."""
    k = list(k)
    h = [0] * len(k) if h is None else list(h)
    if len(h) != len(k):
        raise ParamError("h", f"must have {len(k)} entries like k, got {len(h)}")
    _check_sizes("k", k, minimum=0 if form == "product" else 1)
    _check_sizes("h", h, minimum=0)
    parts = [Fraction(hj + 1, 2 * kj) for kj, hj in zip(k, h, strict=True) if kj > 0]
    if not parts:
        raise ParamError("k", "at least one power must be positive")
    if form == "sum":  # disjoint blocks: Z is a product, so lambdas add; each part has m = 1
        return float(sum(parts)), 1
    if form != "product":
        raise ParamError("form", f"must be 'product' or 'sum', got {form!r}")
    lam = min(parts)
    return float(lam), parts.count(lam)


def tanh_llc(hidden: int) -> tuple[float, int]:
    """f(x) = sum_h b_h tanh(a_h x) at the zero truth: lambda = (H + i^2 + i) / (4i + 2)
    with i the largest integer such that i^2 <= H; m = 2 when H is a perfect square."""
    _check_sizes("hidden", [hidden])
    i = math.isqrt(hidden)
    return float(Fraction(hidden + i * i + i, 4 * i + 2)), 2 if i * i == hidden else 1


def normal_crossing_llc_at(
    k: Sequence[int], t: float, prior_std: float = 1.0, form: str = "product"
) -> float:
    """The finite-t learning coefficient t E_t[K] under p_t(w) ~ exp(-t K(w)) N(w; 0, s^2 I).

    This is what a sampler-based estimate nbeta (E[L] - L(w0)) converges to at finite t = nbeta
    (it tends to lambda - (m - 1) / log t); by quadrature, for the sum form in any dimension and
    the product form with at most two active coordinates.
    """
    from scipy import integrate

    s = prior_std
    active = [kj for kj in k if kj > 0]

    def phi(w: float) -> float:
        return math.exp(-0.5 * (w / s) ** 2) / (s * math.sqrt(2 * math.pi))

    def split_quad(f, scale: float) -> float:
        # f varies on the scale of the zero set's neighbourhood, t^(-1/2k); split there.
        edges = sorted({0.0, *(min(c * scale, 12 * s) for c in (1, 3)), min(s, 12 * s), 12 * s})
        with warnings.catch_warnings():
            # quad may report round-off on the far tail pieces, whose values are ~1e-30; the
            # results agree with the quadrature table of docs/methods/vi.md to its 4 printed digits
            # (tests).
            warnings.simplefilter("ignore", integrate.IntegrationWarning)
            return sum(
                integrate.quad(f, a, b, limit=200, epsabs=0, epsrel=1e-10)[0]
                for a, b in itertools.pairwise(edges)
                if b > a
            )

    def moment(a: float, kj: int, power: int) -> float:
        """int_0^inf u^power e^(-a u) phi(w) dw with u = w^(2 kj)."""
        scale = a ** (-1 / (2 * kj)) if a > 0 else s
        return split_quad(
            lambda w: w ** (2 * kj * power) * math.exp(-a * w ** (2 * kj)) * phi(w), scale
        )

    if form == "sum" or len(active) == 1:
        return sum(t * moment(t, kj, 1) / moment(t, kj, 0) for kj in active)
    if len(active) != 2:
        raise ParamError("k", f"finite-t values need at most 2 active powers, got {list(k)}")
    k1, k2 = active
    scale = t ** (-1 / (2 * k2))
    z = split_quad(lambda w: moment(t * w ** (2 * k2), k1, 0) * phi(w), scale)
    n = split_quad(lambda w: w ** (2 * k2) * moment(t * w ** (2 * k2), k1, 1) * phi(w), scale)
    return t * n / z
