"""The bulk ESS, the rank R-hat and the two-sample KS statistic on numpy alone, bit for bit as
arviz-stats and scipy compute them.

Every run's summary reports the bulk ESS and rank R-hat of its draws (Vehtari, Gelman, Simpson,
Carpenter & Bürkner 2021), and its verdict the KS distance to exact draws. Through arviz-stats
and scipy.stats their imports alone (xarray, pandas, scipy) took 1.3-1.6 s of a 5 s run's end
(issue 58). These are the same steps in the same order: arviz-stats 0.8's
``arviz_stats.base.diagnostics`` (``_split_chains``, ``_z_scale``, ``_rhat``, ``_ess``,
``_CoreBase.autocov``), scipy's ``rankdata(method="average")``, its ``ndtri`` (cephes, which
``norm.ppf`` calls) and ``ks_2samp``'s statistic, so they give the very same numbers
(tests/test_rank_stats.py checks them against arviz-stats and scipy; ``samplers.diagnostics``
exposes them). Each function takes one coordinate's draws, [chains, draws], as float64.
"""

from __future__ import annotations

import math

import numpy as np

# ndtri's rational approximations (cephes ndtri.c, as scipy ships it): P0/Q0 for the centre,
# |q - 1/2| < 1/2 - exp(-2); P1/Q1 for the tails down to exp(-32), P2/Q2 beyond
P0 = (-59.9633501014107895267, 98.0010754185999661536, -56.6762857469070293439)
P0 += (13.9312609387279679503, -1.23916583867381258016)
Q0 = (1.95448858338141759834, 4.67627912898881538453, 86.3602421390890590575)
Q0 += (-225.462687854119370527, 200.260212380060660359, -82.0372256168333339912)
Q0 += (15.9056225126211695515, -1.18331621121330003142)
P1 = (4.05544892305962419923, 31.5251094599893866154, 57.1628192246421288162)
P1 += (44.0805073893200834700, 14.6849561928858024014, 2.18663306850790267539)
P1 += (-0.140256079171354495875, -0.0350424626827848203418, -8.57456785154685413611e-4)
Q1 = (15.7799883256466749731, 45.3907635128879210584, 41.3172038254672030440)
Q1 += (15.0425385692907503408, 2.50464946208309415979, -0.142182922854787788574)
Q1 += (-0.0380806407691578277194, -9.33259480895457427372e-4)
P2 = (3.23774891776946035970, 6.91522889068984211695, 3.93881025292474443415)
P2 += (1.33303460815807542389, 0.201485389549179081538, 0.0123716634817820021358)
P2 += (3.01581553508235416007e-4, 2.65806974686737550832e-6, 6.23974539184983293730e-9)
Q2 = (6.02427039364742014255, 3.67983563856160859403, 1.37702099489081330271)
Q2 += (0.216236993594496635890, 0.0134204006088543189037, 3.28014464682127739104e-4)
Q2 += (2.89247864745380683936e-6, 6.79019408009981274425e-9)
EXP_M2 = 0.13533528323661269189  # exp(-2)
SQRT_2PI = 2.50662827463100050242


def _polynomial(x: np.ndarray, coefficients: tuple[float, ...], monic: bool = False):
    """Horner's rule (cephes polevl; ``monic``: p1evl, a leading coefficient 1 left out)."""
    value = x + coefficients[0] if monic else coefficients[0]
    for c in coefficients[1:]:
        value = value * x + c
    return value


def _log(x: np.ndarray) -> np.ndarray:
    """The C library's log, element by element: numpy's own (SIMD) log differs from it in the
    last bit now and then, and which one numpy runs depends on the machine's CPU."""
    return np.fromiter(map(math.log, x.tolist()), dtype=np.float64, count=x.size)


def ndtri(q: np.ndarray) -> np.ndarray:
    """The standard normal quantile of q (1-D, float64, in (0, 1)): cephes' ndtri, scipy's."""
    upper = q > 1.0 - EXP_M2
    y = np.where(upper, 1.0 - q, q)
    out = np.empty_like(y)
    centre = y > EXP_M2
    w = y[centre] - 0.5
    w2 = w * w
    ratio = w2 * _polynomial(w2, P0) / _polynomial(w2, Q0, monic=True)
    out[centre] = (w + w * ratio) * SQRT_2PI
    tail = ~centre
    x = np.sqrt(-2.0 * _log(y[tail]))
    x0 = x - _log(x) / x
    z = 1.0 / x
    x1 = z * _polynomial(z, P1) / _polynomial(z, Q1, monic=True)
    far = x >= 8.0  # q below exp(-32)
    if far.any():
        zf = z[far]
        x1[far] = zf * _polynomial(zf, P2) / _polynomial(zf, Q2, monic=True)
    x = x0 - x1
    out[tail] = np.where(upper[tail], x, -x)
    return out


def z_scale(x: np.ndarray) -> np.ndarray:
    """Phi^-1((r - 3/8) / (N - 3/4 + 1)) of the average ranks r of x's N values (Blom 1958), in
    x's shape: scipy's rankdata(method="average") then norm.ppf."""
    flat = x.ravel()
    order = np.argsort(flat)
    inverse = np.empty(flat.size, dtype=np.intp)
    inverse[order] = np.arange(flat.size)
    ordered = flat[order]
    first = np.r_[True, ordered[1:] != ordered[:-1]]  # the first of each run of ties
    dense = first.cumsum()[inverse]
    count = np.r_[np.nonzero(first)[0], len(first)]
    rank = 0.5 * (count[dense] + count[dense - 1] + 1)  # ties share their mean rank
    c = 3 / 8
    return ndtri((rank - c) / (rank.size - 2 * c + 1)).reshape(x.shape)


