"""``python -m jobs evidence``: nested sampling with RadFriends (``samplers.nested``) on a
potential, in this process: its log Z with the error nested sampling reports, against the exact
normaliser where the potential has one. A stored, resumable run of the same is ``python -m jobs
run --kind nested`` (``runs.nested``); both print the same facts (``runs.nested.facts``)."""

from __future__ import annotations

import argparse
import json

from runs.jsonsafe import json_safe
from runs.nested import AGREES, exact_log_z, facts
from runs.spec import SpecError, param_error
from runs.store import Store
from studies.arguments import pairs


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
    found = facts(args.target, exact_log_z(target, settings["nbeta"]), result)
    off = found["errors_off"]
    found["verdict"] = None  # consistent with the exact normaliser, or not
    if off is not None:
        found["verdict"] = (
            "consistent" if abs(off) <= AGREES else f"more than {AGREES:g} errors off"
        )
    if args.json:
        print(json.dumps(json_safe(found)))
        return 0
    print(
        f"{args.target}: log Z = {found['log_z']:.4f} +- {found['log_z_error']:.4f} "
        f"({found['iterations']} iterations, {found['evaluations']} energy evaluations, "
        f"stopped: {found['stopped']})"
    )
    if found["exact_log_z"] is not None:
        print(
            f"exact log Z = {found['exact_log_z']:.4f} (the whole plane): "
            f"{found['errors_off']:.2f} errors off, {found['verdict']}"
        )
    return 0


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
