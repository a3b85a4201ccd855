"""The LLC over training, the ``checkpoints`` sweep: one LLC run of a ``model`` target per
checkpoint (same sampler, seed and settings, w0 the checkpoint's weights), the curve lambda_hat
against the training step with its error band, beside the training loss at each checkpoint.
"""

from __future__ import annotations

import argparse
import glob
import re
from collections.abc import Callable
from pathlib import Path

import landscapes
from runs.spec import RunSpec, SpecError, parse_spec
from runs.store import Store
from studies import arguments
from studies.sweeps import check_size, llc_curve, progress

KIND = "checkpoints"
HELP = "the LLC over training: one LLC estimate per checkpoint of a model"
SPEC_FLAGS = True  # the base run: every run flag (cli.flags), its target the --factory's model


def checkpoint_step(path: str) -> int | None:
    """The training step a checkpoint's file name gives: its last integer ("step-0200.pt",
    "ckpt_12_final.safetensors" -> 12), or None."""
    found = re.findall(r"\d+", Path(path).stem)
    return int(found[-1]) if found else None


def find_checkpoints(pattern: str) -> list[str]:
    """The files ``pattern`` matches (a glob; ** reaches into folders), by training step (then
    name): a SpecError naming ``--checkpoints`` when there are none."""
    matched = glob.glob(str(Path(pattern).expanduser()), recursive=True)
    paths = [str(Path(p).resolve()) for p in matched if Path(p).is_file()]
    if not paths:
        raise SpecError("checkpoints", f"no file matches {pattern!r}")
    return by_step(paths)


def by_step(paths) -> list[str]:
    """Checkpoints by training step (``checkpoint_step``; those without one last), then name."""
    return sorted(
        paths, key=lambda p: (checkpoint_step(p) is None, checkpoint_step(p) or 0, Path(p).name, p)
    )


def specs(base: RunSpec, checkpoints: list[str]) -> tuple[dict, list]:
    """The base LLC run of a ``model`` target once per checkpoint, each cell's w0 that
    checkpoint's weights; the same seed in every cell, so cells differ only in w0. A checkpoint
    that does not fit the module is refused here, by name, before anything is queued."""
    if base.target.name != "model":
        raise SpecError(
            "target", f"must be 'model' for a checkpoint sweep, got {base.target.name!r}"
        )
    if not checkpoints:
        raise SpecError("checkpoints", "must name one or more checkpoint files, got none")
    check_size(len(checkpoints), "checkpoints")
    data = base.model_dump(mode="json")
    if "llc" not in data["observables"]:
        data["observables"] = [*data["observables"], "llc"]
    data["llc"] = {**data["llc"], "w0": "truth"}  # each checkpoint's weights: the point measured
    cells = []
    for k, path in enumerate(checkpoints):
        step = checkpoint_step(path)
        cell = {**data, "target": {**data["target"], "params": {**data["target"]["params"]}}}
        cell["target"]["params"]["checkpoint"] = path
        spec = parse_spec(cell)
        landscapes.facts("model", spec.target.params)  # loads it: a mismatch is named now
        cells.append(({"checkpoint": Path(path).name, "step": k if step is None else step}, spec))
    params = {"base": data, "checkpoints": [spec.target.params["checkpoint"] for _, spec in cells]}
    return params, cells


def results(store: Store, sweep: dict) -> dict:
    """Per checkpoint, by step: lambda_hat with its SE (None while its run goes), the training
    loss at the checkpoint (the LLC's full-data baseline L_n(w0)), the run's status, verdict and
    LLC warnings, and the running-estimate curve; ``pending`` counts the cells not done."""
    rows = []
    for cell in sweep["cells"]:
        try:
            record = store.get(cell["run_id"])
        except KeyError:
            continue  # deleted from the Runs page: no point on the curve
        summary = (record.summary or {}).get("observables", {}).get("llc")
        done = record.status == "completed" and summary is not None
        row = {
            **cell,
            "status": record.status,
            "llc": summary["mean"] if done else None,
            "se": summary["se"] if done else None,
            "train_loss": summary["baseline_loss"] if done else None,
            "nbeta": summary["nbeta"] if done else None,
            "warnings": [w["code"] for w in summary["warnings"]] if done else [],
            "verdict": (record.summary or {}).get("verdict", {}).get("status") if done else None,
            "curve": None,
        }
        if done:
            row["curve"] = llc_curve(store, cell["run_id"], parse_spec(record.spec), summary)
        rows.append(row)
    rows.sort(key=lambda r: (r["step"], r["checkpoint"]))
    return {"progress": progress(store, sweep), "cells": rows}


# -- the command line: python -m jobs sweep checkpoints [run flags] --factory ... ---------------


def add_arguments(k: argparse.ArgumentParser) -> None:
    # --factory makes the base run's target the model (``cli.flags.spec_from_args`` reads it)
    k.add_argument(
        "--factory", required=True, help="the model: path/to/file.py:make or pkg.mod:make"
    )
    k.add_argument(
        "--checkpoints", required=True, help="a glob of weights files, e.g. 'ckpt/step-*.pt'"
    )
    arguments.add_run(k)


def specs_from_args(args: argparse.Namespace, base: Callable[[], dict]) -> tuple[dict, list]:
    """``base``: the run flags' spec (``cli.flags``)."""
    spec = parse_spec(arguments.with_llc(base()))  # --observe predictive, say, kept and checked
    return specs(spec, find_checkpoints(args.checkpoints))


def print_text(result: dict) -> None:
    fmt = lambda v, f=".4g": "-" if v is None else format(v, f)  # noqa: E731
    for c in result["cells"]:
        print(
            f"step {c['step']:<8} {c['checkpoint']:<24} llc {fmt(c['llc']):<9} +- "
            f"{fmt(c['se'], '.2g'):<7} train loss {fmt(c['train_loss'])}  {c['status']}"
            + (f"  {c['verdict']}: {', '.join(c['warnings'])}" if c["warnings"] else "")
        )