def split(x: np.ndarray) -> np.ndarray:
    """[2 chains, draws // 2]: each chain's first and last halves as chains of their own."""
    half = x.shape[1] // 2
    return np.vstack((x[:, :half], x[:, -half:]))


def invalid(x: np.ndarray, min_chains: int) -> bool:
    """arviz-stats' ``not_valid``: a NaN, fewer than 4 draws or too few chains."""
    return bool(np.isnan(x).any()) or x.shape[0] < min_chains or x.shape[1] < 4


def split_rhat(x: np.ndarray) -> float:
    """R-hat of [chains, draws] as given (Vehtari et al. 2021 Eq. 4)."""
    x = np.asarray(x, dtype=float)
    _, n = x.shape
    chain_var = np.var(x, axis=1, ddof=1)
    between = n * np.var(np.mean(x, axis=1), axis=None, ddof=1)
    within = np.mean(chain_var)
    return np.sqrt((between / within + n - 1) / n)


def rank_rhat(x: np.ndarray) -> float:
    """Rank-normalised split R-hat of [chains, draws]: the larger of the bulk and the folded
    (Vehtari et al. 2021 Eqs. 4-6); NaN with a NaN, under 4 draws or a single chain."""
    if invalid(x, 2):
        return np.nan
    halves = split(x)
    folded = abs(halves - np.median(halves))
    return max(split_rhat(z_scale(halves)), split_rhat(z_scale(folded)))


def _mean_autocovariance(x: np.ndarray) -> np.ndarray:
    """[draws]: each lag's autocovariance (FFT, zero-padded to a 5-smooth length, 1/n), averaged
    over the chains as np.mean of each lag's column."""
    n = x.shape[1]
    m = fast_length(2 * n)
    spectrum = np.fft.rfft(x - x.mean(1, keepdims=True), n=m, axis=1)
    spectrum *= np.conjugate(spectrum)
    acov = np.fft.irfft(spectrum, n=m, axis=1)[:, :n]
    acov /= n
    return np.ascontiguousarray(acov.T).mean(1)  # a column's own np.mean, to the last bit


def geyer_ess(x: np.ndarray) -> float:
    """ESS of [chains, draws] from the chains' mean autocorrelation, summed over Geyer's initial
    positive sequence made monotone (Vehtari et al. 2021 Eqs. 10-13)."""
    x = np.asarray(x, dtype=float)
    if (np.max(x) - np.min(x)) < np.finfo(float).resolution:
        return x.size
    n_chain, n = x.shape
    mean = _mean_autocovariance(x)
    mean_var = mean[0] * n / (n - 1.0)
    var_plus = mean_var * (n - 1.0) / n
    if n_chain > 1:
        var_plus += np.var(x.mean(axis=1), axis=None, ddof=1)
    rho = np.zeros(n)
    even, odd = 1.0, 1.0 - (mean_var - mean[1]) / var_plus
    rho[0], rho[1] = even, odd
    t = 1
    while t < n - 3 and even + odd > 0.0:  # the initial positive sequence
        even = 1.0 - (mean_var - mean[t + 1]) / var_plus
        odd = 1.0 - (mean_var - mean[t + 2]) / var_plus
        if even + odd >= 0:
            rho[t + 1], rho[t + 2] = even, odd
        t += 2
    last = t - 2
    if even > 0:
        rho[last + 1] = even
    t = 1
    while t <= last - 2:  # made monotone
        if rho[t + 1] + rho[t + 2] > rho[t - 1] + rho[t]:
            rho[t + 1] = rho[t + 2] = (rho[t - 1] + rho[t]) / 2.0
        t += 2
    ess = n_chain * n
    tau = -1.0 + 2.0 * np.sum(rho[: last + 1]) + np.sum(rho[last + 1 : last + 2])
    tau = max(tau, 1 / np.log10(ess))
    return np.nan if np.isnan(rho).any() else ess / tau


def bulk_ess(x: np.ndarray) -> float:
    """Bulk ESS of [chains, draws]: ``geyer_ess`` of the rank-normalised split chains; NaN with
    a NaN or under 4 draws."""
    if invalid(x, 1):
        return np.nan
    return geyer_ess(z_scale(split(x)))


def bulk_ess_rank_rhat(x: np.ndarray) -> tuple[float, float]:
    """(``bulk_ess(x)``, ``rank_rhat(x)``), ranking the split chains once for both."""
    if invalid(x, 1):
        return np.nan, np.nan
    halves = split(x)
    z = z_scale(halves)
    if x.shape[0] < 2:
        return geyer_ess(z), np.nan
    folded = abs(halves - np.median(halves))
    return geyer_ess(z), max(split_rhat(z), split_rhat(z_scale(folded)))


def fast_length(n: int) -> int:
    """The least 5-smooth number >= n: scipy.fftpack.next_fast_len, the FFT length arviz-stats
    pads the autocovariance to."""
    best, power5 = n << 1, 1
    while True:
        power35 = power5
        while True:  # the least power35 * 2^k >= n
            best = min(best, power35 << (-(-n // power35) - 1).bit_length())
            if power35 >= n:
                break
            power35 *= 3
        if power5 >= n:
            return best
        power5 *= 5


def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """scipy.stats.ks_2samp(a, b).statistic: the largest gap between the two samples' empirical
    CDFs (1-D float64 each); NaN where a value is NaN."""
    if np.isnan(a).any() or np.isnan(b).any():
        return np.nan
    a, b = np.sort(a), np.sort(b)
    both = np.concatenate([a, b])
    gap = np.searchsorted(a, both, side="right") / len(a)
    gap = gap - np.searchsorted(b, both, side="right") / len(b)
    below, above = np.clip(-gap.min(), 0, 1), gap.max()
    return below if below > above else above
