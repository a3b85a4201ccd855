"""Diagnostics of sampler output: ESS, R-hat, MCSE, IAT, acceptance, thermodynamic observables, KS.

Layout: draws are ``x[chain, draw]`` (one scalar per chain and draw) or ``x[chain, draw, dim]``.
Every function takes numpy arrays or torch tensors (converted with ``.detach().cpu()`` to float64
numpy, so both give identical results) and returns numpy values; nothing here touches a device.

Sources:
- ESS (bulk, tail), rank-normalised split R-hat and MCSE: Vehtari, Gelman, Simpson, Carpenter &
  Bürkner (2021), "Rank-normalization, folding, and localization: an improved R-hat", computed by
  arviz-stats' array layer (``arviz_stats.base.array_stats``; see ``_array_stats``), except the
  bulk ESS and R-hat every run reports: arviz-stats' own steps on numpy (``samplers.rank_stats``,
  the same numbers to the last bit).
- IAT (Heber et al. Eq. 8) with Sokal's adaptive window, kinetic energy and virial (Heber et al.
  Sec. 3.1 and App. A): TATi (Heber, Trstanova & Leimkuhler 2020); ESS = K/tau per walker summed
  over walkers (docs/methods/tati.md).
- Configurational temperature <|grad U|^2>/<laplacian U>: standard (Rugh 1997; Braga & Travis 2005).
- Per-step ESS with TensorFlow Probability's truncation (``effective_sample_size``'s default,
  the one Hron et al. 2022 report, Eq. 7), per random projection.
- KS bound: the two-sample Kolmogorov-Smirnov test, asymptotic critical value.

arviz-stats is imported lazily (it loads xarray, arviz-base and scipy.stats, about 1.5 s), by
the tail ESS and MCSE alone, so ``from samplers import diagnostics`` costs only numpy, and a
run's end (bulk ESS, R-hat, KS: ``samplers.rank_stats``) loads neither it nor scipy. Of ``samplers``
this module imports ``rank_stats`` alone.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import numpy as np

from . import rank_stats

__all__ = [
    "AcceptanceRate",
    "acceptance_rate",
    "configurational_temperature",
    "diagnosed_chains",
    "ess_bulk",
    "ess_bulk_rhat",
    "ess_from_iat",
    "ess_per_step",
    "ess_tail",
    "iat",
    "iat_per_direction",
    "kinetic_energy",
    "ks_bound",
    "ks_distance",
    "mcse_mean",
    "projection_ess",
    "rhat",
    "summary",
    "virial",
]


# --------------------------------------------------------------------------- input handling


def _to_numpy(value: Any, name: str) -> np.ndarray:
    """float64 numpy copy of an array-like or torch tensor (bool/int are cast to float64)."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # torch.Tensor, without importing torch
        value = value.detach().cpu()
        if not value.is_complex():
            value = value.double()  # also bool, int and bfloat16 (which numpy lacks)
        value = value.numpy()
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: expected a numeric array or tensor ({exc})") from exc
    return arr


def _draws(x: Any, name: str = "x") -> np.ndarray:
    """Validate the [chain, draw] / [chain, draw, dim] layout."""
    arr = _to_numpy(x, name)
    if arr.ndim not in (2, 3):
        raise ValueError(
            f"{name}: expected draws[chain, draw] or draws[chain, draw, dim], got shape "
            f"{arr.shape} (a single chain is x[None])"
        )
    if 0 in arr.shape:
        raise ValueError(f"{name}: needs at least one chain, draw and dim, got shape {arr.shape}")
    return arr


def _vectors(x: Any, name: str) -> np.ndarray:
    """Validate [..., d] with at least one leading (chain) axis."""
    arr = _to_numpy(x, name)
    if arr.ndim < 2 or 0 in arr.shape:
        raise ValueError(
            f"{name}: expected [chain, ..., dim] with the vector on the last axis, got shape "
            f"{arr.shape}"
        )
    return arr


# --------------------------------------------------------------------------- arviz-stats


