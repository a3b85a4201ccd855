"""The ``nested`` run kind: nested sampling with RadFriends (``samplers.nested``; Skilling 2006,
Buchner 2016) on a potential with a box, in the background like any run.

A nested run is queued, claimed by a worker and stepped on the run loop's clock (``runs.pace``:
flushes, progress, cancels), as a vi run is. Its records are the removed ("dead") points, one
row each, in order: ``iteration`` (i, from 1), ``position`` [d], ``log_l`` (log L = -U) and
``log_weight``, the point's share of the evidence before normalising, log L_i + log(X_{i-1} -
X_i) + log |box| (a row's posterior weight is exp(log_weight - log_z)). When the run stops, the
final live points follow as rows iterations + 1 .. iterations + N (weight X_n / N each). Its side
arrays: ``draws``, the weighted posterior resampled to equally weighted draws, and ``frame_*``,
the animation's frames (``samplers.nested.NestedTrace``). Its summary holds log Z with its error,
the exact normaliser where the potential has one, the information, iterations, evaluations, the
weights' ESS, the efficiency and why it stopped, and the verdict (``judge``). A resumed run
replays: the run is the same from the same seed, and only the rows the store lacks are written.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from runs import verdict
from runs.build import build_target
from runs.pace import Pace, append_unstored
from runs.spec import RunSpec
from runs.store import Store
from samplers import diagnostics
from samplers.nested import BATCH_ELEMENTS, NestedResult, NestedSampler

# The evidence agrees with the exact normaliser within this many of its own reported errors.
# The exact normaliser is over the whole plane, nested sampling's over the plotted box: the box
# leaves out at most ~0.02 of log Z (the funnels' tails), against errors of ~0.1 at 400 points.
AGREES = 3.0
BLOCK = 32  # iterations between two looks at the clock (a few ms on a 2-D potential)
# The animation: a frame every N / FRAME_SPACING iterations, so that the frames span the run (a
# 2-D teaching potential stops after 5-10 N iterations), at most FRAMES of them and at most
# FRAME_NUMBERS numbers of live points in all (16 MB in float64).
FRAME_SPACING, FRAMES, FRAME_NUMBERS = 20, 200, 1 << 21
FRAME_FIELDS = ("iteration", "live", "removed", "added", "radius", "scale", "rejected", "log_z")
ITERATIONS_PER_LIVE = 50  # the budget's count of iterations a live point (``sizes``)
DEAD_BYTES = 256  # a dead point held until the end: its [d] tensor object and its log L
REJECTED = 32  # candidates a frame keeps (``NestedSampler``'s rejected_max)
DRAWS_SEED = 1  # the resampling's generator: seed + this, on the CPU (the same on any device)


def facts(name: str, exact: float | None, result: NestedResult) -> dict:
    """The evidence and how it was found: what ``python -m jobs evidence`` prints and a nested
    run's summary holds. ``errors_off``: (log Z - exact) / its error, None without an exact."""
    off = None if exact is None else (result.log_z - exact) / result.log_z_error
    return {
        "target": name,
        "log_z": result.log_z,
        "log_z_error": result.log_z_error,
        "exact_log_z": exact,
        "errors_off": off if off is None or math.isfinite(off) else None,
        "information": result.information,
        "iterations": result.iterations,
        "evaluations": result.evaluations,
        "ess": result.ess,
        "efficiency": result.efficiency,
        "stopped": result.stopped,
        "bounds": [list(b) for b in result.bounds],
    }


def exact_log_z(target, nbeta: float | None) -> float | None:
    """The potential's exact normaliser of exp(-U), where it has one and U is its own energy
    (nbeta unset or the target's)."""
    if nbeta is not None and nbeta != target.nbeta:
        return None
    return getattr(target, "log_z", None)


