"""What the studies' command-line arguments share: value parsers (comma-separated numbers and
names, K=V pairs, a slot count) and the flags every sweep takes (how and where its runs go).

Each study adds its own arguments (``add_arguments``) and reads them (``specs_from_args``,
with ``keywords``: its flags passed to its ``specs`` by name); ``cli.sweeps`` builds the
``sweep`` command from them.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
from collections.abc import Callable

from landscapes.base import shown
from runs.spec import SpecError

SUBMIT_HELP = "queue the runs, print the sweep id and return"


def value(text: str):
    """A flag value as JSON when it parses (numbers, lists, true/false), else the string."""
    try:
        return json.loads(text)
    except ValueError:  # not JSON, or an integer past Python's 4300-digit conversion limit
        return text


def pairs(items: list[str], flag: str) -> dict:
    """``K=V`` items as a dict (values as ``value`` reads them); a SpecError naming ``flag``."""
    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise SpecError(flag, f"must be key=value, got {item!r}")
        out[key.strip()] = value(text.strip())
    return out


def floats(text: str, flag: str) -> tuple[float, ...]:
    """Comma-separated numbers, at least one; a SpecError naming ``flag``."""
    try:
        values = tuple(float(v) for v in text.replace(" ", "").split(",") if v)
    except ValueError:
        values = ()
    if not values:
        raise SpecError(flag, f"must be one or more comma-separated numbers, got {shown(text)}")
    return values


def integers(text: str, flag: str, low: int = 1) -> tuple[int, ...]:
    """Comma-separated whole numbers >= ``low`` (widths, sizes): 2.5 is refused, never cut to 2."""
    values = floats(text, flag)
    parts = [v for v in text.replace(" ", "").split(",") if v]
    for part, v in zip(parts, values, strict=True):
        if not (math.isfinite(v) and v == int(v) and v >= low):
            given = "" if part == text else f" in {shown(text)}"
            raise SpecError(
                flag, f"must be comma-separated integers >= {low}, got {shown(part)}{given}"
            )
    return tuple(int(v) for v in values)


def names(text: str) -> tuple[str, ...]:
    """Comma-separated names, blanks dropped."""
    return tuple(s for s in text.replace(" ", "").split(",") if s)


def with_llc(spec: dict) -> dict:
    """A base run's spec (``cli.flags``) with "llc" among its observables, after those given:
    an LLC sweep's runs keep the others (and the RunSpec checks them: 'predictive' needs a
    test set), where they were once dropped without a word."""
    given = spec.get("observables") or []
    if not isinstance(given, list):  # the RunSpec names what is wrong with it
        return spec
    return {**spec, "observables": [*given, *(["llc"] if "llc" not in given else [])]}


def keywords(args: argparse.Namespace, function: Callable, **converted) -> dict:
    """``function``'s keyword arguments from a study's flags: each parameter a flag of the same
    name (its dest) sets, and ``converted`` for those read otherwise (lists, negated flags)."""
    named = inspect.signature(function).parameters
    return {**{name: getattr(args, name) for name in named if hasattr(args, name)}, **converted}


def max_slots() -> int:
    """The most ``--slots``: 4 per core (at least 8). Each slot is a worker process with its own
    interpreter and torch (~250 MB before its run), and past a few per core they only share the
    same cores: 10^8 slots would start a process per queued run."""
    from runs.worker import cores

    return max(8, 4 * cores())


def slots(text: str) -> int:
    """``--slots``: runs at once, at least 1 and at most ``max_slots()``."""
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(
            f"must be an integer >= 1 (at least 1 run), got {shown(text)}"
        )
    if count > (most := max_slots()):
        raise argparse.ArgumentTypeError(
            f"must be an integer in [1, {most}] (4 per core, at least 8: each slot is a worker "
            f"process with its own interpreter and torch, ~250 MB), got {shown(text)}"
        )
    return count


def add_pairs(parser: argparse.ArgumentParser, flag: str, help: str | None = None) -> None:
    """A repeatable ``K=V`` flag (``--target-param a=2 --target-param b=1``), read by ``pairs``."""
    parser.add_argument(flag, action="append", default=[], metavar="K=V", help=help)


def add_step_sizes(parser: argparse.ArgumentParser) -> None:
    """--step-sizes, required: a grid of step sizes (the dln and calibrate sweeps)."""
    parser.add_argument(
        "--step-sizes",
        dest="step_sizes",
        required=True,
        help="comma-separated step sizes (a log grid)",
    )


def add_backend(parser: argparse.ArgumentParser) -> None:
    """--backend and --address: the local worker pool or a Ray cluster."""
    parser.add_argument(
        "--backend",
        choices=("local", "ray"),
        default="local",
        help="where the runs execute: the local worker pool (default) or a Ray cluster",
    )
    parser.add_argument(
        "--address",
        help="the Ray cluster: auto (this machine's, or RAY_ADDRESS; default), host:port or "
        "ray://host:port",
    )


def add_run(parser: argparse.ArgumentParser, submit_help: str | None = None) -> None:
    """How a sweep's runs go: --slots, --submit-only, --backend, --address."""
    parser.add_argument("--slots", type=slots, help="runs at once (default: the worker default)")
    parser.add_argument("--submit-only", dest="submit_only", action="store_true", help=submit_help)
    add_backend(parser)


def add_common(parser: argparse.ArgumentParser) -> None:
    """What the order, reprior and vi sweeps take alike: seed, device, dtype and how to run."""
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float64")
    parser.add_argument("--json", action="store_true")
    add_run(parser)