@functools.cache
def _array_stats() -> Any:
    """arviz-stats' array layer: ``ess(ary, chain_axis, draw_axis, method, relative, prob)``,
    ``rhat(ary, chain_axis, draw_axis, method)`` and ``mcse(ary, chain_axis, draw_axis, method,
    prob)`` on plain numpy arrays, with the same signatures and estimators in arviz-stats 0.8 (the
    last release for Python 3.11) and 1.x; the package's top-level ``arviz_stats.ess`` dispatches
    arrays to it too. They give the values legacy ArviZ 0.23 gave (tests/test_arviz_values.py)."""
    from arviz_stats.base import array_stats

    return array_stats


def _stat(x: Any, func: str, **kwargs: Any) -> float | np.ndarray:
    """array_stats.<func> of [chain, draw] (float) or [chain, draw, dim] (array of length dim)."""
    arr = _draws(x)
    value = getattr(_array_stats(), func)(arr, chain_axis=0, draw_axis=1, **kwargs)
    return float(value) if arr.ndim == 2 else np.asarray(value, dtype=np.float64)


# A run's ESS and R-hat come from some of its chains: rank normalisation sorts every draw of every
# chain it is given, and 256 chains x 20,000 draws of a 2-D run took 7.4 s on the 2-core VM (with
# legacy ArviZ, the same estimator), after 0.7 s of sampling. Chains start independently, so a
# subset estimates how they mix; it holds at most MAX_DIAGNOSED_CHAINS chains and DIAGNOSED_DRAWS
# draws in all (52 chains there: 1.1 s), and never fewer than MIN_DIAGNOSED_CHAINS (Stan's default
# count), which R-hat compares.
MAX_DIAGNOSED_CHAINS = 256
MIN_DIAGNOSED_CHAINS = 4
DIAGNOSED_DRAWS = 1 << 20


def diagnosed_chains(chains: int, draws: int) -> int:
    """How many of ``chains`` chains of ``draws`` draws each a run's ESS and R-hat use (the
    first ones): all of them when few, else as many as DIAGNOSED_DRAWS draws allow."""
    fit = DIAGNOSED_DRAWS // max(draws, 1)
    return min(chains, max(MIN_DIAGNOSED_CHAINS, min(MAX_DIAGNOSED_CHAINS, fit)))


def _per_coordinate(x: Any, func) -> float | np.ndarray:
    """``func`` of [chain, draw] (float), or of each coordinate of [chain, draw, dim] (array)."""
    arr = _draws(x)
    if arr.ndim == 2:
        return float(func(arr))
    return np.array([func(a) for a in np.moveaxis(arr, -1, 0)], dtype=np.float64)


def ess_bulk(x: Any) -> float | np.ndarray:
    """Bulk ESS: ESS of the rank-normalised split chains (Vehtari et al. 2021; ess "bulk").

    Counts draws over all chains. Float for x[chain, draw], array[dim] for x[chain, draw, dim];
    NaN when a chain holds NaN or there are fewer than 4 draws.
    """
    return _per_coordinate(x, rank_stats.bulk_ess)


def ess_bulk_rhat(x: Any) -> tuple[float, float] | tuple[np.ndarray, np.ndarray]:
    """(``ess_bulk(x)``, ``rhat(x)``), the same numbers, ranking the draws once for both: what
    a run's summary reports."""
    arr = _draws(x)
    if arr.ndim == 2:
        ess, rhat_ = rank_stats.bulk_ess_rank_rhat(arr)
        return float(ess), float(rhat_)
    pairs = [rank_stats.bulk_ess_rank_rhat(a) for a in np.moveaxis(arr, -1, 0)]
    return tuple(np.array(values, dtype=np.float64) for values in zip(*pairs, strict=True))


def ess_tail(x: Any) -> float | np.ndarray:
    """Tail ESS: min ESS of the 5% and 95% quantile indicators (Vehtari et al. 2021; "tail")."""
    return _stat(x, "ess", method="tail", prob=0.05)  # the array layer needs prob; 0.05 is usual


def rhat(x: Any) -> float | np.ndarray:
    """Rank-normalised split R-hat, max of bulk and folded (Vehtari et al. 2021; rhat "rank").

    Needs at least 2 chains (NaN otherwise). Below 1.01 is the usual acceptance threshold.
    """
    return _per_coordinate(x, rank_stats.rank_rhat)


