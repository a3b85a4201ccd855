"""A finished run's verdict: whether its own numbers say its answer can be trusted.

"Completed" is a status, not a verdict. ``judge`` reads what a run measured about itself (R-hat,
bulk ESS, acceptance, chains that never moved, diverged chains, KS against the exact sampler
where one exists, draws running off the target's plotted range, the kernel's known biases and
the LLC's health warnings) and returns ``{"status": "good" | "warn" | "fail", "signals": [...]}``,
each signal with its value, what it likely means and the change to try. The run loop stores it
in the summary (``run --json``, ``show --json``); the pages colour it.
"""

from __future__ import annotations

import numpy as np

from samplers import diagnostics

EXACT_DRAWS = 20_000  # exact draws a run is compared with (the pages draw the same ones)
EXACT_SEED = 20_250_131
RHAT_WARN, RHAT_FAIL = 1.01, 1.1  # Vehtari et al. (2021): rank-normalised R-hat below 1.01
MIN_ESS = 100  # bulk ESS per parameter: Vehtari et al. (2021) ask for at least 100
STUCK = 0.01  # a chain that accepted under 1% of its proposals has barely moved
OUTSIDE_WARN = 0.01  # fraction of draws outside the target's plotted range
RUN_OFF = 10.0  # draws this many plot half-widths from its centre: the density is improper
# Acceptance bands where a kernel's step is sensible: below the band proposals are mostly
# rejected (a step too large for the target's curvature), above it the step is needlessly small.
# RWMH's optimum is 0.234-0.44 (Roberts, Gelman & Gilks 1997), MALA's 0.574 (Roberts &
# Rosenthal 1998), HMC's 0.65-0.8 (Beskos et al. 2013); NUTS reports Stan's accept_stat (0.8).
ACCEPTANCE = {
    "rwmh": (0.1, 0.8),
    "adaptive-mh": (0.1, 0.8),
    "mala": (0.3, 0.97),
    "hmc": (0.4, 1.0),
    "nuts": (0.5, 1.0),
    # one leapfrog step a move: a rejection flips the momentum and undoes the persistence the
    # partial refresh buys (reference 002 tunes for >= 0.98 without MH, ~0.9 with it)
    "reprior-lmc": (0.6, 1.0),
}
SKIP_MH_ACCEPTANCE = 0.98  # reference 002: the unadjusted chain's mean acceptance probability
GRADIENT_FREE = {"rwmh", "adaptive-mh"}
LONG_MOVES = "hmc or nuts (they move further per step along the density)"
ORDER = {"good": 0, "warn": 1, "fail": 2}


def targets_exact(sampler_params: dict) -> bool:
    """Truths hold for exp(-L): nbeta 1 (a potential's own), no localization, temperature 1."""
    return (
        sampler_params.get("nbeta") in (None, 1.0)
        and not sampler_params.get("localization")
        and sampler_params.get("temperature", 1.0) == 1.0
    )


def _signal(code: str, status: str, value, message: str, advice: str) -> dict:
    return {"code": code, "status": status, "value": value, "message": message, "try": advice}


def _further(sampler: str) -> str:
    """What to try when chains mix too slowly for the steps given."""
    if sampler in ("hmc", "nuts"):
        return "more steps; for hmc, nuts or more leapfrog_steps"
    return f"more steps, or {LONG_MOVES}"


