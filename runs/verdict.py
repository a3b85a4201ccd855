"""A finished run's verdict: whether its own numbers say its answer can be trusted.

"Completed" is a status, not a verdict. A verdict is a list of ``Signal``s, each a check's
finding with its value, what it likely means and the change to try, and a status, the worst of
theirs: ``{"status": "good" | "warn" | "fail", "signals": [...]}`` (``verdict_of``). ``judge``
reads what a sampling run measured about itself (R-hat, bulk ESS, acceptance, chains that never
moved, diverged chains, NUTS's divergent transitions, KS against the exact sampler where one
exists, draws running off the target's plotted range, the kernel's known biases and the LLC's
health warnings); ``judge_fit`` what a vi run's fit did (a divergence, its objective against
the exact bound, its curve). The run loop stores it in the summary (``run --json``,
``show --json``); the pages colour it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from samplers import REGISTRY, diagnostics

EXACT_DRAWS = 20_000  # exact draws a run is compared with (the pages draw the same ones)
EXACT_SEED = 20_250_131
RHAT_WARN, RHAT_FAIL = 1.01, 1.1  # Vehtari et al. (2021): rank-normalised R-hat below 1.01
MIN_ESS = 100  # bulk ESS per parameter: Vehtari et al. (2021) ask for at least 100
STUCK = 0.01  # a chain that accepted under 1% of its proposals has barely moved
OUTSIDE_WARN = 0.01  # fraction of draws outside the target's plotted range
RUN_OFF = 10.0  # draws this many plot half-widths from its centre: the density is improper
# Acceptance bands where a kernel's step is sensible, each declared (with its source) in the
# kernel's SPEC: below the band proposals are mostly rejected, above it the step is too small.
ACCEPTANCE = {name: spec.acceptance for name, spec in REGISTRY.items() if spec.acceptance}
SKIP_MH_ACCEPTANCE = 0.98  # Hron et al. 2022, Sec. 4.1.3: MH skipped, mean acceptance kept above
GRADIENT_FREE = {"rwmh", "adaptive-mh"}
LONG_MOVES = "hmc or nuts (they move further per step along the density)"
ORDER = {"good": 0, "warn": 1, "fail": 2}
CONVERGED_WINDOW = 0.1  # a fit's last 10% of epochs against the 10% before
# step_size auto: the warm-up settled when the acceptance after it is at most 0.1 below its aim
# and at most 0.15 above (Stan's averaged step lands above the aim, the more so after a short
# warm-up; a step still too large shows below it; samplers.warmup)
SETTLED = (0.1, 0.15)


def targets_exact(sampler_params: dict) -> bool:
    """Truths hold for exp(-L): nbeta 1 (a potential's own), no localization, temperature 1."""
    return (
        sampler_params.get("nbeta") in (None, 1.0)
        and not sampler_params.get("localization")
        and sampler_params.get("temperature", 1.0) == 1.0
    )


@dataclass(frozen=True)
class Signal:
    """One finding of a check: ``status`` "warn" or "fail", the ``value`` behind it, what it
    likely means (``message``) and the change to try (``advice``, the JSON's "try"; empty where
    the message itself says what to try)."""

    code: str
    status: str
    value: Any
    message: str
    advice: str

    def as_dict(self) -> dict:
        return {
            "code": self.code,
            "status": self.status,
            "value": self.value,
            "message": self.message,
            "try": self.advice,
        }


def verdict_of(signals: Iterable[Signal | None]) -> dict:
    """The verdict of a run's signals (None: a check that found nothing, left out): the worst
    of their statuses, "good" when there is none."""
    found = [s for s in signals if s is not None]
    status = max((s.status for s in found), key=ORDER.get, default="good")
    return {"status": status, "signals": [s.as_dict() for s in found]}


def _further(sampler: str) -> str:
    """What to try when chains mix too slowly for the steps given."""
    if sampler in ("hmc", "nuts"):
        return "more steps; for hmc, nuts or more leapfrog_steps"
    return f"more steps, or {LONG_MOVES}"


# -- a sampling run ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Evidence:
    """What the checks of a sampling run share: its spec and summary, and what is read of them."""

    spec: dict
    summary: dict
    coupled: bool  # the chains are one ensemble (SVGD): judged by its final particles

    @property
    def sampler(self) -> str:
        return self.spec["sampler"]["name"]

    @property
    def params(self) -> dict:
        return self.spec["sampler"]["params"]

    @property
    def step(self) -> float | None:
        return self.params.get("step_size")

    @property
    def auto(self) -> bool:
        """The step was adapted by the warm-up (samplers.warmup): advice is about the warm-up."""
        return self.step == "auto"

    @property
    def smaller(self) -> str:
        tuner = {p.name: p.default for p in getattr(REGISTRY.get(self.sampler), "params", ())}
        if self.auto and "desired_energy_var" in tuner:  # MCLMC's tuner aims at Var[E]/d
            aim = self.params.get("desired_energy_var") or tuner["desired_energy_var"]
            return f"a smaller desired_energy_var (e.g. {aim / 2:g}) or {self.longer_warmup}"
        if self.auto:  # Stan's advice: a higher aim makes the adapted step smaller
            aim = self.params.get("target_accept") or 0.8
            return f"a higher target_accept (e.g. {min(0.99, (1 + aim) / 2):.2g})"
        step = self.step
        return f"a smaller step_size (e.g. {step / 2:g})" if step else "a smaller step_size"

    @property
    def longer_warmup(self) -> str:
        burn = self.spec.get("burn_in") or 0
        return f"a longer warm-up (burn_in {max(2 * burn, 100)})"

    @property
    def diverged(self) -> int:
        return self.summary.get("diverged_chains") or 0

    @property
    def band(self) -> tuple[float, float] | None:
        return ACCEPTANCE.get(self.sampler)

    @property
    def acceptance(self) -> float | None:
        return self.summary.get("acceptance")

    @property
    def skipped(self) -> bool:
        """Reprior-LMC without its MH step: the acceptance is a probability, never applied."""
        return self.sampler == "reprior-lmc" and self.params.get("mh") is False

    def coordinates(self, name: str) -> np.ndarray:
        return np.asarray((self.summary.get("coordinates") or {}).get(name) or [], dtype=float)


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
    run = Evidence(spec, summary, coupled)
    sample = _pooled(final if coupled else draws)
    return verdict_of(
        [
            _diverged(run),
            _divergent(run),
            _settled(run) if run.auto else _acceptance(run),
            *_watched(run),
            _unadjusted(run),
            _precision(run),
            _warmup(run),
            _stuck(run, chain_acceptance, chain_sd),
            _rhat(run),
            _ess(run),
            _ks(run, sample, exact),
            _range(sample, bounds),
            *_warnings(summary),
        ]
    )


def _diverged(run: Evidence) -> Signal | None:
    diverged, chains = run.diverged, run.spec["chains"]
    if not diverged:
        return None
    friction = " or a larger friction" if "friction" in run.params else ""
    return Signal(
        "diverged",
        "fail",
        diverged,
        "every chain diverged (NaN/Inf): there are no draws"
        if diverged == chains
        else f"{diverged} of {chains} chains diverged (NaN/Inf) and were left out: "
        "the region they reached is missing from the draws",
        run.smaller + friction,
    )


def _divergent(run: Evidence) -> Signal | None:
    """NUTS's divergent transitions after the burn-in (its scalar ``divergent``, Stan's
    divergent__): the summary's mean over the finite chains' records after the burn-in, times
    their number. (HMC's MH test rejects the same energy error: its acceptance shows it.)"""
    mean = (run.summary.get("scalars") or {}).get("divergent")
    if not mean:
        return None
    spec, thin = run.spec, run.spec.get("thin") or 1
    records = math.ceil(run.summary["steps"] / thin) - math.ceil((spec.get("burn_in") or 0) / thin)
    count = round(mean * max(records, 1) * (spec["chains"] - run.diverged))
    reparametrise = "a reparametrisation (the funnel's neck)"
    return Signal(
        "divergent",
        "fail",
        count,
        f"{count} divergent transitions after the burn-in ({mean:.2%} of the steps): a "
        "leapfrog step's energy error H - H0 exceeded 1000, so those trees stopped short of "
        "a region the step cannot resolve, and the draws under-represent it",
        f"{run.smaller}, or {reparametrise}"
        if run.auto
        else f"step_size auto (or a higher target_accept), a smaller step, or {reparametrise}",
    )


def _acceptance(run: Evidence) -> Signal | None:
    band, acceptance, sampler, step = run.band, run.acceptance, run.sampler, run.step
    if not band or acceptance is None:
        return None
    lo, hi = band
    if acceptance < lo:
        return Signal(
            "acceptance",
            "fail" if acceptance < lo / 3 else "warn",
            acceptance,
            f"acceptance {acceptance:.2f} is below {sampler}'s sensible {lo:g}-{hi:g}: "
            "most proposals are rejected, so the chains hardly move",
            run.smaller,
        )
    if acceptance > hi:
        return Signal(
            "acceptance",
            "warn",
            acceptance,
            f"acceptance {acceptance:.3f} is above {sampler}'s sensible {lo:g}-{hi:g}: "
            "the steps are needlessly small and the chains explore slowly",
            f"a larger step_size (e.g. {step * 2:g})" if step else "a larger step_size",
        )
    return None


def _settled(run: Evidence) -> Signal | None:
    """step_size auto: the warm-up settled when the acceptance after it is near its aim (a
    warm-up too short for the target leaves a step the dual averaging had not yet found)."""
    adapted, acceptance = run.summary.get("adapted"), run.acceptance
    if not adapted or acceptance is None or "target_accept" not in adapted:
        return None  # none, or MCLMC's tuner (no MH step: the energy error is watched)
    aim = adapted["target_accept"]
    if not adapted.get("finished", True):
        message = "the run stopped inside the warm-up: its step was still being adapted"
    elif not aim - SETTLED[0] <= acceptance <= min(1.0, aim + SETTLED[1]):
        message = (
            f"acceptance {acceptance:.2f} after the warm-up is far from the {aim:g} it aimed "
            f"at (adapted step {adapted['step_size']:.3g}): the warm-up had not settled"
        )
    else:
        return None
    return Signal("warmup", "warn", acceptance, message, run.longer_warmup)


def _watched(run: Evidence) -> list[Signal]:
    """The scalars a kernel without an MH test declares it is judged by (``Watch``)."""
    spec, scalars = REGISTRY.get(run.sampler), run.summary.get("scalars") or {}
    found = []
    for watch in spec.watch if spec else ():
        value = scalars.get(watch.scalar)
        if value is not None and value > watch.high:
            message = f"mean {watch.scalar} {value:.3g} is above {watch.high:g}: {watch.why}"
            advice = run.smaller if run.auto else watch.advice  # a tuned step: tune it smaller
            found.append(Signal(watch.scalar, "warn", value, message, advice))
    return found


def _unadjusted(run: Evidence) -> Signal | None:
    acceptance = run.acceptance
    if not run.skipped or acceptance is None or not acceptance < SKIP_MH_ACCEPTANCE:
        return None
    return Signal(
        "unadjusted",
        "warn",
        acceptance,
        f"MH is skipped and the mean acceptance probability is {acceptance:.3f}, below "
        f"the {SKIP_MH_ACCEPTANCE} Hron et al. (2022) kept: every step's discretisation "
        "error stays in the draws",
        "target_accept 0.98 or more (a smaller step after the warm-up), or MH on",
    )


def _precision(run: Evidence) -> Signal | None:
    spec = run.spec
    reprior = spec.get("target", {}).get("params", {}).get("parametrisation") == "reprior"
    if not (reprior and spec.get("dtype") == "float32"):
        return None
    return Signal(
        "precision",
        "warn",
        "float32",
        "a repriorised network sampled in float32: the map's factorisations lose "
        "digits, and Hron et al. (2022) saw acceptances shift by 2-5 points against float64",
        "dtype float64",
    )


def _warmup(run: Evidence) -> Signal | None:
    spec = run.spec
    warmup = run.params.get("warmup") if run.sampler == "reprior-lmc" else None
    if not (warmup and spec.get("burn_in", 0) < min(warmup, spec.get("steps", warmup))):
        return None
    return Signal(
        "warmup",
        "warn",
        spec["burn_in"],
        f"the burn-in ({spec['burn_in']} steps) ends before the step-size warm-up "
        f"({warmup} steps): the draws in between come from a chain whose step still "
        "changed, which is not a Markov chain with the posterior as its law",
        f"burn_in {warmup}",
    )


def _stuck(run: Evidence, chain_acceptance, chain_sd) -> Signal | None:
    stuck = 0
    if chain_acceptance is not None and run.band and not run.coupled and not run.skipped:
        stuck = int((np.asarray(chain_acceptance) < STUCK).sum())
        what = f"accepted under {STUCK:.0%} of their proposals"
    elif chain_sd is not None and not run.coupled:
        stuck = int((np.asarray(chain_sd) == 0).all(-1).sum())
        what = "never moved"
    if not stuck:
        return None
    smaller = run.smaller
    return Signal(
        "stuck",
        "fail",
        stuck,
        f"{stuck} of {run.spec['chains'] - run.diverged} chains {what}: they sit where they "
        "started (or in a region the sampler cannot leave), so their draws are not the target's",
        smaller if run.sampler not in GRADIENT_FREE else f"{smaller}, or {LONG_MOVES}",
    )


def _rhat(run: Evidence) -> Signal | None:
    rhat = run.coordinates("rhat")
    if run.coupled or not rhat.size or not np.isfinite(rhat).any():
        return None
    worst = float(np.nanmax(rhat))
    if not worst > RHAT_WARN:
        return None
    return Signal(
        "rhat",
        "fail" if worst > RHAT_FAIL else "warn",
        worst,
        f"R-hat {worst:.3f} (above {RHAT_FAIL if worst > RHAT_FAIL else RHAT_WARN}): "
        "the chains disagree with each other, so they have not all reached the "
        "same distribution",
        _further(run.sampler),
    )


def _ess(run: Evidence) -> Signal | None:
    ess = run.coordinates("ess_bulk")
    if run.coupled or not ess.size or not np.isfinite(ess).any():
        return None
    least = float(np.nanmin(ess))
    if not least < MIN_ESS:
        return None
    return Signal(
        "ess",
        "warn",
        int(least),
        f"bulk ESS {least:.0f} (under {MIN_ESS} per parameter): the draws hold too "
        "few effective samples for their means and quantiles to be reliable",
        _further(run.sampler),
    )


def _ks(run: Evidence, sample: np.ndarray | None, exact: np.ndarray | None) -> Signal | None:
    """The draws against the exact sampler's, coordinate by coordinate, each within the KS
    bound of its effective sample size."""
    if exact is None or sample is None or not len(sample):
        return None
    ess = run.coordinates("ess_bulk")
    ks = diagnostics.ks_distance(sample, exact[:, : sample.shape[1]])
    n_eff = np.minimum(ess, len(sample)) if (ess.size and not run.coupled) else len(sample)
    n_eff = np.where(np.isfinite(n_eff) & (n_eff > 0), n_eff, len(sample))
    bound = diagnostics.ks_bound(n_eff, len(exact))
    over = np.flatnonzero(ks > bound)
    if not over.size:
        return None
    i = int(over[np.argmax((ks / bound)[over])])
    advice = (
        "more steps and burn-in (the chains had not converged)"
        if run.band
        else f"{run.smaller} (its discretisation bias shrinks with the step), or more steps"
    )
    return Signal(
        "ks",
        "fail",
        float(ks[i]),
        f"KS distance {float(ks[i]):.3f} from the exact sampler in coordinate {i} is "
        f"above its bound {float(np.broadcast_to(bound, ks.shape)[i]):.3f}: the "
        "draws are not distributed as the target",
        advice,
    )


def _range(sample: np.ndarray | None, bounds) -> Signal | None:
    """Draws far outside the target's plotted box: an improper density, or heavy tails."""
    if bounds is None or sample is None or not len(sample):
        return None
    lo, hi = np.asarray(bounds, dtype=float).T
    d = min(len(lo), sample.shape[1])
    lo, hi, x = lo[:d], hi[:d], sample[:, :d]
    centre, half = (lo + hi) / 2, (hi - lo) / 2
    far = float(np.max(np.abs(x - centre) / half))
    outside = float(np.mean(((x < lo) | (x > hi)).any(-1)))
    if far > RUN_OFF:
        return Signal(
            "run_off",
            "fail",
            far,
            f"draws ran off to {far:.0f} plot half-widths from the centre: the density "
            "is probably improper (not normalisable), so there is nothing to converge to",
            "a formula whose energy grows in every direction (add e.g. (x**2 + y**2)/20)",
        )
    if outside > OUTSIDE_WARN:
        return Signal(
            "outside",
            "warn",
            outside,
            f"{outside:.1%} of the draws lie outside the plotted range: the figures "
            "leave them out, and the tails may be heavier than drawn",
            "check the histograms' ranges, or a target with lighter tails",
        )
    return None


def _warnings(summary: dict) -> list[Signal]:
    """The summary's own warnings (the kernel's caveats) and the LLC's health warnings."""
    known = {"all_diverged", "no_acceptance"}  # said above with the numbers behind them
    out = [
        Signal(w["code"], "warn", None, w["message"], "")  # its message says what to try
        for w in summary.get("warnings") or []
        if w["code"] not in known
    ]
    llc = (summary.get("observables") or {}).get("llc") or {}
    for w in llc.get("warnings") or []:
        out.append(Signal(f"llc_{w['code']}", "warn", None, w["message"], ""))
    return out


def _pooled(x: np.ndarray | None, limit: int = 100_000) -> np.ndarray | None:
    """[k, n, d] or [C, d] draws as [N, d], an even subsample of at most ``limit``."""
    if x is None:
        return None
    x = np.asarray(x, dtype=float)
    x = x.reshape(-1, x.shape[-1])
    x = x[np.isfinite(x).all(-1)]
    return x[:: max(1, -(-len(x) // limit))]


# -- a vi run's fit ------------------------------------------------------------------------------


def judge_fit(summary: dict, curve: list[float]) -> dict:
    """A vi run's verdict from its own numbers: a divergence, a final objective above the
    exact log Z_bar (impossible: Psi <= log Z_bar, eq. 2 of the VI paper) beyond 3 Monte Carlo
    SEs, a curve still rising in its last epochs, or a fit that ended below where it began."""
    return verdict_of(
        [
            _fit_diverged(summary),
            _above_bound(summary),
            _far_below_bound(summary),
            *_fit_curve(summary, curve),
        ]
    )


def _fit_diverged(summary: dict) -> Signal | None:
    if not summary["diverged"]:
        return None
    return Signal(
        "diverged",
        "fail",
        summary["diverged_epoch"],
        f"the fit diverged in epoch {summary['diverged_epoch']} (a NaN or Inf objective "
        "or gradient, or a degenerate source); its parameters are the last finite ones",
        "smaller learning rates (vi.lr_lambda_beta, vi.lr_flow), or a prior closer to "
        "the data's scale",
    )


def _above_bound(summary: dict) -> Signal | None:
    value, se, log_z = summary["objective"], summary["objective_se"], summary["log_z_bar"]
    if value is None or log_z is None or not value > log_z + 3 * se:
        return None
    return Signal(
        "above_bound",
        "fail",
        value - log_z,
        f"Psi {value:.2f} is above the exact log Z_bar {log_z:.2f} by more than 3 "
        f"Monte Carlo SEs ({se:.2g}): the estimate cannot be right",
        "more final draws (vi.final_samples); report this run",
    )


def _far_below_bound(summary: dict) -> Signal | None:
    value, log_z = summary["objective"], summary["log_z_bar"]
    n, d = summary.get("n"), summary.get("dim")
    loose = 0.5 * d * math.log(n) if n and d and n > 1 else None  # a regular model's log n term
    if value is None or log_z is None or not loose or not value < log_z - loose:
        return None
    return Signal(
        "far_below_bound",
        "warn",
        log_z - value,
        f"Psi {value:.4g} is {log_z - value:.3g} nats below the exact log Z_bar "
        f"{log_z:.4g}, more than (d/2) log n = {loose:.3g}: this fit is too poor for its "
        "value (or a slope) to say much",
        "more epochs, smaller learning rates, or the gamma source",
    )


def _fit_curve(summary: dict, curve: list[float]) -> list[Signal]:
    """The objective's curve: still rising at its end, or ended below where it began (each
    beyond the epochs' own noise); too short to tell under 20 epochs."""
    if summary["diverged"]:
        return []
    if len(curve) < 20:
        return [
            Signal(
                "short",
                "warn",
                len(curve),
                f"{len(curve)} epochs are too few to tell whether the fit converged",
                "20 epochs or more (docs/methods/vi.md trains 100-300 on small models)",
            )
        ]
    out = []
    window = max(1, int(CONVERGED_WINDOW * len(curve)))
    last, before = np.array(curve[-window:]), np.array(curve[-2 * window : -window])
    se_diff = math.sqrt(last.var(ddof=1) / len(last) + before.var(ddof=1) / len(before))
    rise = float(last.mean() - before.mean())
    if rise > 3 * se_diff:
        out.append(
            Signal(
                "not_converged",
                "warn",
                rise,
                f"the objective still rose by {rise:.3g} over its last {window} epochs "
                f"(more than 3 SEs, {se_diff:.2g}): Psi is below what this flow reaches",
                "more epochs (vi.epochs)",
            )
        )
    first = np.array(curve[:window])
    se_drop = math.sqrt(last.var(ddof=1) / len(last) + first.var(ddof=1) / len(first))
    if last.mean() < first.mean() - 3 * se_drop:  # beyond the epochs' own noise
        out.append(
            Signal(
                "not_improving",
                "fail",
                float(last.mean() - first.mean()),
                "the objective ended below where it began: the fit made things worse",
                "smaller learning rates (vi.lr_lambda_beta, vi.lr_flow)",
            )
        )
    return out


def headline(verdict: dict | None) -> str:
    """One line: the status and its signals' codes, for the CLI and table cells."""
    if not verdict:
        return "no verdict"
    codes = [s["code"] for s in verdict["signals"] if s["status"] != "good"]
    return verdict["status"] + (f" ({', '.join(codes)})" if codes else "")