def mcse_mean(x: Any) -> float | np.ndarray:
    """Monte Carlo standard error of the mean, sd / sqrt(ESS_mean) (mcse "mean"; ESS_mean is the
    ESS of the split chains without rank normalisation)."""
    return _stat(x, "mcse", method="mean")


# --------------------------------------------------------------------------- IAT (TATi)


def iat(x: Any, c: float = 5.0) -> np.ndarray:
    """Integrated autocorrelation time per chain (and dim), Heber et al. Eq. 8, Sokal's window.

    tau = 1 + 2 sum_{k=1}^{M} rho(k), where rho is the chain's normalised autocorrelation computed
    by FFT (zero-padded, sample mean removed, 1/K normalisation) and M is the smallest lag with
    M >= c * tau(M) (Sokal, with c = 5 in place of the Goodman acor package Heber et al. used;
    docs/methods/tati.md). Reliable when the chain is much longer than c * tau (say > 50 tau);
    shorter chains underestimate tau.

    tau < 1 is possible (antithetic chains, e.g. fast BAOAB modes). There Sokal's window fails:
    with rho(1) <= -0.4 the partial sum tau(1) is already below 1/c and the window closes at
    lag 1 (an AR(1) chain with phi = -0.5 read the floor 0.23 for its exact 1/3). Where
    rho(1) < 0 the sum runs over Geyer's initial monotone sequence of pair sums
    rho(2m) + rho(2m+1), the estimator ArviZ's ESS uses, which the alternating signs do not
    cut short. Like ArviZ, tau is floored at 1/log10(K). Returns array[chain] for
    x[chain, draw] and array[chain, dim] for x[chain, draw, dim]; NaN for constant or NaN
    chains and for fewer than 4 draws. If only every k-th step was stored, multiply by k to
    get tau in steps.
    """
    arr = _draws(x)
    if not c > 0:
        raise ValueError(f"c: the Sokal window constant must be > 0, got {c}")
    series = arr if arr.ndim == 2 else np.moveaxis(arr, 1, -1)  # draws last: [chain, (dim,) K]
    n = series.shape[-1]
    if n < 4:
        return np.full(series.shape[:-1], np.nan)
    centred = series - series.mean(axis=-1, keepdims=True)
    n_fft = 1 << (2 * n - 1).bit_length()  # power of two >= 2K: no circular wrap-around
    spectrum = np.fft.rfft(centred, n=n_fft, axis=-1)
    acov = np.fft.irfft(spectrum * spectrum.conj(), n=n_fft, axis=-1)[..., :n]
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = acov / acov[..., :1]
    taus = 2.0 * np.cumsum(rho, axis=-1) - 1.0  # taus[M] = 1 + 2 sum_{k=1}^{M} rho(k)
    lags = np.arange(n)
    with np.errstate(invalid="ignore"):
        ok = lags >= c * taus
    # ok always holds at the last lag (there tau = 0: the centred autocovariances sum to zero).
    tau = np.take_along_axis(taus, ok.argmax(axis=-1)[..., None], axis=-1)[..., 0]
    with np.errstate(invalid="ignore"):
        tau = np.where(rho[..., 1] < 0, _geyer(rho), tau)  # NaN (constant chains) stays NaN
    # Floor as ArviZ does (ESS <= K log10 K): sums of noisy negative lags can reach 0 or below.
    return np.maximum(tau, 1.0 / math.log10(n))


def _geyer(rho: np.ndarray) -> np.ndarray:
    """-1 + 2 sum_m G_m over the initial positive, made monotone, pairs G_m = rho(2m) +
    rho(2m+1) (Geyer 1992): for a reversible chain each G_m > 0 and decreasing."""
    half = rho.shape[-1] // 2
    pairs = rho[..., 0 : 2 * half : 2] + rho[..., 1 : 2 * half : 2]
    initial = np.cumprod(pairs > 0, axis=-1).astype(bool)  # up to the first G_m <= 0
    pairs = np.minimum.accumulate(np.where(initial, pairs, 0.0), axis=-1)
    return 2.0 * pairs.sum(axis=-1) - 1.0


