"""``python -m jobs export ID --format tati``: TATi's run, trajectory and averages tables.

Every value is checked against a quantity derived here from the store's records and the
target's formulas (the loss written out by hand, its gradient by torch.autograd), not from
``studies.tati``."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from clitest import jobs

import landscapes
from runs.loop import execute
from runs.spec import SpecError, parse_spec
from runs.store import Store

THIN, BURN = 2, 60

RUN_MOMENTUM = [
    "id", "step", "epoch", "accuracy", "loss", "time_per_nth_step", "total_energy",
    "kinetic_energy", "scaled_momentum", "scaled_gradient", "virial", "scaled_noise",
]  # fmt: skip
RUN_SGLD = [
    "id", "step", "epoch", "accuracy", "loss", "time_per_nth_step", "scaled_gradient", "virial",
    "scaled_noise",
]  # fmt: skip
AVERAGES_MOMENTUM = [
    "id", "step", "epoch", "loss", "ensemble_average_loss", "average_kinetic_energy",
    "average_virials", "average_inertia",
]  # fmt: skip
AVERAGES_MH = [
    "id", "step", "epoch", "loss", "ensemble_average_loss", "average_virials",
    "average_rejection_rate",
]  # fmt: skip


def _run(store: Store, target: dict, sampler: str, params: dict, **extra) -> str:
    spec = {
        "target": target,
        "sampler": {"name": sampler, "params": params},
        "chains": 3,
        "seed": 4,
        "compile": "never",
        "thin": THIN,
        "burn_in": BURN,
        "record": {"positions": "all"},
        **extra,
    }
    spec = parse_spec(spec)
    run_id = store.create(spec.model_dump(mode="json"))
    summary = execute(spec, store, run_id)
    store.finish(run_id, summary["status"], summary=summary)
    return run_id


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    home = tmp_path_factory.mktemp("tati")
    store = Store(home)
    slp = {"name": "slp", "params": {"dataset": "two-clusters"}}
    harmonic = {"name": "harmonic", "params": {"dim": 2, "a": 1.5}}
    ids = {
        "slp": _run(store, slp, "baoab", {"step_size": 0.01, "friction": 10.0}, steps=160),
        # temperature 0.5: TATi's beta = nbeta / T = 2
        "harmonic": _run(
            store, harmonic, "baoab", {"step_size": 0.1, "temperature": 0.5}, steps=200
        ),
        "mala": _run(store, harmonic, "mala", {"step_size": 0.8}, steps=200),
        "projection": _run(store, harmonic, "sgld", {"step_size": 0.01}, steps=20, burn_in=0,
                           record={"positions": "projection", "projection_dim": 1}),
        "none": _run(store, harmonic, "sgld", {"step_size": 0.01}, steps=20, burn_in=0,
                     record={"positions": "none"}),
    }  # fmt: skip
    return home, store, ids


def _export(store: Store, run_id: str, folder: Path, every_nth: int = 1) -> dict:
    from studies import tati

    paths = tati.export(store, run_id, folder, every_nth)
    assert [p.name for p in paths] == ["run.csv", "trajectory.csv", "averages.csv"]
    return {p.stem: _read(p) for p in paths}


def _read(path: Path) -> dict:
    """A CSV as its header and columns (floats; "nan" where unknown)."""
    header = path.read_text().splitlines()[0].split(",")
    rows = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    return {"header": header, **{name: rows[:, i] for i, name in enumerate(header)}}


def test_slp_tables_hold_tatis_columns_and_values(runs, tmp_path):
    _, store, ids = runs
    tables = _export(store, ids["slp"], tmp_path / "out")
    run, traj, avg = tables["run"], tables["trajectory"], tables["averages"]
    assert run["header"] == RUN_MOMENTUM and avg["header"] == AVERAGES_MOMENTUM
    # SLP 2 -> 1 on two clusters: 2 weights and 1 bias, TATi's N = 3
    assert traj["header"] == ["id", "step", "loss", "weight0", "weight1", "bias0"]

    data = store.read(ids["slp"])
    R, C = data["loss"].shape
    assert R == 160 // THIN and len(run["id"]) == len(traj["id"]) == len(avg["id"]) == R * C
    for table in (run, traj, avg):
        np.testing.assert_array_equal(table["id"], np.tile(np.arange(C), R))
        np.testing.assert_array_equal(table["step"], np.repeat(data["step"], C))
        # the stored float32 loss, round-tripped exactly
        np.testing.assert_array_equal(table["loss"].astype(np.float32), data["loss"].reshape(-1))
    np.testing.assert_array_equal(run["epoch"], run["step"])  # full batch: a pass per step

    w = data["position"].reshape(R * C, 3).astype(np.float64)
    np.testing.assert_allclose(traj["weight0"], w[:, 0], rtol=1e-7)
    np.testing.assert_allclose(traj["weight1"], w[:, 1], rtol=1e-7)
    np.testing.assert_allclose(traj["bias0"], w[:, 2], rtol=1e-7)

    # L = mean (x . W + b - y)^2 by hand, its gradient by autograd
    target = landscapes.make("slp", device="cpu", dtype="float64", dataset="two-clusters")
    x, y = target.x, target.y[:, 0]
    theta = torch.tensor(w, requires_grad=True)
    out = x @ theta[:, :2].T + theta[:, 2]  # [n, R C]
    loss = ((out - y[:, None]) ** 2).mean(0)
    (grad,) = torch.autograd.grad(loss.sum(), theta)
    dot = (theta * grad).sum(-1).detach().numpy()
    np.testing.assert_allclose(loss.detach().numpy(), run["loss"], rtol=1e-5)  # full batch
    np.testing.assert_allclose(run["virial"], np.abs(0.5 * dot), rtol=1e-6)
    accuracy = (torch.sign(out) == y[:, None]).double().mean(0).numpy()
    np.testing.assert_allclose(run["accuracy"], accuracy, rtol=1e-8)

    # TATi's units: beta = nbeta = n / log n; K_TATi = kinetic / nbeta; epsilon = sqrt(nbeta) h
    nbeta = 500 / math.log(500)
    kinetic = data["kinetic"].reshape(-1) / nbeta
    np.testing.assert_allclose(run["kinetic_energy"], kinetic, rtol=1e-6)
    np.testing.assert_allclose(run["total_energy"], run["loss"] + kinetic, rtol=1e-6)
    np.testing.assert_allclose(run["scaled_momentum"], np.sqrt(2 * kinetic), rtol=1e-6)
    gnorm = grad.norm(dim=-1).numpy()
    np.testing.assert_allclose(run["scaled_gradient"], math.sqrt(nbeta) * 0.01 * gnorm, rtol=1e-6)
    assert np.isnan(run["scaled_noise"]).all() and np.isnan(avg["average_inertia"]).all()
    summary = store.get(ids["slp"]).summary
    per_nth = summary["sampling_seconds"] / summary["steps"] * THIN
    np.testing.assert_allclose(run["time_per_nth_step"], per_nth, rtol=1e-6)

    # averages from the first record at step >= burn_in, NaN before it
    burn = int(np.searchsorted(data["step"], BURN))
    loss2, dot2 = data["loss"].astype(np.float64), dot.reshape(R, C)
    count = np.arange(1, R - burn + 1)[:, None]
    expect_k = np.cumsum(data["kinetic"][burn:] / nbeta, 0) / count
    expect_v = np.abs(0.5 * np.cumsum(dot2[burn:], 0) / count)
    weight = np.exp(-nbeta * loss2[burn:])
    expect_e = np.cumsum(loss2[burn:] * weight, 0) / np.cumsum(weight, 0)
    for name, expect in [
        ("average_kinetic_energy", expect_k),
        ("average_virials", expect_v),
        ("ensemble_average_loss", expect_e),
    ]:
        got = avg[name].reshape(R, C)
        assert np.isnan(got[:burn]).all(), name
        np.testing.assert_allclose(got[burn:], expect, rtol=1e-6, err_msg=name)


def test_harmonic_averages_and_the_temperature_mapping(runs, tmp_path):
    _, store, ids = runs
    tables = _export(store, ids["harmonic"], tmp_path / "h")
    run, traj, avg = tables["run"], tables["trajectory"], tables["averages"]
    assert traj["header"] == ["id", "step", "loss", "weight0", "weight1"]  # a potential: weights
    assert np.isnan(run["accuracy"]).all()
    data = store.read(ids["harmonic"])
    R, C = data["loss"].shape
    w = data["position"].astype(np.float64)  # [R, C, 2]
    loss = 1.5 * (w**2).sum(-1)  # L = a |theta|^2
    np.testing.assert_allclose(run["loss"], loss.reshape(-1), rtol=1e-5)
    dot = 2 * loss  # theta . grad L = 2 a |theta|^2
    np.testing.assert_allclose(run["virial"], 0.5 * dot.reshape(-1), rtol=1e-6)
    np.testing.assert_allclose(run["kinetic_energy"], data["kinetic"].reshape(-1), rtol=1e-6)
    beta = 1 / 0.5  # nbeta = 1 on a potential, temperature 0.5
    burn = int(np.searchsorted(data["step"], BURN))
    stored = data["loss"].astype(np.float64)[burn:]
    weight = np.exp(-beta * stored)
    expect = np.cumsum(stored * weight, 0) / np.cumsum(weight, 0)
    got = avg["ensemble_average_loss"].reshape(R, C)
    np.testing.assert_allclose(got[burn:], expect, rtol=1e-6)
    count = np.arange(1, R - burn + 1)[:, None]
    virials = avg["average_virials"].reshape(R, C)[burn:]
    np.testing.assert_allclose(virials, 0.5 * np.cumsum(dot[burn:], 0) / count, rtol=1e-6)


def test_metropolis_kernels_write_sglds_columns_and_the_rejection_rate(runs, tmp_path):
    _, store, ids = runs
    tables = _export(store, ids["mala"], tmp_path / "m")
    assert tables["run"]["header"] == RUN_SGLD and tables["averages"]["header"] == AVERAGES_MH
    assert np.isnan(tables["run"]["scaled_gradient"]).all()  # no TATi step width for MALA
    data = store.read(ids["mala"])
    R, C = data["loss"].shape
    burn = int(np.searchsorted(data["step"], BURN))
    rejected = 1.0 - data["accepted"][burn:].astype(np.float64)
    count = np.arange(1, R - burn + 1)[:, None]
    got = tables["averages"]["average_rejection_rate"].reshape(R, C)
    assert np.isnan(got[:burn]).all()
    np.testing.assert_allclose(got[burn:], np.cumsum(rejected, 0) / count, rtol=1e-8)
    assert 0 < got[-1].mean() < 1


def test_every_nth_keeps_the_rows_at_its_multiples_with_the_same_values(runs, tmp_path):
    _, store, ids = runs
    every = _export(store, ids["harmonic"], tmp_path / "all")
    sixth = _export(store, ids["harmonic"], tmp_path / "sixth", every_nth=6)
    keep = every["run"]["step"] % 6 == 0
    assert 0 < keep.sum() < len(keep) and (sixth["run"]["step"] % 6 == 0).all()
    for name in ("run", "trajectory", "averages"):
        for column in set(every[name]["header"]) - {"time_per_nth_step"}:
            np.testing.assert_array_equal(
                sixth[name][column], every[name][column][keep], err_msg=f"{name}.{column}"
            )
    # the time of the N steps between two rows: 6 here, the thin (2) for every record
    seconds = sixth["run"]["time_per_nth_step"]
    np.testing.assert_allclose(seconds, 3 * every["run"]["time_per_nth_step"][keep], rtol=1e-8)
    # the run's thin is 2: every_nth must be 1 or a multiple of it
    for bad in (3, 0, -2):
        with pytest.raises(SpecError) as error:
            _export(store, ids["harmonic"], tmp_path / "bad", every_nth=bad)
        assert error.value.field == "--every-nth" and "multiple of 2" in str(error.value)
    assert not (tmp_path / "bad").exists()  # refused before anything is written


@pytest.mark.parametrize("kind", ["projection", "none"])
def test_runs_without_full_positions_are_refused_naming_the_field(runs, tmp_path, kind):
    _, store, ids = runs
    with pytest.raises(SpecError) as error:
        _export(store, ids[kind], tmp_path / kind)
    assert error.value.field == "record.positions" and "'all'" in str(error.value)


def test_cli_writes_the_three_files_and_names_bad_input(runs, tmp_path, capsys, monkeypatch):
    from cli.main import main

    home, _, ids = runs
    out = tmp_path / "made" / "here"  # created, parents too
    args = ["export", ids["slp"], "--format", "tati", "--out", str(out), "--every-nth", "4"]
    done = jobs(home, *args)
    assert done.returncode == 0, done.stderr
    files = [out / name for name in ("run.csv", "trajectory.csv", "averages.csv")]
    assert done.stdout.split() == [str(f) for f in files]
    assert all(f.is_file() for f in files)
    assert not list(out.glob(".*.tmp"))  # each written to a temporary file, then renamed
    assert (_read(files[0])["step"] % 4 == 0).all()

    monkeypatch.setenv("BASIN_HOME", str(home))
    for argv, message in [
        ([ids["slp"], "--format", "tati", "--every-nth", "3"], "--every-nth: must be 1"),
        ([ids["projection"], "--format", "tati"], "record.positions:"),
        ([ids["slp"], "--format", "npz", "--every-nth", "4"], "--every-nth: applies to"),
        ([ids["slp"], "--format", "tati", "--out", str(files[0])], "--out:"),
    ]:
        if "--out" not in argv:
            argv = [*argv, "--out", str(tmp_path / "x")]
        assert main(["export", *argv]) == 2, argv
        assert message in capsys.readouterr().err, argv
