"""The calibration grid, the ``calibrate`` sweep: one target and sampler over a step size x nbeta
grid: lambda_hat-versus-steps curves per cell, flags, and the largest step with none, per nbeta.
A running estimate that settled says little (a step too large biases every draw alike), so a
cell must also agree with a step an order of magnitude apart, and an SGLD step of its
preconditioned size must be one MALA would mostly accept. Also the Networks page's Calibrate
tab's table and its cells still running.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

import numpy as np

import landscapes
from runs.spec import RunSpec, SpecError, parse_spec
from runs.store import Store
from samplers import llc
from studies import arguments
from studies.sweeps import check_size, llc_curve, llc_summary, progress, require_values

KIND = "calibrate"
HELP = None  # listed without a line of its own in ``sweep --help``
SPEC_FLAGS = True  # the base run: every run flag (cli.flags)

ACCEPTANCE_MIN = 0.9  # the preconditioned MALA acceptance below which a step biases the chains
PRECISION = 0.1  # an estimate with an SE above this fraction of it can neither confirm nor be
DECADE = (5.0, 20.0)  # step ratios that count as "an order of magnitude smaller"
AGREE = 0.1  # relative difference two such estimates may have, on top of 2 combined SEs


def specs(
    base: RunSpec, step_sizes: tuple[float, ...], nbetas: tuple[float | None, ...] = (None,)
) -> tuple[dict, list[tuple[dict, RunSpec]]]:
    """The base LLC run over a step size x nbeta grid (None: the target's n / log n). Every cell
    has the base's seed, so a trained w0 is the same in each."""
    facts = landscapes.facts(base.target.name, base.target.params)
    if facts["n"] is None and facts["true_llc"] is None:
        raise SpecError(
            "target",
            "a calibration tunes the step of an LLC estimate, which needs a network (data, n) "
            "or a potential with a known learning coefficient (normal-crossing); "
            f"{base.target.name} is a potential with no data and no learning coefficient",
        )
    data = base.model_dump(mode="json")
    if "llc" not in data["observables"]:
        data["observables"] = [*data["observables"], "llc"]
    params = {"base": data, "step_sizes": list(step_sizes), "nbetas": list(nbetas)}
    require_values(step_sizes=step_sizes, nbetas=nbetas)
    check_size(len(step_sizes) * len(nbetas), "step_sizes", "nbetas")
    cells = []
    for nbeta in nbetas:
        for step_size in step_sizes:
            cell_data = {**data, "sampler": dict(data["sampler"])}
            cell_data["sampler"]["params"] = {
                **data["sampler"]["params"],
                "step_size": step_size,
                "nbeta": nbeta,
            }
            cells.append(({"step_size": step_size, "nbeta": nbeta}, parse_spec(cell_data)))
    return params, cells


def precise(row: dict) -> bool:
    return row["llc"] is not None and (row["se"] or 0) <= PRECISION * abs(row["llc"])


def agree(a: dict, b: dict) -> bool:
    """Whether two cells' estimates agree within AGREE plus two combined standard errors."""
    diff, noise = abs(a["llc"] - b["llc"]), 2 * math.hypot(a["se"] or 0, b["se"] or 0)
    return diff <= AGREE * max(abs(a["llc"]), abs(b["llc"])) + noise


def step_flags(rows: list[dict]) -> None:
    """Flag what the step-size axis says about each cell: "imprecise" (SE > 10% of lambda_hat:
    more chains or steps), else whether the precise cells at its nbeta and a step about 10x
    smaller confirm it, as halving a step checks an integrator: "step_sensitive" when they all
    disagree, "unconfirmed" when the grid has none (its smallest step, always). A smaller step
    that has not mixed yet reads low and makes a good step look sensitive: a false alarm, never
    a false pass."""
    for row in rows:
        if row["llc"] is None:
            continue
        if not precise(row):
            row["flags"].append("imprecise")
            continue
        others = [
            o
            for o in rows
            if o is not row
            and o["nbeta_value"] == row["nbeta_value"]
            and precise(o)
            and DECADE[0] <= row["step_size"] / o["step_size"] <= DECADE[1]
        ]
        if not others:
            row["flags"].append("unconfirmed")
        elif not any(agree(row, o) for o in others):
            row["flags"].append("step_sensitive")


def _summary_flags(summary: dict) -> list[str]:
    """What a finished cell's own LLC summary says is wrong with it."""
    flags = []
    if summary["nan_chains"]:
        flags.append("nan")
    if summary["spikes"]:
        flags.append("spikes")
    mean = summary["mean"]
    if mean is None or llc.out_of_range(mean, summary["se"], summary["dim"]):
        flags.append("out_of_range")
    if not summary.get("stationary", summary.get("plateaued")):  # its name before 11/2026
        flags.append("not_stationary")
    if summary["acceptance"] is not None and summary["acceptance"] < ACCEPTANCE_MIN:
        flags.append("low_acceptance")
    return flags


def results(store: Store, sweep: dict) -> dict:
    """Per cell: the curve, flags and whether it is stable; the recommended step per nbeta."""
    rows = []
    for cell in sweep["cells"]:
        summary = llc_summary(store, cell["run_id"])
        if summary is None:
            continue
        spec = parse_spec(store.get(cell["run_id"]).spec)
        rows.append(
            {
                **cell,
                "llc": summary["mean"],
                "se": summary["se"],
                "true": summary["true"],
                "nbeta_value": summary["nbeta"],
                "acceptance": summary["acceptance"],
                "flags": _summary_flags(summary),
                "curve": llc_curve(store, cell["run_id"], spec, summary),
            }
        )
    step_flags(rows)
    for row in rows:
        row["stable"] = not row["flags"]
    recommended = {}
    for nbeta in sorted({r["nbeta_value"] for r in rows}):
        stable = [r for r in rows if r["nbeta_value"] == nbeta and r["stable"]]
        best = max(stable, key=lambda r: r["step_size"], default=None)
        recommended[str(nbeta)] = None if best is None else best["step_size"]
    return {"progress": progress(store, sweep), "cells": rows, "recommended": recommended}


# -- the Networks page's Calibrate tab -----------------------------------------------------------


def pending_cells(
    store: Store, sweep: dict, result: dict, nbeta_default: float, read: Callable
) -> list[dict]:
    """A calibration's cells not among its finished ``result`` (``results``): running (their
    live curve, the mean over finite chains of ``read(run_id)``, the run's flushes so far) or
    queued/failed."""
    finished = {c["run_id"] for c in result["cells"]}
    out = []
    for cell in sweep["cells"]:
        if cell["run_id"] in finished:
            continue
        try:
            status = store.get(cell["run_id"]).status
        except KeyError:
            continue
        curve = {}
        data = read(cell["run_id"])
        if len(data.get("step", ())):
            mean = {k: finite_mean(data[k]).tolist() for k in ("llc", "distance", "acceptance")}
            step = data["step"].tolist()
            curve = {"step": step, "flush_step": step, **mean}
        nbeta = cell["nbeta"] if cell["nbeta"] is not None else nbeta_default
        out.append({**cell, "status": status, "nbeta_value": nbeta, "curve": curve})
    return out


def finite_mean(values) -> np.ndarray:
    """Per row of [T, chains] (or [T]), the mean over the finite chains; NaN where none is."""
    x = np.asarray(values, dtype=float)
    x = x[:, None] if x.ndim == 1 else x
    good = np.isfinite(x)
    count = good.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(good, x, 0).sum(1) / count
    mean[count == 0] = np.nan
    return mean


def rows(cells: list[dict]) -> dict:
    """A calibration's finished cells as the Networks page's table (columns of values)."""
    return {
        "step size": [c["step_size"] for c in cells],
        "nβ": [c["nbeta_value"] for c in cells],
        "λ̂": [c["llc"] for c in cells],
        "SE": [c["se"] for c in cells],
        "acceptance": [c["acceptance"] for c in cells],
        "flags": [", ".join(c["flags"]) or "stable" for c in cells],
    }


# -- the command line: python -m jobs sweep calibrate [run flags] ... ---------------------------


def add_arguments(k: argparse.ArgumentParser) -> None:
    k.add_argument("--nbetas", help="comma-separated nbeta values (default: n / log n)")
    arguments.add_step_sizes(k)
    arguments.add_run(k, arguments.SUBMIT_HELP)


def specs_from_args(args: argparse.Namespace, base: Callable[[], dict]) -> tuple[dict, list]:
    """``base``: the run flags' spec (``cli.flags``), read after this study's own flags."""
    step_sizes = arguments.floats(args.step_sizes, "--step-sizes")
    nbetas = (None,) if not args.nbetas else arguments.floats(args.nbetas, "--nbetas")
    return specs(parse_spec(arguments.with_llc(base())), step_sizes, nbetas)


def print_text(result: dict) -> None:
    for c in result["cells"]:
        estimate = "-" if c["llc"] is None else f"{c['llc']:.4g}"
        print(
            f"step {c['step_size']:<8.2g} nbeta {c['nbeta_value']:<10.4g} llc {estimate:<10} "
            f"{', '.join(c['flags']) or 'stable'}"
        )
    print(f"recommended step size per nbeta: {result['recommended']}")
