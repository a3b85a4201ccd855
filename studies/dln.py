"""The local-sampling benchmark (Hitchcock & Hoogland 2025, Secs. 3-4), the ``dln`` sweep: K
generated DLN problems x samplers x step sizes, each run from the generating point w0, whose true
LLC is known. Metrics per (sampler, step size): mean and SD of the relative error (lambda_hat -
lambda) / lambda over problems, the fractions of chains that diverged (NaN) and of runs with any
such chain (each run's estimate averages its surviving chains), and the order-preservation rate over
problem pairs (Figs 3, 5-8).
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from itertools import combinations

import numpy as np

from landscapes.base import shown
from runs.spec import RunSpec, SpecError, parse_spec
from runs.store import Store
from studies import arguments
from studies.sweeps import (
    RECORDS_PER_RUN,
    check_size,
    check_steps,
    llc_summary,
    progress,
    require_values,
)

KIND = "dln"
HELP = None  # listed without a line of its own in ``sweep --help``
SPEC_FLAGS = False  # its own flags, not a base run's


def specs(
    size_class: str = "tiny",
    problems: int = 16,
    samplers: tuple[str, ...] = ("sgld", "rmsprop-sgld", "adam-sgld", "sghmc", "sgnht"),
    step_sizes: tuple[float, ...] = (1e-8, 1e-7, 1e-6),
    steps: int = 5000,
    chains: int = 1,
    batch_size: int = 500,
    n: int = 100_000,
    seed: int = 0,
    burn_fraction: float = 0.9,
    device: str = "auto",
    dtype: str = "float32",
) -> tuple[dict, list[tuple[dict, RunSpec]]]:
    """The sweep's parameters and its (cell, RunSpec) pairs: problem p is the DLN drawn from
    ``seed + p``; every run starts at the generating point and uses the paper's burn-in."""
    params = dict(locals())
    params["samplers"], params["step_sizes"] = list(samplers), list(step_sizes)
    if problems < 1:
        raise SpecError("problems", f"must be an integer >= 1, got {shown(problems)}")
    check_steps(steps)
    require_values(samplers=samplers, step_sizes=step_sizes)
    check_size(problems * len(samplers) * len(step_sizes), "problems", "samplers", "step_sizes")
    cells = []
    for problem in range(problems):
        for sampler in samplers:
            for step_size in step_sizes:
                spec = parse_spec(
                    {
                        "target": {
                            "name": "dln",
                            "params": {"size_class": size_class, "n": n, "seed": seed + problem},
                        },
                        "sampler": {
                            "name": sampler,
                            "params": {"step_size": step_size, "batch_size": batch_size},
                        },
                        "chains": chains,
                        "steps": steps,
                        "burn_in": min(steps - 1, int(burn_fraction * steps)),
                        "thin": max(1, steps // RECORDS_PER_RUN),
                        "seed": seed + problem,
                        "device": device,
                        "dtype": dtype,
                        "record": {"positions": "none"},
                        "observables": ["llc"],
                        "llc": {"w0": "truth"},
                    }
                )
                cell = {"problem": problem, "sampler": sampler, "step_size": step_size}
                cells.append((cell, spec))
    return params, cells


def order_preservation(true: np.ndarray, estimate: np.ndarray) -> float | None:
    """Over problem pairs with lambda_1 < lambda_2, the fraction with lambda_hat_1 < lambda_hat_2
    (Hitchcock & Hoogland 2025, Fig. 8); pairs with a NaN estimate are left out."""
    pairs = [
        (i, j) if true[i] < true[j] else (j, i)
        for i, j in combinations(range(len(true)), 2)
        if true[i] != true[j] and np.isfinite(estimate[i]) and np.isfinite(estimate[j])
    ]
    if not pairs:
        return None
    return float(np.mean([estimate[i] < estimate[j] for i, j in pairs]))


def _metrics(sampler: str, step_size: float, group: list[dict]) -> dict:
    """The benchmark's numbers of one (sampler, step size) over its finished problems."""
    rel = np.array([np.nan if r["relative_error"] is None else r["relative_error"] for r in group])
    finite = rel[np.isfinite(rel)]
    true = np.array([r["true"] for r in group], dtype=float)
    est = np.array([np.nan if r["llc"] is None else r["llc"] for r in group])
    return {
        "sampler": sampler,
        "step_size": step_size,
        "problems": len(group),
        "relative_error_mean": float(finite.mean()) if finite.size else None,
        "relative_error_sd": float(finite.std(ddof=1)) if finite.size > 1 else None,
        "nan_fraction": sum(r["nan_chains"] for r in group) / sum(r["chains"] for r in group),
        # the estimate averages a run's surviving chains: say how many runs lost some
        "nan_run_fraction": sum(r["nan_chains"] > 0 for r in group) / len(group),
        "order_preservation": order_preservation(true, est),
    }


def results(store: Store, sweep: dict) -> dict:
    """Per cell: the estimate and its relative error; per (sampler, step size): the metrics."""
    rows, groups = [], defaultdict(list)
    for cell in sweep["cells"]:
        summary = llc_summary(store, cell["run_id"])
        if summary is None:
            continue
        true, mean = summary["true"], summary["mean"]
        rel = None if mean is None or not true else (mean - true) / true
        row = {
            **cell,
            "llc": mean,
            "true": true,
            "dim": summary["dim"],
            "relative_error": rel,
            "nan_chains": summary["nan_chains"],
            "chains": summary["chains"],
            "warnings": [w["code"] for w in summary["warnings"]],
        }
        rows.append(row)
        groups[(cell["sampler"], cell["step_size"])].append(row)
    metrics = [_metrics(sampler, step, group) for (sampler, step), group in sorted(groups.items())]
    return {"progress": progress(store, sweep), "cells": rows, "metrics": metrics}


# -- the command line: python -m jobs sweep dln ... ----------------------------------------------


def add_arguments(k: argparse.ArgumentParser) -> None:
    k.add_argument(
        "--class", dest="size_class", default="tiny", help="size class: tiny, 100K, 1M, 10M, 100M"
    )
    k.add_argument("--problems", type=int, default=16)
    k.add_argument("--samplers", default="sgld,rmsprop-sgld,adam-sgld,sghmc,sgnht")
    k.add_argument("--steps", type=int, help="sampler steps per run (default 5000)")
    k.add_argument("--chains", type=int, help="chains per run (default 1, as the paper)")
    k.add_argument("--batch-size", dest="batch_size", type=int, default=500)
    k.add_argument("--n", type=int, default=100_000, help="training points per problem")
    k.add_argument("--seed", type=int)
    k.add_argument("--device")
    k.add_argument("--dtype", choices=("float32", "float64"))
    k.add_argument("--json", action="store_true")
    arguments.add_step_sizes(k)
    arguments.add_run(k, arguments.SUBMIT_HELP)


def specs_from_args(args: argparse.Namespace, base=None) -> tuple[dict, list]:
    step_sizes = arguments.floats(args.step_sizes, "--step-sizes")
    samplers = arguments.names(args.samplers)
    if not samplers:
        raise SpecError("--samplers", f"must name one or more samplers, got {args.samplers!r}")
    return specs(
        size_class=args.size_class,
        problems=args.problems,
        samplers=samplers,
        step_sizes=step_sizes,
        steps=5000 if args.steps is None else args.steps,  # 0 is refused, not replaced
        chains=1 if args.chains is None else args.chains,
        batch_size=args.batch_size,
        n=args.n,
        seed=0 if args.seed is None else args.seed,
        device=args.device or "auto",
        dtype=args.dtype or "float32",
    )


def print_text(result: dict) -> None:
    fmt = lambda v: "-" if v is None else f"{v:.3g}"  # noqa: E731
    for m in result["metrics"]:
        print(
            f"{m['sampler']:<14} step {m['step_size']:<8.2g} rel. error "
            f"{fmt(m['relative_error_mean'])} +- {fmt(m['relative_error_sd'])}  "
            f"NaN chains {m['nan_fraction']:.2f} runs {m['nan_run_fraction']:.2f}  "
            f"order {fmt(m['order_preservation'])}"
        )