def iat_per_direction(x: Any, directions: Any, c: float = 5.0) -> np.ndarray:
    """IAT of the projections of x[chain, draw, dim] on ``directions`` [dim, k] (one direction
    per column, e.g. the eigenvectors of the target's covariance), averaged over chains: array[k].

    Heber et al. Sec. 3.4's projections: ``iat`` of each chain's trajectory projected on each
    direction, then the mean over the chains (walkers) whose IAT is finite, as TATi averages
    the per-walker IATs. Per chain, not pooled: an ensemble of a few walkers and a run of many
    chains compare on the same footing. NaN for a direction no chain gives a finite IAT (a
    constant projection, fewer than 4 draws)."""
    arr = _to_numpy(x, "x")
    if arr.ndim != 3 or 0 in arr.shape:
        raise ValueError(f"x: expected draws[chain, draw, dim], got shape {arr.shape}")
    v = _to_numpy(directions, "directions")
    v = v[:, None] if v.ndim == 1 else v
    if v.ndim != 2 or v.shape[0] != arr.shape[-1] or not v.shape[1]:
        raise ValueError(
            f"directions: expected [dim = {arr.shape[-1]}, k] (one direction per column), "
            f"got shape {v.shape}"
        )
    taus = iat(arr @ v, c=c)  # [chain, k]
    finite = np.isfinite(taus)
    with np.errstate(invalid="ignore"):
        return np.where(finite, taus, 0.0).sum(0) / finite.sum(0)


def ess_from_iat(x: Any, c: float = 5.0) -> float | np.ndarray:
    """ESS = sum over chains of K / tau_chain (K/tau per walker, summed; docs/methods/tati.md).

    Equivalently total draws / harmonic mean of the per-chain IATs, the average that keeps the
    per-chain ESS additive. Agrees with ``ess_bulk`` on well-mixed stationary chains; unlike it,
    it does not see chains that disagree with each other (use ``rhat`` for that). Not capped:
    antithetic chains (tau < 1) give ESS > draws. Float for x[chain, draw], array[dim] otherwise.
    """
    arr = _draws(x)
    ess = (arr.shape[1] / iat(arr, c=c)).sum(axis=0)
    return float(ess) if arr.ndim == 2 else ess


def ess_per_step(x: Any) -> np.ndarray:
    """ESS / N of each series of x[chain, draw] or x[chain, draw, k], TensorFlow
    Probability's ``effective_sample_size`` with its defaults (Hron et al. 2022 Eq. 7):
    ESS = N / (-1 + 2 sum_k (N - k)/N rho_k), rho_k the lag-k autocovariance averaged over its
    N - k products over the lag-0 one, the sum stopped at the first rho_k < 0. At most about
    1 (independent draws); antithetic chains can exceed it. Returns array[chain] or
    array[chain, k]; NaN for constant series and fewer than 4 draws."""
    arr = _draws(x)
    series = arr if arr.ndim == 2 else np.moveaxis(arr, 1, -1)  # draws last
    n = series.shape[-1]
    if n < 4:
        return np.full(series.shape[:-1], np.nan)
    centred = series - series.mean(axis=-1, keepdims=True)
    n_fft = 1 << (2 * n - 1).bit_length()
    spectrum = np.fft.rfft(centred, n=n_fft, axis=-1)
    products = np.fft.irfft(spectrum * spectrum.conj(), n=n_fft, axis=-1)[..., :n]
    lags = np.arange(n)
    with np.errstate(invalid="ignore", divide="ignore"):
        acov = products / (n - lags)  # TFP's unbiased auto-covariance
        rho = acov / acov[..., :1]
        kept = np.cumsum(rho < 0, axis=-1) == 0  # up to the first negative lag
        total = np.where(kept, rho * (n - lags) / n, 0.0).sum(-1)
        return 1.0 / (2.0 * total - 1.0)