def judge(
    spec: dict,
    summary: dict,
    bounds=None,
    exact: np.ndarray | None = None,
    chain_acceptance: np.ndarray | None = None,
    chain_sd: np.ndarray | None = None,
    draws: np.ndarray | None = None,
    final: np.ndarray | None = None,
    coupled: bool = False,
) -> dict:
    """The verdict of a run from its summary and what its recorder measured per chain.

    ``bounds``: the target's plotted box ([(lo, hi)] per coordinate, potentials) or None;
    ``exact``: exact draws [m, d] of the density the run samples, or None; ``chain_acceptance``
    [C] and ``chain_sd`` [C, d] over the records after burn-in (None when not recorded);
    ``draws`` [k, n, d]: the diagnosed chains' draws after burn-in (the ones behind the ESS and
    R-hat); ``final`` [C, d]: every chain's last position; ``coupled``: the chains are one
    ensemble (SVGD), judged by its final particles, not as chains."""
    sampler, step = spec["sampler"]["name"], spec["sampler"]["params"].get("step_size")
    smaller = f"a smaller step_size (e.g. {step / 2:g})" if step else "a smaller step_size"
    signals = []
    chains = spec["chains"]
    friction = " or a larger friction" if "friction" in spec["sampler"]["params"] else ""
    diverged = summary.get("diverged_chains") or 0
    if diverged:
        everyone = diverged == chains
        signals.append(
            _signal(
                "diverged",
                "fail",
                diverged,
                "every chain diverged (NaN/Inf): there are no draws"
                if everyone
                else f"{diverged} of {chains} chains diverged (NaN/Inf) and were left out: "
                "the region they reached is missing from the draws",
                smaller + friction,
            )
        )
    band = ACCEPTANCE.get(sampler)
    acceptance = summary.get("acceptance")
    if band and acceptance is not None:
        lo, hi = band
        if acceptance < lo:
            signals.append(
                _signal(
                    "acceptance",
                    "fail" if acceptance < lo / 3 else "warn",
                    acceptance,
                    f"acceptance {acceptance:.2f} is below {sampler}'s sensible {lo:g}-{hi:g}: "
                    "most proposals are rejected, so the chains hardly move",
                    smaller,
                )
            )
        elif acceptance > hi:
            signals.append(
                _signal(
                    "acceptance",
                    "warn",
                    acceptance,
                    f"acceptance {acceptance:.3f} is above {sampler}'s sensible {lo:g}-{hi:g}: "
                    "the steps are needlessly small and the chains explore slowly",
                    f"a larger step_size (e.g. {step * 2:g})" if step else "a larger step_size",
                )
            )
    skipped = sampler == "reprior-lmc" and spec["sampler"]["params"].get("mh") is False
    if skipped and acceptance is not None and acceptance < SKIP_MH_ACCEPTANCE:
        signals.append(
            _signal(
                "unadjusted",
                "warn",
                acceptance,
                f"MH is skipped and the mean acceptance probability is {acceptance:.3f}, below "
                f"the {SKIP_MH_ACCEPTANCE} reference 002 kept: every step's discretisation "
                "error stays in the draws",
                "target_accept 0.98 or more (a smaller step after the warm-up), or MH on",
            )
        )
    reprior = spec.get("target", {}).get("params", {}).get("parametrisation") == "reprior"
    if reprior and spec.get("dtype") == "float32":
        signals.append(
            _signal(
                "precision",
                "warn",
                "float32",
                "a repriorised network sampled in float32: the map's factorisations lose "
                "digits, and reference 002 saw acceptances shift by 2-5 points against float64",
                "dtype float64",
            )
        )
    warmup = spec["sampler"]["params"].get("warmup") if sampler == "reprior-lmc" else None
    if warmup and spec.get("burn_in", 0) < min(warmup, spec.get("steps", warmup)):
        signals.append(
            _signal(
                "warmup",
                "warn",
                spec["burn_in"],
                f"the burn-in ({spec['burn_in']} steps) ends before the step-size warm-up "
                f"({warmup} steps): the draws in between come from a chain whose step still "
                "changed, which is not a Markov chain with the posterior as its law",
                f"burn_in {warmup}",
            )
        )
    stuck = 0
    if chain_acceptance is not None and band and not coupled and not skipped:
        stuck = int((np.asarray(chain_acceptance) < STUCK).sum())
        what = f"accepted under {STUCK:.0%} of their proposals"
    elif chain_sd is not None and not coupled:
        stuck = int((np.asarray(chain_sd) == 0).all(-1).sum())
        what = "never moved"
    if stuck:
        signals.append(
            _signal(
                "stuck",
                "fail",
                stuck,
                f"{stuck} of {chains - diverged} chains {what}: they sit where they started "
                "(or in a region the sampler cannot leave), so their draws are not the target's",
                smaller if sampler not in GRADIENT_FREE else f"{smaller}, or {LONG_MOVES}",
            )
        )
    coords = summary.get("coordinates") or {}
    rhat = np.asarray(coords.get("rhat") or [], dtype=float)
    ess = np.asarray(coords.get("ess_bulk") or [], dtype=float)
    if not coupled and rhat.size and np.isfinite(rhat).any():
        worst = float(np.nanmax(rhat))
        if worst > RHAT_WARN:
            signals.append(
                _signal(
                    "rhat",
                    "fail" if worst > RHAT_FAIL else "warn",
                    worst,
                    f"R-hat {worst:.3f} (above {RHAT_FAIL if worst > RHAT_FAIL else RHAT_WARN}): "
                    "the chains disagree with each other, so they have not all reached the "
                    "same distribution",
                    _further(sampler),
                )
            )
    if not coupled and ess.size and np.isfinite(ess).any():
        least = float(np.nanmin(ess))
        if least < MIN_ESS:
            signals.append(
                _signal(
                    "ess",
                    "warn",
                    int(least),
                    f"bulk ESS {least:.0f} (under {MIN_ESS} per parameter): the draws hold too "
                    "few effective samples for their means and quantiles to be reliable",
                    _further(sampler),
                )
            )
    sample = _pooled(final if coupled else draws)
    if exact is not None and sample is not None and len(sample):
        ks = diagnostics.ks_distance(sample, exact[:, : sample.shape[1]])
        n_eff = np.minimum(ess, len(sample)) if (ess.size and not coupled) else len(sample)
        n_eff = np.where(np.isfinite(n_eff) & (n_eff > 0), n_eff, len(sample))
        bound = diagnostics.ks_bound(n_eff, len(exact))
        over = np.flatnonzero(ks > bound)
        if over.size:
            i = int(over[np.argmax((ks / bound)[over])])
            advice = (
                "more steps and burn-in (the chains had not converged)"
                if band
                else f"{smaller} (its discretisation bias shrinks with the step), or more steps"
            )
            signals.append(
                _signal(
                    "ks",
                    "fail",
                    float(ks[i]),
                    f"KS distance {float(ks[i]):.3f} from the exact sampler in coordinate {i} is "
                    f"above its bound {float(np.broadcast_to(bound, ks.shape)[i]):.3f}: the "
                    "draws are not distributed as the target",
                    advice,
                )
            )
    if bounds is not None and sample is not None and len(sample):
        lo, hi = np.asarray(bounds, dtype=float).T
        d = min(len(lo), sample.shape[1])
        lo, hi, x = lo[:d], hi[:d], sample[:, :d]
        centre, half = (lo + hi) / 2, (hi - lo) / 2
        far = float(np.max(np.abs(x - centre) / half))
        outside = float(np.mean(((x < lo) | (x > hi)).any(-1)))
        if far > RUN_OFF:
            signals.append(
                _signal(
                    "run_off",
                    "fail",
                    far,
                    f"draws ran off to {far:.0f} plot half-widths from the centre: the density "
                    "is probably improper (not normalisable), so there is nothing to converge to",
                    "a formula whose energy grows in every direction (add e.g. (x**2 + y**2)/20)",
                )
            )
        elif outside > OUTSIDE_WARN:
            signals.append(
                _signal(
                    "outside",
                    "warn",
                    outside,
                    f"{outside:.1%} of the draws lie outside the plotted range: the figures "
                    "leave them out, and the tails may be heavier than drawn",
                    "check the histograms' ranges, or a target with lighter tails",
                )
            )
    known = {"all_diverged", "no_acceptance"}  # said above with the numbers behind them
    for warning in summary.get("warnings") or []:
        if warning["code"] not in known:
            signals.append(
                _signal(warning["code"], "warn", None, warning["message"], "see the message")
            )
    llc = (summary.get("observables") or {}).get("llc") or {}
    for warning in llc.get("warnings") or []:
        signals.append(
            _signal(f"llc_{warning['code']}", "warn", None, warning["message"], "see the message")
        )
    status = max((s["status"] for s in signals), key=ORDER.get, default="good")
    return {"status": status, "signals": signals}


def _pooled(x: np.ndarray | None, limit: int = 100_000) -> np.ndarray | None:
    """[k, n, d] or [C, d] draws as [N, d], an even subsample of at most ``limit``."""
    if x is None:
        return None
    x = np.asarray(x, dtype=float)
    x = x.reshape(-1, x.shape[-1])
    x = x[np.isfinite(x).all(-1)]
    return x[:: max(1, -(-len(x) // limit))]


def headline(verdict: dict | None) -> str:
    """One line: the status and its signals' codes, for the CLI and table cells."""
    if not verdict:
        return "no verdict"
    codes = [s["code"] for s in verdict["signals"] if s["status"] != "good"]
    return verdict["status"] + (f" ({', '.join(codes)})" if codes else "")
