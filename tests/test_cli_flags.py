"""The run flags are generated from RunSpec's fields and the registries (``cli.flags``): every
field a user sets has a flag in ``run --help``, its choices are the field's Literal, and a field
added to RunSpec becomes a flag, read back into the spec, without an edit to the CLI."""

from __future__ import annotations

import argparse
import contextlib
import io
import typing
from typing import Literal

from pydantic import BaseModel, Field
from test_cli_golden import help_entries

import landscapes
import samplers
from cli import flags
from cli.main import main
from runs.spec import RunSpec, parse_spec


def _help(argv: list[str]) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main([*argv, "--help"])
    return help_entries(out.getvalue())


def _fields(model: type[BaseModel]):
    """(name, info, cli metadata) of every field with a flag, a grouped model's fields too."""
    for name, info in model.model_fields.items():
        meta = flags._cli(info)
        if meta is None:
            continue
        kind = flags._kind(info.annotation)
        if isinstance(kind, type) and issubclass(kind, BaseModel) and "group" in meta:
            yield from _fields(kind)
        else:
            yield name, info, meta


def test_every_user_settable_field_of_runspec_has_a_flag_in_run_help(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    options = _help(["run"])
    no_flag = [n for n, i in RunSpec.model_fields.items() if flags._cli(i) is None]
    assert no_flag == ["record", "start"]  # a spec file's: nested options, d numbers
    for name, _, meta in _fields(RunSpec):
        flag = "--" + meta.get("flag", name).replace("_", "-")
        if flags._kind(RunSpec.model_fields.get(name, Field()).annotation) is flags.Component:
            assert flags._params_flag(name, meta) in options, name
        elif name == "vi":
            flag = flags._params_flag(name, meta)
        assert flag in options, f"RunSpec.{name}: no {flag} in run --help"
        if "help" in meta:
            squeeze = lambda text: "".join(text.split())  # noqa: E731 (argparse wraps at "-")
            assert squeeze(options[flag]).endswith(squeeze(meta["help"])), name


def test_choices_and_types_come_from_the_fields_and_the_registries():
    parser = argparse.ArgumentParser()
    flags.add_spec_flags(parser)
    actions = {a.dest: a for a in parser._actions}
    for name, info, meta in _fields(RunSpec):
        kind = flags._kind(info.annotation)
        if typing.get_origin(kind) is Literal:
            assert tuple(actions[flags._dest(name, meta)].choices) == typing.get_args(kind), name
        elif kind in (int, float):
            assert actions[flags._dest(name, meta)].type is kind, name
    assert actions["target"].help == f"one of {sorted(landscapes.REGISTRY)}"
    assert actions["sampler"].help == f"one of {sorted(samplers.REGISTRY)}"


def test_a_field_added_to_runspec_is_a_flag_read_back_into_the_spec():
    class Wider(RunSpec):
        temperature_scale: float = Field(1.0, json_schema_extra={"cli": {"help": "T's scale"}})
        mode: Literal["fast", "exact"] = "exact"

    parser = argparse.ArgumentParser()
    flags.add_spec_flags(parser, model=Wider)
    text = parser.format_help()
    assert "--temperature-scale TEMPERATURE_SCALE" in text and "T's scale" in text
    assert "--mode {fast,exact}" in text
    argv = ["--target", "banana", "--sampler", "mala", "--temperature-scale", "0.5"]
    args = parser.parse_args([*argv, "--mode", "fast", "--train-lr", "0.01", "--observe", "llc"])
    data = flags.spec_from_args(args, model=Wider)
    assert data["temperature_scale"] == 0.5 and data["mode"] == "fast"
    assert data["llc"] == {"train_lr": 0.01} and data["observables"] == ["llc"]
    assert data["target"] == {"name": "banana", "params": {}}


def test_spec_from_args_builds_what_the_flags_say():
    parser = argparse.ArgumentParser()
    flags.add_spec_flags(parser)
    args = parser.parse_args(
        [
            *("--target", "dln", "--target-param", "n=200", "--loss-convention", "mean"),
            *("--sampler", "sgld", "--param", "step_size=1e-7", "--chains", "3"),
            *("--burn-in", "5", "--compile", "never", "--w0", "truth", "--observe", "llc"),
        ]
    )
    spec = parse_spec(flags.spec_from_args(args))
    assert spec.target.params["n"] == 200 and spec.target.params["loss_convention"] == "mean"
    assert spec.sampler.params["step_size"] == 1e-7
    assert (spec.chains, spec.burn_in, spec.compile) == (3, 5, "never")
    assert spec.llc.w0 == "truth" and spec.observables == ["llc"]


def test_every_study_of_the_registry_is_a_sweep_subcommand(monkeypatch):
    from studies import registry

    monkeypatch.setenv("COLUMNS", "100")
    usage = _help(["sweep"])["usage"]
    for study in registry.STUDIES:
        for name in ("KIND", "HELP", "SPEC_FLAGS"):
            assert hasattr(study, name), (study.__name__, name)
        for name in ("add_arguments", "specs_from_args", "results", "print_text"):
            assert callable(getattr(study, name)), (study.__name__, name)
        assert study.KIND in usage
