"""``python -m jobs evidence``: nested sampling with RadFriends (``samplers.nested``) on a
potential, in this process: its log Z with the error nested sampling reports, against the exact
normaliser where the potential has one."""

from __future__ import annotations

import argparse
import json
import math

from runs.jsonsafe import json_safe
from runs.spec import SpecError, param_error
from runs.store import Store
from studies.arguments import pairs

# The exact normaliser is over the whole plane, nested sampling's over the plotted box: the box
# leaves out at most ~0.02 of log Z (the funnels' tails), against errors of ~0.1 at 400 points.
AGREES = 3.0  # within this many reported errors: the estimate is consistent with the truth


def cmd_evidence(args: argparse.Namespace, store: Store) -> int:
    import torch

    import landscapes
    from landscapes import ParamError
    from samplers import nested

    target_params = pairs(args.target_param, "--target-param")
    try:
        target = landscapes.make(args.target, dtype="float64", **target_params)
    except ParamError as exc:
        raise SpecError(*param_error(exc, "target", args.target)) from None
    try:
        settings = nested.SPEC.validate(pairs(args.param, "--param"))
    except ParamError as exc:
        raise SpecError(*param_error(exc, "nested", "nested")) from None
    try:
        result = nested.nested_sample(target, torch.Generator().manual_seed(args.seed), **settings)
    except ValueError:  # no box prior: a network, or a potential plotted in 2 of its d
        raise SpecError(
            "target",
            f"must be a potential with a box over all its coordinates (nested sampling's "
            f"uniform prior: its plotted bounds); {args.target!r} has none",
        ) from None
    facts = _facts(args.target, target.log_z, result)
    if args.json:
        print(json.dumps(json_safe(facts)))
        return 0
    print(
        f"{args.target}: log Z = {facts['log_z']:.4f} +- {facts['log_z_error']:.4f} "
        f"({facts['iterations']} iterations, {facts['evaluations']} energy evaluations, "
        f"stopped: {facts['stopped']})"
    )
    if facts["exact_log_z"] is not None:
        print(
            f"exact log Z = {facts['exact_log_z']:.4f} (the whole plane): "
            f"{facts['errors_off']:.2f} errors off, {facts['verdict']}"
        )
    return 0


def _facts(name: str, exact: float | None, result) -> dict:
    off = None if exact is None else (result.log_z - exact) / result.log_z_error
    verdict = None
    if off is not None:
        verdict = "consistent" if abs(off) <= AGREES else f"more than {AGREES:g} errors off"
    return {
        "target": name,
        "log_z": result.log_z,
        "log_z_error": result.log_z_error,
        "exact_log_z": exact,
        "errors_off": off if off is None or math.isfinite(off) else None,
        "verdict": verdict,
        "information": result.information,
        "iterations": result.iterations,
        "evaluations": result.evaluations,
        "ess": result.ess,
        "stopped": result.stopped,
        "bounds": [list(b) for b in result.bounds],
    }


def add_parser(sub) -> None:
    from samplers.nested import PARAMS

    names = ", ".join(p.name for p in PARAMS)
    parser = sub.add_parser(
        "evidence",
        help="nested sampling with RadFriends: a potential's log Z against its exact normaliser",
    )
    parser.add_argument("--target", required=True, help="a potential (its plotted box: the prior)")
    parser.add_argument("--target-param", action="append", default=[], metavar="K=V")
    parser.add_argument("--param", action="append", default=[], metavar="K=V", help=names)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(handler=cmd_evidence)