def projection_ess(z: Any, keep: Any = None) -> dict[str, float]:
    """Per-step ESS of z[draw, chain, k] (k fixed random projections, as a run records them),
    each projection's the mean over the chains in ``keep`` (default: all): its min, mean and
    max over the projections, as Hron et al. 2022 report them (Sec. 4.1.2 and 4.2.1)."""
    arr = np.moveaxis(_to_numpy(z, "z"), 0, 1)  # [chain, draw, k]
    if keep is not None:
        arr = arr[np.asarray(keep, bool)]
    if arr.ndim != 3 or not arr.shape[0] or arr.shape[1] < 4:
        return {"min": math.nan, "mean": math.nan, "max": math.nan, "draws": int(arr.shape[1])}
    per = np.nanmean(ess_per_step(arr), axis=0)  # [k]
    return {
        "min": float(np.nanmin(per)),
        "mean": float(np.nanmean(per)),
        "max": float(np.nanmax(per)),
        "draws": int(arr.shape[1]),
    }


# --------------------------------------------------------------------------- acceptance


class AcceptanceRate(NamedTuple):
    """Mean acceptance per chain (array[chain]) and over all chains and draws (float)."""

    per_chain: np.ndarray
    overall: float


def acceptance_rate(accepted: Any) -> AcceptanceRate:
    """Fraction of accepted proposals from accepted[chain, draw] (bool, 0/1 or probabilities)."""
    arr = _to_numpy(accepted, "accepted")
    if arr.ndim != 2 or 0 in arr.shape:
        raise ValueError(f"accepted: expected accepted[chain, draw], got shape {arr.shape}")
    return AcceptanceRate(per_chain=arr.mean(axis=1), overall=float(arr.mean()))


# --------------------------------------------------------------------------- thermodynamics


def kinetic_energy(p: Any) -> np.ndarray:
    """K = 1/2 |p|^2 over the last axis (Heber et al. Sec. 3.1): p[chain, (draw,) d] -> [chain, ..].

    For p ~ N(0, T I_d) the canonical mean is d T / 2 (equipartition); T_kin = 2 <K> / d.
    """
    arr = _vectors(p, "p")
    return 0.5 * np.einsum("...i,...i->...", arr, arr)


def _pair(w: Any, grad: Any) -> tuple[np.ndarray, np.ndarray]:
    w_arr = _vectors(w, "w")
    g_arr = _to_numpy(grad, "grad")
    if g_arr.shape != w_arr.shape:
        raise ValueError(f"grad: expected the shape of w {w_arr.shape}, got {g_arr.shape}")
    return w_arr, g_arr


def virial(w: Any, grad: Any) -> np.ndarray:
    """Virial w . grad U over the last axis (TATi: Heber et al. Sec. 3.1 and App. A).

    For a confining U sampled at density ∝ exp(-U/T), integration by parts gives
    E[w . grad U] = d T (= 2 <K>): the virial theorem. It holds for w - c with any fixed c too, so
    localised posteriors need no recentring. TATi's "virial" column stores |1/2 sum w . grad L|,
    whose target is d/(2 beta); this returns the plain sum. Fails for non-confining losses
    (softmax cross-entropy without L2).
    """
    w_arr, g_arr = _pair(w, grad)
    return np.einsum("...i,...i->...", w_arr, g_arr)


def configurational_temperature(w: Any, grad: Any, laplacian: Any = None) -> float:
    """Temperature estimate from positions and gradients of U, averaged over chains and draws.

    - ``laplacian`` None: virial form T_vir = <w . grad U> / d (derived from the virial theorem,
      Heber et al. App. A; docs/methods/tati.md).
    - ``laplacian`` given (values of the Laplacian of U, shape w.shape[:-1], e.g. a Hutchinson
      estimate): the standard configurational temperature T_conf = <|grad U|^2> / <laplacian U>.

    Both equal T for density ∝ exp(-U/T). Pass the gradient of the potential actually sampled: for
    exp(-nbeta L) with grad L one gets 1/nbeta.
    """
    w_arr, g_arr = _pair(w, grad)
    if laplacian is None:
        return float(virial(w_arr, g_arr).mean() / w_arr.shape[-1])
    lap = _to_numpy(laplacian, "laplacian")
    if lap.shape != w_arr.shape[:-1]:
        raise ValueError(f"laplacian: expected shape {w_arr.shape[:-1]}, got {lap.shape}")
    return float(np.einsum("...i,...i->...", g_arr, g_arr).mean() / lap.mean())