def frames(live: int, dim: int) -> dict:
    """``trace_every`` and ``trace_max`` of a run with ``live`` points in ``dim`` dimensions."""
    most = max(1, min(FRAMES, FRAME_NUMBERS // (live * dim)))
    return {"trace_every": max(1, live // FRAME_SPACING), "trace_max": most}


def sizes(spec: RunSpec, dim: int) -> tuple[dict[str, int], int, int]:
    """(device bytes by ``runs.budget`` part, store bytes, records) of a nested run in ``dim``
    dimensions. The iterations are counted as at most ITERATIONS_PER_LIVE N (or max_iter): the
    run stops at dlogz after about N (H + a few) iterations, H the information in nats (2-3 on
    the teaching potentials), so this holds for any H under ~40."""
    o, itemsize = spec.nested, 4 if spec.dtype == "float32" else 8
    n, rows = o.live, min(o.max_iter, ITERATIONS_PER_LIVE * o.live) + o.live
    frame = frames(n, dim)["trace_max"] * ((n + 3 + REJECTED) * dim + 3) * itemsize
    parts = {
        "state": n * (dim + 1) * itemsize + rows * DEAD_BYTES + frame,
        "step": n * n * (itemsize + 1) + 3 * BATCH_ELEMENTS * itemsize,  # bootstrap, candidates
    }
    return parts, rows * (3 + dim) * 8 + frame + rows * dim * 8, rows


def nested_run(spec: RunSpec, store: Store, run_id: str, pace: Pace, started: float) -> dict:
    """Run ``spec`` into ``store`` under ``run_id`` on the run loop's clock (``runs.loop.execute``
    starts every run kind); the summary (status completed, or cancelled when ``pace`` said so
    between blocks of iterations)."""
    target, _ = build_target(spec)
    generator = torch.Generator(device=target.device).manual_seed(spec.seed)
    settings = spec.nested.model_dump()
    sampler = NestedSampler(target, generator, **settings, **frames(settings["live"], target.dim))
    records = DeadRecords(store, run_id, sampler)
    sampling = pace.begin()
    cancelled = False
    while sampler.step(BLOCK):
        if pace.late():
            records.flush()
            pace.total = expected_iterations(sampler)
            pace.flushed(sampler.iteration)
        if pace.stop():
            cancelled = True
            break
    result = sampler.result()
    # a cancelled run keeps its dead points only: a resumed run replays to the same ones, and
    # then writes the rows after them (the live points of now would stand in their place)
    records.flush(None if cancelled else result)
    pace.total = sampler.iteration
    pace.report(sampler.iteration, time.perf_counter() - sampling)
    draws = equal_weight_draws(result, spec.seed)
    store.put_array(run_id, "draws", draws)
    for name, array in frame_arrays(result).items():
        store.put_array(run_id, f"frame_{name}", array)
    exact = exact_log_z(target, settings["nbeta"])
    summary = {
        "run_id": run_id,
        "kind": "nested",
        "status": "cancelled" if cancelled else "completed",
        **facts(spec.target.name, exact, result),
        "dim": target.dim,
        "live": result.live,
        "log_evidence": result.log_evidence,
        "log_volume": result.log_volume,
        "draws": len(draws),
        "seconds": time.perf_counter() - started,
        "sampling_seconds": time.perf_counter() - sampling,
        "observables": {},
        "warnings": [],
    }
    summary["verdict"] = judge(summary, draws, exact_draws(target, exact))
    return summary


def expected_iterations(sampler: NestedSampler) -> int:
    """The iterations the run will likely take, for its progress: now, plus those until the live
    points' bound on what is left, log L_max - i / N, falls dlogz below log Z (the stop)."""
    i, n = sampler.iteration, sampler.n
    if sampler.log_e == -math.inf:
        return sampler.max_iter
    remaining = float(sampler.log_l.max()) - i / n - sampler.log_e
    more = n * max(0.0, remaining - math.log(math.expm1(sampler.dlogz)))
    return int(min(sampler.max_iter, i + math.ceil(more)))


def equal_weight_draws(result: NestedResult, seed: int) -> np.ndarray:
    """[n, d] float64: the weighted posterior resampled by weight, with replacement. n is the
    weights' Kish ESS (rounded up): the draws are worth about that many independent ones, so a
    histogram or KS test of them is as sure as the weighted sample allows; more would repeat
    points and make a KS bound too tight."""
    g = torch.Generator().manual_seed(seed + DRAWS_SEED)
    weights = result.weights.detach().double().cpu()
    index = torch.multinomial(weights, math.ceil(result.ess), replacement=True, generator=g)
    return result.dead.positions.detach().double().cpu().numpy()[index.numpy()]


def frame_arrays(result: NestedResult) -> dict[str, np.ndarray]:
    """The animation's frames as arrays (``samplers.nested.NestedTrace``); {} when none."""
    trace = result.trace
    if trace is None:
        return {}
    return {name: getattr(trace, name).detach().cpu().numpy() for name in FRAME_FIELDS}


def exact_draws(target, exact: float | None) -> np.ndarray | None:
    """The exact sampler's draws the verdict's KS reads (those a sampling run's verdict reads),
    where the target has one and the run samples its own density."""
    if exact is None or target.exact_sample is None:
        return None
    g = torch.Generator(device=target.device).manual_seed(verdict.EXACT_SEED)
    return target.exact_sample(g, verdict.EXACT_DRAWS).cpu().double().numpy()


class DeadRecords:
    """A run's records: the dead points removed since the last flush, then, at the end, the final
    live points; a resumed run replays them and writes only the rows the store lacks."""

    def __init__(self, store: Store, run_id: str, sampler: NestedSampler):
        self.store, self.run_id, self.sampler = store, run_id, sampler
        self.stored = store.records(run_id)
        self.written = 0
        self.log_width = math.log(-math.expm1(-1 / sampler.n))  # log(X_{i-1} - X_i) + (i-1)/N

    def flush(self, result: NestedResult | None = None) -> None:
        """The dead points not written yet; with the run's ``result``, the live points too."""
        s, first = self.sampler, self.written
        if result is None:
            positions, log_l = s.removed(first)
            i = torch.arange(first + 1, first + len(log_l) + 1, dtype=log_l.dtype)
            log_w = log_l.cpu() - (i - 1) / s.n + self.log_width + s.log_volume
        else:  # every row from the result: dead then live, weights normalised by log Z
            positions, log_l = result.dead.positions[first:], result.dead.log_l[first:]
            log_w = result.dead.log_w[first:].cpu() + result.log_z
        if not len(log_l):
            return
        parts = {
            "iteration": [np.arange(first + 1, first + len(log_l) + 1, dtype=np.int64)],
            "position": [positions.detach().double().cpu().numpy()],
            "log_l": [log_l.detach().double().cpu().numpy()],
            "log_weight": [log_w.detach().double().numpy()],
        }
        self.written = append_unstored(
            self.store, self.run_id, "records", first, parts, self.stored
        )


def judge(summary: dict, draws: np.ndarray, exact: np.ndarray | None) -> dict:
    """A nested run's verdict from its own numbers: good when log Z lies within AGREES of its
    errors of the exact normaliser and the draws pass KS against the exact sampler; a fail when
    either does not, or the run did not reach its dlogz stop. No band is set on the efficiency
    (iterations per evaluation): neither Buchner (2016) nor the Gallery states one."""
    found = verdict.verdict_of(
        [_stopped(summary), _evidence(summary), _ks(draws, summary["ess"], exact)]
    )
    checked = ["the run reached its dlogz stop"]
    if summary.get("exact_log_z") is not None:
        checked.append(f"log Z lies within {AGREES:g} of its errors of the exact normaliser")
    if exact is not None:
        checked.append("its draws pass KS against the exact sampler")
    said = checked[0] if len(checked) == 1 else ", ".join(checked[:-1]) + " and " + checked[-1]
    return {**found, "checked": said}


def _stopped(summary: dict) -> verdict.Signal | None:
    why = summary["stopped"]
    if why == "dlogz" or summary["status"] == "cancelled":
        return None
    if why == "max_iter":
        return verdict.Signal(
            "max_iter",
            "fail",
            summary["iterations"],
            f"the run stopped at max_iter ({summary['iterations']} iterations) before the live "
            "points held under dlogz of the evidence: log Z leaves out what they hold",
            "a larger nested.max_iter",
        )
    return verdict.Signal(
        "stuck",
        "fail",
        summary["iterations"],
        "no replacement was found within a million region draws: the likelihood has a plateau, "
        "or the region lost the contour",
        "more live points (nested.live), or a target whose energy varies over the box",
    )


def _evidence(summary: dict) -> verdict.Signal | None:
    off = summary["errors_off"]
    if off is None or abs(off) <= AGREES:
        return None
    return verdict.Signal(
        "evidence",
        "fail",
        off,
        f"log Z = {summary['log_z']:.3f} +- {summary['log_z_error']:.3f} is {abs(off):.1f} "
        f"errors from the exact {summary['exact_log_z']:.3f} (more than {AGREES:g}): the "
        "region missed part of the contour, or the run stopped early",
        "more live points (nested.live: a smaller error and a region that keeps every mode), "
        "or a smaller nested.dlogz",
    )


def _ks(draws: np.ndarray, ess: float, exact: np.ndarray | None) -> verdict.Signal | None:
    """The equally weighted draws against the exact sampler's, coordinate by coordinate, each
    within the KS bound of ``ess`` draws: the weighted sample's Kish ESS, whose CDF errs by
    about 1 / ESS in variance, and the resampling's n draws, which add 1 / n: 1 / (1 / ESS +
    1 / n), half the draws' number when n = ESS."""
    if exact is None or not len(draws):
        return None
    ks = diagnostics.ks_distance(draws, exact[:, : draws.shape[1]])
    n_eff = 1 / (1 / ess + 1 / len(draws))
    bound = np.broadcast_to(diagnostics.ks_bound(n_eff, len(exact)), ks.shape)
    over = np.flatnonzero(ks > bound)
    if not over.size:
        return None
    i = int(over[np.argmax((ks / bound)[over])])
    return verdict.Signal(
        "ks",
        "fail",
        float(ks[i]),
        f"KS distance {float(ks[i]):.3f} of the resampled draws from the exact sampler in "
        f"coordinate {i} is above its bound {float(bound[i]):.3f}: the weighted posterior is "
        "not the target",
        "more live points (nested.live), or a smaller nested.dlogz",
    )
