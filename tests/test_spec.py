"""RunSpec: one clear error per bad input, JSON round trips, memory estimates and budgets."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

import landscapes
import samplers
from runs.budget import Estimate, check_budget, estimate
from runs.build import build
from runs.spec import RunSpec, SpecError, parse_spec

BASE = {"target": {"name": "banana"}, "sampler": {"name": "mala"}}


def spec_with(**changes) -> dict:
    return {**json.loads(json.dumps(BASE)), **changes}


# (input, field, fragments the message must contain: the value given and what is allowed)
BAD = [
    (spec_with(target={"name": "bananna"}), "target.name", ["'bananna'", "'banana'", "'funnel'"]),
    (spec_with(sampler={"name": "malla"}), "sampler.name", ["'malla'", "'mala'", "'hmc'"]),
    (
        spec_with(target={"name": "banana", "params": {"c": 1}}),
        "target.params.c",
        ["unknown parameter", "['a', 'b', 'gradient_noise']"],
    ),
    (
        spec_with(sampler={"name": "mala", "params": {"leapfrog_steps": 3}}),
        "sampler.params.leapfrog_steps",
        [
            "unknown parameter",
            "['adapt', 'localization', 'metric', 'nbeta', 'step_size', 'target_accept', 'warmup']",
        ],
    ),
    (
        spec_with(sampler={"name": "mala", "params": {"step_size": 50.0}}),
        "sampler.params.step_size",
        ["a number in [1e-12, 10]", "got 50.0"],
    ),
    (
        spec_with(target={"name": "banana", "params": {"a": "wide"}}),
        "target.params.a",
        ["a number in [0.1, 10]", "got 'wide'"],
    ),
    (spec_with(chains="many"), "chains", ["an integer in [1, 1000000]", "got 'many'"]),
    (spec_with(chains=0), "chains", ["an integer in [1, 1000000]", "got 0"]),
    (spec_with(chains=True), "chains", ["an integer in [1, 1000000]", "got True"]),
    (spec_with(steps=-5), "steps", ["an integer in [1, 1000000000]", "got -5"]),
    (spec_with(steps=100, burn_in=100), "burn_in", ["[0, 99]", "got 100"]),
    (spec_with(thin=0), "thin", ["[1, 1000]", "got 0"]),
    (spec_with(steps=10, thin=11), "thin", ["[1, 10]", "got 11"]),
    (spec_with(steps=10, flush_every=20), "flush_every", ["[0, 10]", "got 20"]),
    (spec_with(seed=-1), "seed", ["[0, 2147483647]", "got -1"]),
    (
        spec_with(llc={"train_batch_size": 10**19}),  # was accepted (issue 60 item 5)
        "llc.train_batch_size",
        ["an integer in [1, 10000000]", "got 10000000000000000000"],
    ),
    (spec_with(device="gpu"), "device", ["'auto', 'cpu', 'cuda' or 'cuda:<i>'", "got 'gpu'"]),
    (spec_with(device="cuda:x"), "device", ["'cuda:<i>'", "got 'cuda:x'"]),
    (spec_with(dtype="float16"), "dtype", ["['float32', 'float64']", "got 'float16'"]),
    (
        spec_with(compile="sometimes"),
        "compile",
        ["one of ['auto', 'always', 'never']", "got 'sometimes'"],
    ),
    (
        spec_with(observables=["lcc"]),
        "observables",
        ["names from ['ess', 'llc', 'predictive', 'thermo']", "got 'lcc'"],
    ),
    (spec_with(colour="red"), "colour", ["unknown field", "'chains'", "'flush_every'"]),
    (
        spec_with(record={"positions": "sometimes"}),
        "record.positions",
        ["['auto', 'all', 'projection', 'none']", "got 'sometimes'"],
    ),
    (spec_with(record={"projection_dim": 0}), "record.projection_dim", ["[1, 64]", "got 0"]),
    (spec_with(record={"snapshot": 5}), "record.snapshot", ["unknown field", "'snapshots'"]),
    ({"sampler": {"name": "mala"}}, "target", ["required"]),
    ("{not json", "spec", ["invalid JSON"]),
]


@pytest.mark.parametrize(("data", "field", "fragments"), BAD, ids=[b[1] for b in BAD])
def test_bad_input_gives_one_clear_message(data, field, fragments):
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    error = info.value
    assert error.field == field
    assert str(error) == f"{field}: {error.message}"
    assert "\n" not in str(error) and "pydantic" not in str(error)  # no pydantic report leaks
    for fragment in fragments:
        assert fragment in error.message


def test_same_errors_from_json_strings():
    with pytest.raises(SpecError) as info:
        parse_spec(json.dumps(spec_with(chains=0)))
    assert info.value.field == "chains"


@pytest.mark.parametrize(
    "data",
    [
        {
            "target": {"name": "banana", "params": {"b": 1}},
            "sampler": {"name": "mala", "params": {"step_size": 0.1}},
            "chains": 16,
            "record": {"positions": "all"},
        },
        {
            "target": {"name": "mlp", "params": {"hidden_sizes": [16, 8], "n": 500}},
            "sampler": {"name": "sgld", "params": {"batch_size": 32}},
            "dtype": "float64",
            "thin": 10,
        },
    ],
    ids=["potential", "network"],
)
def test_json_round_trip_and_defaults_filled(data):
    spec = parse_spec(data)
    assert RunSpec.model_validate_json(spec.model_dump_json()) == spec
    assert parse_spec(spec.model_dump_json()) == spec
    assert parse_spec(spec.model_dump()) == spec
    for role, registry in (("target", landscapes.REGISTRY), ("sampler", samplers.REGISTRY)):
        part = getattr(spec, role)
        expected = {**registry[part.name].defaults(), **data[role]["params"]}
        assert part.params.keys() == expected.keys()
        for key, value in expected.items():
            value = tuple(value) if isinstance(value, list) else value
            assert part.params[key] == value, key


def test_network_params_are_coerced():
    spec = parse_spec(spec_with(target={"name": "mlp", "params": {"hidden_sizes": [64, 32]}}))
    assert spec.target.params["hidden_sizes"] == (64, 32)
    assert spec.sampler.params["step_size"] == 1e-3  # the registry default


def test_estimate_dim_matches_independent_count():
    assert estimate(parse_spec(BASE)).dim == 2
    mlp = parse_spec(spec_with(target={"name": "mlp", "params": {"hidden_sizes": [32]}}))
    est = estimate(mlp)
    assert est.dim == 64 * 32 + 32 + 32 * 10 + 10 == 2410
    assert (est.positions, est.recorded_dims) == ("projection", 8)  # auto: d > 64
    assert est.records == 1000


def test_estimate_counts_records_and_positions():
    est = estimate(parse_spec(spec_with(steps=1001, thin=10, chains=3)))
    assert isinstance(est, Estimate)
    assert (est.records, est.recorded_dims, est.positions) == (101, 2, "all")
    assert est.store_bytes == 101 * 3 * (4 + 1 + 1 + 4 * 2)  # no snapshots when d <= 64
    none = estimate(parse_spec(spec_with(record={"positions": "none"})))
    assert none.recorded_dims == 0


def test_over_budget_names_memory_in_human_units():
    huge = parse_spec(
        spec_with(target={"name": "gaussian", "params": {"dim": 500}}, chains=1_000_000)
    )
    with pytest.raises(SpecError) as info:
        check_budget(huge, budget_bytes=2**30)
    assert info.value.field == "memory"
    assert "GiB" in info.value.message and "1.0 GiB" in info.value.message
    with pytest.raises(SpecError, match="memory"):
        check_budget(huge)  # default budgets: 16 GB of chain state alone


def test_budget_from_environment(monkeypatch):
    monkeypatch.setenv("BASIN_MEMORY_BUDGET", str(1000))
    with pytest.raises(SpecError) as info:
        check_budget(parse_spec(BASE))
    assert "KiB" in info.value.message or "MiB" in info.value.message


def test_a_run_whose_records_would_not_fit_on_the_disk_is_refused(tmp_path, monkeypatch):
    # 101 records x 3 chains x 14 bytes (test above): 4,242 bytes of store
    spec = parse_spec(spec_with(steps=1001, thin=10, chains=3))
    home = tmp_path / "not-yet" / "home"  # not created yet: its nearest ancestor's disk counts
    monkeypatch.setenv("BASIN_HOME", str(home))
    seen = []

    def disk_usage(path):
        seen.append(path)
        return shutil._ntuple_diskusage(10**9, 10**9 - 4000, 4000)

    monkeypatch.setattr(shutil, "disk_usage", disk_usage)
    with pytest.raises(SpecError) as info:
        check_budget(spec, budget_bytes=2**30)
    assert info.value.field == "memory" and seen == [tmp_path]
    assert "4.1 KiB of store" in info.value.message and "3.9 KiB free" in info.value.message
    assert str(home) in info.value.message
    monkeypatch.setattr(
        shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9 - 5000, 5000)
    )
    assert check_budget(spec, budget_bytes=2**30).store_bytes == 4242


def test_small_spec_passes_the_budget():
    est = check_budget(parse_spec(BASE))
    assert 0 < est.device_bytes < 2**20 and 0 < est.store_bytes < 2**20


def test_builder_refusals_become_spec_errors():
    spec = parse_spec(
        spec_with(target={"name": "dln", "params": {"widths": [3, 2], "rank": 5, "n": 10}})
    )
    with pytest.raises(SpecError) as info:
        estimate(spec)
    assert info.value.field == "target.params.rank" and "got 5" in info.value.message


def test_build_makes_target_and_kernel():
    target, kernel, device = build(parse_spec(spec_with(device="cpu", dtype="float64")))
    assert target.dim == 2 and target.dtype == torch.float64
    assert device == torch.device("cpu") and target.device == device
    assert kernel.name == "mala"
