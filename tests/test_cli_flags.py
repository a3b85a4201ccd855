"""The run flags are generated from RunSpec's fields and the registries (``cli.flags``): every
field a user sets has a flag in ``run --help``, its choices are the field's Literal, and a field
added to RunSpec becomes a flag, read back into the spec, without an edit to the CLI."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import typing
from typing import Literal

import pytest
import torch
from clitest import jobs
from pydantic import BaseModel, Field
from test_cli_golden import help_entries

import landscapes
import samplers
from cli import flags
from cli.main import main
from runs.spec import RunSpec, parse_spec
from runs.store import Store


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
    assert no_flag == ["record"]  # a spec file's: nested options
    for name, _, meta in _fields(RunSpec):
        flag = "--" + meta.get("flag", name).replace("_", "-")
        if flags._kind(RunSpec.model_fields.get(name, Field()).annotation) is flags.Component:
            assert flags._params_flag(name, meta) in options, name
        elif name in ("vi", "nested"):  # a nested model: its K=V flag
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


# -- --start: where every chain starts, d numbers (issue 60, item 14) -------------------------

BANANA = ["--target", "banana", "--sampler", "mala", "--param", "step_size=0.01", "--json"]


def test_start_is_a_flag_of_d_numbers_and_every_chain_starts_there(tmp_path):
    out = jobs(tmp_path, "run", *BANANA, "--start", "-1", "2.5", "--steps", "3", "--chains", "2")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    target = landscapes.make("banana", dtype="float32")
    here = float(target.loss(torch.tensor([[-1.0, 2.5]]))[0])
    assert summary["loss"]["init"] == pytest.approx(here, rel=1e-6)
    assert Store(tmp_path).get(summary["run_id"]).spec["start"] == [-1.0, 2.5]


def test_a_start_may_begin_with_a_negative_number_in_exponent_notation(tmp_path):
    out = jobs(tmp_path, "run", *BANANA, "--start", "-1e-3", "2", "--steps", "3", "--chains", "2")
    assert out.returncode == 0, out.stderr
    assert Store(tmp_path).list()[0].spec["start"] == [-1e-3, 2.0]


@pytest.mark.parametrize(
    ("values", "shown"),
    [
        (["1", "2", "3"], "got [1.0, 2.0, 3.0]"),  # banana's d is 2
        (["1"], "got [1.0]"),
        (["nan", "0"], "got [nan, 0.0]"),
        (["inf", "0"], "got [inf, 0.0]"),
        (["-inf", "0"], "got [-inf, 0.0]"),
    ],
)
def test_a_start_of_the_wrong_length_or_not_finite_is_refused_in_one_line(tmp_path, values, shown):
    out = jobs(tmp_path, "run", *BANANA, "--start", *values, "--steps", "3")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [
        f"error: start: must be 2 finite numbers (the target's d), {shown}"
    ]
    assert Store(tmp_path).list() == []


def test_a_start_that_is_not_a_number_is_refused_by_the_flag(tmp_path):
    out = jobs(tmp_path, "run", *BANANA, "--start", "0", "one", "--steps", "3")
    assert out.returncode == 2
    assert out.stderr.splitlines()[-1].endswith("argument --start: invalid float value: 'one'")


def test_a_spec_files_start_too_long_or_not_numbers_is_refused_naming_start(tmp_path):
    path = tmp_path / "spec.json"
    allowed = "must be a list of the target's d numbers (at most 2000), got "
    for start, field in (([0.0] * 2001, "start"), (["one", 0.0], "start.0"), ("0 0", "start")):
        spec = {"target": {"name": "banana"}, "sampler": {"name": "mala"}, "start": start}
        path.write_text(json.dumps(spec))
        out = jobs(tmp_path, "run", str(path))
        assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
        assert out.stderr.startswith(f"error: {field}: {allowed}"), out.stderr
