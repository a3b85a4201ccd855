"""The run flags, generated from RunSpec's fields (``runs.spec``) and the registries.

Each field of RunSpec becomes a flag named after it (``--burn-in`` for ``burn_in``): a Literal
gives its choices, int and float their type, and the field's ``json_schema_extra["cli"]`` its
help and, where it differs, its flag name and metavar; ``"cli": None`` marks a field only a spec
file sets. A list of names is a repeatable flag (``--observe llc --observe ess``), a list of
numbers one flag followed by them all (``--start -1 2.5``). A registry component (target,
sampler) is ``--NAME`` (one of the registry's names)
and ``--NAME-param K=V``; a nested model is either a K=V flag (vi) or, with a "group", a flag per
field in that group (llc). ``spec_from_args`` reads the same fields back, so a field added to
RunSpec is a flag without an edit here.
"""

from __future__ import annotations

import argparse
import re
import types
from typing import Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

import landscapes
import samplers
from runs.spec import Component, RunSpec, SpecError
from runs.spec_file import read_spec_file
from studies.arguments import pairs

REGISTRIES = {"target": landscapes.REGISTRY, "sampler": samplers.REGISTRY}
NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$|^-inf(inity)?$", re.IGNORECASE)
SPEC_HELP = "a RunSpec as a JSON file (flags override it)"
JSON_HELP = "print a JSON summary on stdout"
# Target parameters with a flag of their own (``--loss-convention sum``): name -> help; the
# choices are the registry's.
TARGET_PARAM_FLAGS = {
    "loss_convention": "a regression target's loss a point: sum over outputs (the benchmark's, "
    "default) or mean (F.mse_loss: devinterp's step sizes and nbeta give its posterior)",
}


def _cli(info: FieldInfo) -> dict | None:
    """A field's CLI metadata (None: no flag), {} where it declares none."""
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    return extra.get("cli", {})


def _kind(annotation):
    """``X | None`` -> X."""
    args = [a for a in get_args(annotation) if a is not type(None)]
    union = get_origin(annotation) in (Union, types.UnionType)
    return args[0] if union and len(args) == 1 else annotation


def _flag(name: str, meta: dict) -> str:
    return "--" + meta.get("flag", name).replace("_", "-")


def _dest(name: str, meta: dict) -> str:
    return meta.get("flag", name).replace("-", "_")


def _params_flag(name: str, meta: dict) -> str:
    return "--" + meta.get("params_flag", f"{name}-param")


def _param_choices(name: str) -> tuple[str, ...]:
    """The choices of a target parameter, from the first registry spec that takes it."""
    for spec in landscapes.REGISTRY.values():
        for param in spec.params:
            if param.name == name:
                return tuple(param.choices)
    raise KeyError(f"no target takes a parameter {name!r}")


def _add_scalar(parser, name: str, info: FieldInfo, meta: dict) -> None:
    """A flag for a Literal (its choices), int, float or str field; None when not given."""
    kind = _kind(info.annotation)
    options: dict = {"dest": _dest(name, meta), "help": meta.get("help")}
    if get_origin(kind) is Literal:
        options["choices"] = get_args(kind)
    elif kind in (int, float):
        options["type"] = kind
    elif kind is not str:
        raise TypeError(f"RunSpec.{name}: no flag for {kind}; give it json_schema_extra cli")
    if "metavar" in meta:
        options["metavar"] = meta["metavar"]
    parser.add_argument(_flag(name, meta), **options)


def _is_model(kind) -> bool:
    return isinstance(kind, type) and issubclass(kind, BaseModel)


def _add_field(parser, name: str, info: FieldInfo) -> None:
    """The flag(s) of one field: a component's two, a group's one per field, or one."""
    meta = _cli(info)
    if meta is None:
        return
    kind = _kind(info.annotation)
    if kind is Component:
        registry = sorted(REGISTRIES[name])
        parser.add_argument(f"--{name}", help=f"one of {registry}")
        params = _params_flag(name, meta)
        parser.add_argument(params, dest=params[2:].replace("-", "_"), **_repeated("K=V"))
        for param, text in TARGET_PARAM_FLAGS.items() if name == "target" else ():
            flag = "--" + param.replace("_", "-")
            parser.add_argument(flag, dest=param, choices=_param_choices(param), help=text)
    elif _is_model(kind) and "group" in meta:
        group = parser.add_argument_group(meta["group"])
        for field, inner in kind.model_fields.items():
            if _cli(inner) is not None:
                _add_scalar(group, field, inner, _cli(inner))
    elif _is_model(kind):
        flag = _params_flag(name, meta)
        repeated = _repeated(meta.get("metavar", "K=V"))
        parser.add_argument(
            flag, dest=flag[2:].replace("-", "_"), help=meta.get("help"), **repeated
        )
    elif get_origin(kind) is list and get_args(kind)[0] in (int, float):
        number = get_args(kind)[0]  # a point: all its numbers after one flag
        parser.add_argument(
            _flag(name, meta),
            dest=_dest(name, meta),
            nargs="+",
            type=number,
            metavar=meta.get("metavar", "X"),
            help=meta.get("help"),
        )
    elif get_origin(kind) is list:
        repeated = _repeated(meta.get("metavar", "NAME"))
        parser.add_argument(
            _flag(name, meta), dest=_dest(name, meta), help=meta.get("help"), **repeated
        )
    else:
        _add_scalar(parser, name, info, meta)