# --------------------------------------------------------------------------- KS against truth


def _columns(x: Any, name: str) -> np.ndarray:
    arr = _to_numpy(x, name)
    if arr.ndim == 1:
        arr = arr[:, None]
    elif arr.ndim == 3:
        arr = arr.reshape(-1, arr.shape[-1])  # [chain, draw, dim] -> pooled draws
    elif arr.ndim != 2:
        raise ValueError(
            f"{name}: expected [n], [n, dim] or [chain, draw, dim] draws, got shape {arr.shape}"
        )
    if 0 in arr.shape:
        raise ValueError(f"{name}: no draws, got shape {arr.shape}")
    return arr


def ks_distance(samples: Any, exact: Any) -> np.ndarray:
    """Two-sample KS statistic sup |F_samples - F_exact| of each 1-D marginal (scipy ks_2samp).

    samples: [n], [n, dim] (columns are marginals) or [chain, draw, dim] (chains pooled; pass a
    scalar trace x[chain, draw] as x.reshape(-1)). exact: [m] or [m, dim]. Returns array[dim].
    """
    s = _columns(samples, "samples")
    e = _columns(exact, "exact")
    if e.shape[1] != s.shape[1]:
        raise ValueError(f"exact: expected {s.shape[1]} marginals (columns), got {e.shape[1]}")
    return np.array([rank_stats.ks_statistic(s[:, j], e[:, j]) for j in range(s.shape[1])])


def ks_bound(n_eff: Any, m: Any, alpha: float = 1e-3) -> float | np.ndarray:
    """Critical two-sample KS distance c(alpha) sqrt((n_eff + m) / (n_eff m)).

    c(alpha) = sqrt(-ln(alpha/2)/2) is the leading term of the Kolmogorov distribution's upper
    alpha quantile (the asymptotic law of sqrt(n m / (n + m)) D); it is within 1e-5 relative of
    the exact quantile for alpha <= 0.05 and within 1e-10 at alpha = 1e-3. Passing the ESS of the
    chain draws (e.g. ``ess_bulk`` per dim) instead of their raw count makes the bound
    approximately valid for autocorrelated chains, whose empirical CDF varies like that of about
    ESS independent draws; m counts the (iid) exact draws. Broadcasts over arrays of n_eff.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: expected a level in (0, 1), got {alpha}")
    n_arr = _to_numpy(n_eff, "n_eff")
    m_arr = _to_numpy(m, "m")
    if not np.all(n_arr > 0):
        raise ValueError(f"n_eff: effective sample sizes must be > 0, got {n_eff}")
    if not np.all(m_arr > 0):
        raise ValueError(f"m: the number of exact draws must be > 0, got {m}")
    bound = math.sqrt(-math.log(alpha / 2) / 2) * np.sqrt((n_arr + m_arr) / (n_arr * m_arr))
    return float(bound) if bound.ndim == 0 else bound


# --------------------------------------------------------------------------- summary table


def summary(draws: Any) -> dict[str, np.ndarray]:
    """Per-dim table: mean, sd (ddof=1, all chains pooled), mcse_mean, ess_bulk, ess_tail, rhat.

    Every value is an array[dim] (dim = 1 for draws[chain, draw]), ready for a dataframe.
    """
    arr = _draws(draws, "draws")
    arr3 = arr[..., None] if arr.ndim == 2 else arr
    pooled = arr3.reshape(-1, arr3.shape[-1])
    return {
        "mean": pooled.mean(axis=0),
        "sd": pooled.std(axis=0, ddof=1)
        if pooled.shape[0] > 1
        else np.full(arr3.shape[-1], np.nan),
        "mcse_mean": np.atleast_1d(mcse_mean(arr3)),
        "ess_bulk": np.atleast_1d(ess_bulk(arr3)),
        "ess_tail": np.atleast_1d(ess_tail(arr3)),
        "rhat": np.atleast_1d(rhat(arr3)),
    }
