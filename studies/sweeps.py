"""Sweeps: sets of runs that vary one thing, fanned out over the worker pool.

A sweep is stored beside the runs (``Store.create_sweep``): its parameters and one cell per run,
naming what the cell varies. Its results are computed from the runs whenever they are read, so a
page watching a sweep sees it fill in as runs finish, and nothing is stored twice.

This module is what every study's sweep shares: the size check, submit, progress, a finished
run's LLC summary and running-estimate curve. Each study (its specs, results, flags and text)
is its own module; ``studies.registry`` lists them by kind.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from landscapes.base import shown
from runs.budget import check_budget
from runs.spec import RunSpec, SpecError
from runs.store import FINAL, Store
from samplers import llc

CURVE_POINTS = 200  # points per lambda_hat-versus-steps curve handed to the app
RECORDS_PER_RUN = 1000  # thin so that a sweep's runs store about this many records each
MAX_RUNS = 1000  # runs in one sweep: each is validated before any is queued (~10 ms each)


def check_size(runs: int, *fields: str) -> None:
    """A SpecError naming ``fields`` when their product ``runs`` is over MAX_RUNS."""
    if runs > MAX_RUNS:
        fewer = ", ".join(fields[:-1]) + f" or {fields[-1]}"
        raise SpecError(
            "sweep",
            f"{' x '.join(fields)} = {shown(runs)} runs, over the {MAX_RUNS} a sweep may hold; "
            f"give fewer {fewer}",
        )


def check_steps(steps: int) -> None:
    """A SpecError on "steps" outside a RunSpec's range, checked before a sweep derives its
    burn-in from it (burn_fraction x 10^400 steps overflows a float)."""
    high = next(m.le for m in RunSpec.model_fields["steps"].metadata if hasattr(m, "le"))
    if not 1 <= steps <= high:
        raise SpecError("steps", f"must be an integer in [1, {high}], got {shown(steps)}")


def require_values(**given) -> None:
    """A SpecError naming the first of ``given``'s fields that holds no value."""
    for field, values in given.items():
        if not values:
            raise SpecError(field, "must hold at least one value, got none")


def submit(
    store: Store,
    kind: str,
    params: dict,
    cells: list[tuple[dict, RunSpec]],
    held_by: int | None = None,
) -> str:
    """Check every run against the memory budget first (a class too large for the device is
    refused with the estimate, before anything is queued), then queue them all (``held_by``: held
    by that process, a Ray driver or the app starting one, so no local worker takes them)."""
    for _, spec in cells:
        check_budget(spec)
    stored = []
    for cell, spec in cells:
        run_id = store.create(spec.model_dump(mode="json"), held_by=held_by)
        stored.append({**cell, "run_id": run_id})
    return store.create_sweep(kind, params, stored)


def progress(store: Store, sweep: dict) -> dict:
    counts: dict[str, int] = defaultdict(int)
    for cell in sweep["cells"]:
        try:
            counts[store.get(cell["run_id"]).status] += 1
        except KeyError:
            counts["deleted"] += 1
    # A run deleted from the Runs page will not finish: it counts as done, or a page (or the
    # CLI) watching the sweep would wait for it forever.
    done = sum(v for k, v in counts.items() if k in FINAL or k == "deleted")
    return {"runs": len(sweep["cells"]), "done": done, "by_status": dict(counts)}


def sweep_done(store: Store, sweep: dict) -> bool:
    """Whether every run of ``sweep`` has ended (or was deleted)."""
    counts = progress(store, sweep)
    return counts["done"] == counts["runs"]


def llc_summary(store: Store, run_id: str) -> dict | None:
    """A finished run's LLC summary, or None while it runs (or when it failed)."""
    try:
        record = store.get(run_id)
    except KeyError:
        return None
    if record.status != "completed" or not record.summary:
        return None
    return record.summary["observables"].get("llc")


def llc_curve(store: Store, run_id: str, spec: RunSpec, summary: dict) -> dict:
    """The running lambda_hat (mean over finite chains) against the step, <= CURVE_POINTS.
    A paired run's losses are taken relative to w0's on the same batch, as its estimate is."""
    data = store.read(run_id, names=["step", "loss", "center_loss"])
    burn = math.ceil(spec.burn_in / spec.thin)
    loss = llc.paired_losses(data, summary["baseline_loss"])
    run = llc.running(loss, summary["baseline_loss"], summary["nbeta"], burn)
    with np.errstate(invalid="ignore"):
        good = np.isfinite(run[-1]) if len(run) else np.zeros(0, bool)
        mean = run[:, good].mean(1) if good.any() else np.full(len(run), np.nan)
    pick = (
        np.unique(np.linspace(burn, len(run) - 1, CURVE_POINTS).astype(int))
        if len(run) > burn
        else []
    )
    flushes = store.read(run_id, series="flushes")
    with np.errstate(invalid="ignore"):
        live = {
            k: np.nanmean(flushes[k], 1).tolist()
            for k in ("distance", "acceptance")
            if k in flushes
        }
    return {
        "step": data["step"][pick].tolist(),
        "llc": [None if not math.isfinite(v) else float(v) for v in mean[pick]],
        "flush_step": flushes.get("step", np.zeros(0)).tolist(),
        **live,
    }


def print_flags(result: dict) -> None:
    """A study's flags, a line each: level, where, message and what to try."""
    for f in result.get("flags", []):
        print(f"{f['level'].upper()} {f['where']}: {f['message']}; try {f['try']}")