def _repeated(metavar: str) -> dict:
    return {"action": "append", "default": [], "metavar": metavar}


def add_spec_flags(parser: argparse.ArgumentParser, model: type[BaseModel] = RunSpec) -> None:
    """The optional spec file, a flag per field of ``model`` (RunSpec), and --json."""
    # argparse takes "-1e-3" and "-inf" for flags (its pattern knows only -1 and -.5); a list of
    # numbers (--start -1e-3 2) reads them as numbers. No flag of these commands looks like one.
    parser._negative_number_matcher = NEGATIVE_NUMBER
    parser.add_argument("spec", nargs="?", help=SPEC_HELP)
    for name, info in model.model_fields.items():
        _add_field(parser, name, info)
    parser.add_argument("--json", action="store_true", help=JSON_HELP)


def _what(value) -> str:
    return {list: "a list", str: "a string", dict: "an object"}.get(type(value), repr(value))


def _component(data: dict, args, name: str, meta: dict) -> None:
    """--NAME replaces the spec file's component, --NAME-param sets single parameters of
    whichever is chosen (the target's own flags, and the checkpoint sweep's --factory, too)."""
    flag = _params_flag(name, meta)
    items = list(getattr(args, flag[2:].replace("-", "_")))
    chosen = getattr(args, name)
    if name == "target":
        for param in TARGET_PARAM_FLAGS:
            if getattr(args, param, None):  # devinterp's F.mse_loss: loss_convention "mean"
                items.append(f"{param}={getattr(args, param)}")
        if getattr(args, "factory", None):  # the checkpoint sweep's model
            data["target"] = {"name": "model", "params": {}}
            items.append(f"factory={args.factory}")
    if chosen:
        data[name] = {"name": chosen, "params": {}}
    if items:
        part = data.get(name)
        if not (isinstance(part, dict) and isinstance(part.get("params", {}), dict)):
            raise SpecError(name, f"{flag} needs a {name}: give --{name} NAME")
        part["params"] = {**part.get("params", {}), **pairs(items, flag)}


def _nested(data: dict, args, name: str, info: FieldInfo, meta: dict) -> None:
    """A nested model's flags over the spec file's object: its group's, or its K=V items."""
    kind = _kind(info.annotation)
    if "group" in meta:
        given = {
            field: getattr(args, _dest(field, _cli(inner)))
            for field, inner in kind.model_fields.items()
            if _cli(inner) is not None and getattr(args, _dest(field, _cli(inner))) is not None
        }
        if given:
            part = data.get(name, {})
            if not isinstance(part, dict):
                raise SpecError(name, f"must be a JSON object, got {_what(part)}")
            data[name] = {**part, **given}
        return
    flag = _params_flag(name, meta)
    items = getattr(args, flag[2:].replace("-", "_"))
    if items:
        part = data.get(name) or {}
        if not isinstance(part, dict):
            raise SpecError(name, f"must be a JSON object, got {_what(part)}")
        data[name] = {**part, **pairs(items, flag)}


def spec_from_args(args: argparse.Namespace, model: type[BaseModel] = RunSpec) -> dict:
    """The spec dict from a spec file and/or flags (flags win: --target and --sampler replace
    the file's, --target-param and --param set single parameters of whichever is chosen)."""
    data: dict = {}
    if args.spec:
        data = read_spec_file(args.spec)  # size- and depth-capped
        if not isinstance(data, dict):
            raise SpecError("spec", f"{args.spec} must hold a JSON object, not {_what(data)}")
    for name, info in model.model_fields.items():
        meta = _cli(info)
        if meta is None:
            continue
        kind = _kind(info.annotation)
        if kind is Component:
            _component(data, args, name, meta)
        elif _is_model(kind):
            _nested(data, args, name, info, meta)
        elif get_origin(kind) is list:
            if getattr(args, _dest(name, meta)):
                data[name] = getattr(args, _dest(name, meta))
        elif getattr(args, _dest(name, meta)) is not None:
            data[name] = getattr(args, _dest(name, meta))
    return data
