"""Background runs end to end: the CLI (in this process, but for a smoke test in a fresh one),
workers, faults, exports."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from clitest import jobs as cli
from clitest import process

import landscapes
from runs.store import Store

ROOT = Path(__file__).resolve().parents[1]


def worker(home: Path, *args: str) -> subprocess.Popen:
    """``python -m jobs worker`` in a process of its own: it serves until stopped (SIGTERM)."""
    env = {**os.environ, "BASIN_HOME": str(home)}
    return subprocess.Popen([sys.executable, "-m", "jobs", "worker", *args], cwd=ROOT, env=env)


def wait(condition, timeout: float, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"not reached within {timeout} s")


LONG = ["--target", "banana", "--sampler", "sgld", "--param", "step_size=0.001"]


@pytest.mark.slow
def test_cli_run_json_moments_match_the_exact_gaussian(tmp_path):
    # A correlated 2-D Gaussian under MALA: exact mean 0 and covariance from the target.
    params = {"dim": 2, "scales": [1.0, 2.0], "rotate": True}
    args = ["--target", "gaussian"] + [
        f"--target-param={k}={json.dumps(v)}" for k, v in params.items()
    ]
    args += ["--sampler", "mala", "--param", "step_size=0.5", "--chains", "256"]
    args += ["--steps", "1000", "--burn-in", "300", "--seed", "3", "--json"]
    out = cli(tmp_path, "run", *args)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    target = landscapes.make("gaussian", device="cpu", dtype="float64", **params)
    assert abs(target.cov[0, 1]) > 0.1  # correlated
    var = np.diag(target.cov.numpy())
    coords = summary["coordinates"]
    for i in range(2):
        se = np.sqrt(var[i] / coords["ess_bulk"][i])  # MC error of the mean from the ESS
        assert abs(coords["mean"][i]) < 5 * se, (i, coords)
        # variance of a sample variance of (near-)Gaussian draws: 2 var^2 / ESS
        assert abs(coords["var"][i] - var[i]) < 5 * var[i] * np.sqrt(2 / coords["ess_bulk"][i])
        assert coords["rhat"][i] < 1.1  # gross check: a mixed-up chain layout gives far more
    assert summary["status"] == "completed" and summary["steps"] == 1000
    assert summary["diverged_chains"] == 0 and 0.3 < summary["acceptance"] < 1
    for key in ("run_id", "target", "sampler", "chains", "seconds", "steps_per_second", "loss"):
        assert key in summary
    # the store holds every step (thin 1) and the export drops the burn-in, chain-major
    store = Store(tmp_path)
    data = store.read(summary["run_id"])
    assert data["position"].shape == (1000, 256, 2)
    npz = tmp_path / "run.npz"
    assert (
        cli(tmp_path, "export", summary["run_id"], "--format", "npz", "--out", str(npz)).returncode
        == 0
    )
    with np.load(npz) as z:
        np.testing.assert_array_equal(z["position"], data["position"][300:].transpose(1, 0, 2))
        assert z["loss"].shape == (256, 700)


@pytest.mark.slow
def test_cli_run_warns_about_a_kernel_with_a_known_bias(tmp_path):
    # RMSProp-SGLD drops the metric's Gamma term: the summary and stderr say so; SGLD has none
    args = ["run", "--target", "banana", "--param", "step_size=0.01", "--steps", "20", "--json"]
    biased = cli(tmp_path, *args, "--sampler", "rmsprop-sgld")
    assert biased.returncode == 0, biased.stderr
    (warning,) = json.loads(biased.stdout)["warnings"]
    assert warning["code"] == "dropped_gamma" and "Gamma" in warning["message"]
    assert "warning: dropped_gamma: " in biased.stderr
    plain = cli(tmp_path, *args, "--sampler", "sgld")
    assert json.loads(plain.stdout)["warnings"] == [] and "warning:" not in plain.stderr


def test_cli_run_on_a_network_records_a_projection_and_netcdf_export(tmp_path):
    # d = 2410 > 64: positions are projected on a fixed orthonormal basis, snapshots kept.
    # The smoke test of the real command (``process``): a run, its JSON, two exports.
    args = ["--target", "mlp", "--sampler", "sgld", "--param", "step_size=1e-5"]
    args += ["--param", "batch_size=32", "--chains", "4", "--steps", "300", "--thin", "3"]
    out = process(tmp_path, "run", *args, "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["dim"] == 64 * 32 + 32 + 32 * 10 + 10 and summary["coordinates"] is None
    store = Store(tmp_path)
    run_id = summary["run_id"]
    data = store.read(run_id)
    assert data["position"].shape == (100, 4, 8)
    np.testing.assert_array_equal(data["step"], np.arange(0, 300, 3))
    basis = store.get_array(run_id, "projection")
    np.testing.assert_allclose(basis.T @ basis, np.eye(8), atol=1e-5)
    kept = store.read(run_id, series="snapshots")
    snapshots = kept["position"]
    assert snapshots.shape[1:] == (4, 2410) and 1 <= len(snapshots) <= 200
    # a snapshot projected on the basis is the recorded projection of the same step
    steps = list(kept["step"])
    recorded = list(data["step"])
    both = [(i, recorded.index(t)) for i, t in enumerate(steps) if t in recorded]
    assert len(both) == len(steps)  # every snapshot is taken at a recorded step
    for i, row in both:
        np.testing.assert_allclose(snapshots[i] @ basis, data["position"][row], atol=1e-4)
    assert (
        np.isfinite(summary["loss"]["mean"]) and summary["loss"]["mean"] < summary["loss"]["init"]
    )
    # NetCDF opens as an ArviZ DataTree and its draws equal the stored ones
    import xarray as xr

    nc = tmp_path / "run.nc"
    exported = process(tmp_path, "export", run_id, "--format", "netcdf", "--out", str(nc))
    assert exported.returncode == 0
    idata = xr.open_datatree(nc)
    draws = idata.posterior["position"].values
    np.testing.assert_array_equal(draws, data["position"].transpose(1, 0, 2))
    # ... named as what they are, coordinates on the basis the export holds too
    assert idata.posterior["position"].dims[-1] == "projected_dim"
    np.testing.assert_array_equal(idata.constant_data["projection"].values, basis)
    npz = tmp_path / "run.npz"
    assert process(tmp_path, "export", run_id, "--out", str(npz)).returncode == 0
    np.testing.assert_array_equal(np.load(npz)["projection"], basis)


def test_cli_progress_written_to_a_log_has_a_line_per_update(tmp_path):
    # stderr is a pipe here: carriage returns would glue the updates into one line
    out = cli(tmp_path, "run", *LONG, "--chains", "4", "--steps", "200")
    assert out.returncode == 0, out.stderr
    assert "\r" not in out.stderr and "\x1b" not in out.stderr
    lines = out.stderr.splitlines()
    assert ": 1/200 steps, " in lines[0] and ": 200/200 steps, " in lines[-1]
    assert len(lines) <= 3 and "completed in" in out.stdout  # first, last, maybe one between


def test_bad_specs_exit_2_naming_the_field(tmp_path):
    out = cli(tmp_path, "run", *LONG, "--chains", "0", "--steps", "10")
    assert out.returncode == 2 and "chains" in out.stderr and "got 0" in out.stderr
    out = cli(tmp_path, "run", "--target", "banana", "--sampler", "mala", "--param", "step=1")
    assert out.returncode == 2 and "sampler.params.step" in out.stderr
    (tmp_path / "file").write_text("not a directory")
    out = cli(tmp_path / "file" / "home", "list")
    assert out.returncode == 2 and "BASIN_HOME" in out.stderr and "Traceback" not in out.stderr
    out = cli(tmp_path, "show", "nope")
    assert out.returncode == 2 and "nope" in out.stderr


@pytest.mark.slow
def test_sigkill_marks_interrupted_keeping_chunks_and_a_restart_resumes_the_queue(tmp_path):
    home = tmp_path
    run_id = cli(home, "submit", *LONG, "--chains", "64", "--steps", "2000000").stdout.strip()
    store = Store(home)
    supervisor = worker(home, "--slots", "1")
    try:
        wait(lambda: store.records(run_id) >= 512, timeout=120)
        pid = store.get(run_id).worker_pid
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        wait(lambda: store.get(run_id).status == "interrupted", timeout=10)
        assert time.monotonic() - killed <= 10
        record = store.get(run_id)
        assert str(pid) in record.error
        data = store.read(run_id)
        n = len(data["step"])
        assert n >= 512
        np.testing.assert_array_equal(data["step"], np.arange(n))  # whole chunks, in order
        assert data["loss"].shape == (n, 64) and np.isfinite(data["loss"]).all()
        assert data["position"].shape == (n, 64, 2) and np.isfinite(data["position"]).all()
    finally:
        supervisor.terminate()
        supervisor.wait(30)
    # runs queued while no worker is up are taken by the next one (an app or worker restart)
    ids = [cli(home, "submit", *LONG, "--steps", "300").stdout.strip() for _ in range(2)]
    assert [store.get(i).status for i in ids] == ["queued", "queued"]
    assert cli(home, "worker", "--once").returncode == 0
    assert [store.get(i).status for i in ids] == ["completed", "completed"]
    assert [store.records(i) for i in ids] == [300, 300]


@pytest.mark.slow
def test_cancel_stops_a_running_run_within_a_second(tmp_path):
    home = tmp_path
    run_id = cli(home, "submit", *LONG, "--chains", "64", "--steps", "2000000").stdout.strip()
    store = Store(home)
    supervisor = worker(home)
    try:
        wait(lambda: store.records(run_id) >= 256, timeout=120)
        asked = time.monotonic()
        store.request_cancel(run_id)  # what `python -m jobs cancel ID` does
        wait(lambda: store.get(run_id).status == "cancelled", timeout=5, every=0.01)
        assert time.monotonic() - asked < 1.0
        summary = wait(lambda: store.get(run_id).summary, timeout=60)  # written just after
        assert summary["status"] == "cancelled" and 0 < summary["steps"] < 2000000
    finally:
        supervisor.terminate()
        supervisor.wait(30)


@pytest.mark.slow
def test_two_concurrent_runs_and_a_polling_reader_never_see_a_torn_chunk(tmp_path):
    home = tmp_path
    ids = [
        cli(home, "submit", *LONG, "--chains", c, "--steps", "20000").stdout.strip()
        for c in ("16", "32")
    ]
    store = Store(home)
    supervisor = worker(home, "--slots", "2")
    try:
        seen = dict.fromkeys(ids, 0)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            for run_id, chains in zip(ids, (16, 32), strict=True):
                data = store.read(run_id)
                if not data:
                    continue
                n = len(data["step"])
                assert n >= seen[run_id]
                seen[run_id] = n
                np.testing.assert_array_equal(data["step"], np.arange(n))
                for name in ("loss", "diverged"):  # (accepted: Metropolis kernels only)
                    assert data[name].shape == (n, chains)
                assert data["position"].shape == (n, chains, 2)
            if all(store.get(i).status == "completed" for i in ids):
                break
            time.sleep(0.02)
        assert [store.records(i) for i in ids] == [20000, 20000]
    finally:
        supervisor.terminate()
        supervisor.wait(30)


def in_process(home: Path, sampler: str, params: dict, **spec) -> tuple[dict, dict]:
    """A banana run executed in this process: (summary, every record)."""
    from runs.loop import execute
    from runs.spec import parse_spec

    spec = {"target": {"name": "banana"}, "sampler": {"name": sampler, "params": params}, **spec}
    store = Store(home)
    run_id = store.create(parse_spec(spec).model_dump(mode="json"))
    summary = execute(parse_spec(spec), store, run_id)
    return summary, store.read(run_id)


def test_the_summarys_ess_and_rhat_are_arvizs_on_the_first_chains_that_fit(tmp_path, monkeypatch):
    import arviz_base
    import arviz_stats

    from samplers import diagnostics

    # 1,200 draws a chain and room for 4,800 draws: the first 4 of the 12 chains are diagnosed
    monkeypatch.setattr(diagnostics, "DIAGNOSED_DRAWS", 4800)
    summary, data = in_process(
        tmp_path, "mala", {"step_size": 0.3}, chains=12, steps=1400, burn_in=200, seed=5
    )
    coords = summary["coordinates"]
    assert coords["diagnostic_chains"] == 4
    # [chain, draw, d], as ArviZ takes; in float64, as the summary computes (float32 R-hat
    # differs in the fifth digit), through arviz-stats' Dataset interface (named dims) rather
    # than the array call the summary makes
    draws = np.moveaxis(data["position"][200:, :4], 0, 1).astype(np.float64)
    dataset = arviz_base.convert_to_dataset({"x": draws})
    ess, rhat = arviz_stats.ess(dataset, method="bulk"), arviz_stats.rhat(dataset, method="rank")
    np.testing.assert_allclose(coords["ess_bulk"], ess["x"].values)
    np.testing.assert_allclose(coords["rhat"], rhat["x"].values)
    # the moments, kept while running, still use every chain: as read back from the store
    every = data["position"][200:].reshape(-1, 2).astype(np.float64)
    np.testing.assert_allclose(coords["mean"], every.mean(0), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(coords["var"], every.var(0, ddof=1), rtol=1e-9)
    assert summary["acceptance"] == pytest.approx(float(data["accepted"][200:].mean()), rel=1e-9)
    assert summary["loss"]["mean"] == pytest.approx(float(data["loss"][200:].mean()), rel=1e-6)


@pytest.mark.parametrize(
    ("chains", "draws", "diagnosed"),
    # at most 256 chains and 2^20 draws in all, never fewer than 4 chains (nor than there are)
    [
        (8, 100, 8),
        (4096, 1000, 256),
        (4096, 4096, 256),
        (4096, 20_000, 52),
        (64, 10**6, 4),
        (3, 10**7, 3),
        (1, 0, 1),
    ],
)
def test_diagnosed_chains(chains, draws, diagnosed):
    from samplers import diagnostics

    assert diagnostics.diagnosed_chains(chains, draws) == diagnosed


def clear_built():
    from runs.build import _built_kernel, _built_target

    _built_target.cache_clear()
    _built_kernel.cache_clear()


@pytest.mark.parametrize(
    ("flush_every", "compile"),  # fixed flushes, or every ~0.5 s; compiled chunks, or eager
    [(100, "always"), (0, "always"), (0, "never")],
)
def test_a_run_is_deterministic_for_its_seed_and_device(tmp_path, flush_every, compile):
    # Blocks never depend on timing. The first run compiles its chunks; the second reuses them
    # (the process keeps the kernel it built), and must draw the same noise all the same.
    clear_built()
    spec = {"chains": 16, "steps": 600, "thin": 2, "flush_every": flush_every, "compile": compile}
    runs = [in_process(tmp_path / h, "mala", {"step_size": 0.1}, **spec)[1] for h in "ab"]
    assert runs[0].keys() == runs[1].keys() and len(runs[0]["step"]) == 300
    for name in runs[0]:
        np.testing.assert_array_equal(runs[0][name], runs[1][name])
    assert "kinetic" not in runs[0]  # MALA has no scalars of its own
    _, other = in_process(tmp_path / "c", "mala", {"step_size": 0.1}, **spec, seed=1)
    assert not np.array_equal(other["position"], runs[0]["position"])


def test_a_runs_first_steps_are_the_same_whatever_its_length_and_path(tmp_path):
    """300 eager steps are the first 300 of a 700-step run, eager or compiled (to float rounding
    there: the same draws, fused arithmetic)."""
    clear_built()
    params, spec = {"step_size": 0.1}, {"chains": 16, "thin": 1}
    short = in_process(tmp_path / "a", "mala", params, steps=300, compile="never", **spec)[1]
    eager = in_process(tmp_path / "b", "mala", params, steps=700, compile="never", **spec)[1]
    summary, fused = in_process(tmp_path / "c", "mala", params, steps=700, compile="always", **spec)
    assert summary["compiled"]
    for name in short:
        np.testing.assert_array_equal(short[name], eager[name][:300])
    np.testing.assert_allclose(fused["position"][:300], short["position"], rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(fused["accepted"][:50], short["accepted"][:50])


def test_an_auto_run_starts_compiled_where_a_compiled_chunk_is_ready(tmp_path, monkeypatch):
    """A chunk compiled earlier (kept by this process, or filed in the disk cache) serves an
    "auto" run from its first whole block, however short the run; with neither, a short run
    stays eager. Either way the draws are the eager run's, to float rounding."""
    from runs import loop as run

    monkeypatch.setenv("BASIN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(run, "COMPILE_AFTER_SECONDS", 1e9)  # never worth compiling by itself
    clear_built()
    params, spec = {"step_size": 0.1}, {"chains": 16, "steps": 1200}
    summary, never = in_process(tmp_path / "n", "mala", params, compile="never", **spec)
    assert not summary["compiled"]
    summary, _ = in_process(tmp_path / "e", "mala", params, compile="auto", **spec)
    assert not summary["compiled"]  # nothing compiled yet: eager throughout
    in_process(tmp_path / "a", "mala", params, compile="always", **spec)  # compiled, kept, filed
    summary, kept = in_process(tmp_path / "b", "mala", params, compile="auto", **spec)
    assert summary["compiled"]
    clear_built()  # a new kernel object: only the disk cache is left
    summary, filed = in_process(tmp_path / "c", "mala", params, compile="auto", **spec)
    assert summary["compiled"]
    for auto in (kept, filed):
        np.testing.assert_array_equal(auto["position"][:1], never["position"][:1])  # eager
        np.testing.assert_allclose(auto["position"], never["position"], rtol=1e-3, atol=1e-4)


def test_flushes_at_every_block_give_the_records_of_one_flush(tmp_path, monkeypatch):
    """Flushes cut at every eager piece (FLUSH_BYTES of 1) give the records of a run flushed
    every 0.5 s, one chunk a piece; a failed append fails the run with its error."""
    import sqlite3

    from runs import loop as run

    spec = {"chains": 16, "steps": 300, "thin": 1, "compile": "never"}
    _, once = in_process(tmp_path / "a", "mala", {"step_size": 0.1}, **spec)
    monkeypatch.setattr(run, "FLUSH_BYTES", 1)
    _, often = in_process(tmp_path / "b", "mala", {"step_size": 0.1}, **spec)
    (index,) = (tmp_path / "b" / "runs").glob("*.sqlite")
    chunks = sqlite3.connect(index).execute("SELECT COUNT(DISTINCT start) FROM chunks")
    # blocks of 1, 255 and 44 steps, run eagerly in pieces of EAGER_PIECE
    pieces = sum(math.ceil(n / run.EAGER_PIECE) for _, n in run.plan(300, 256))
    assert chunks.fetchone()[0] == pieces == 1 + 16 + 3
    assert once.keys() == often.keys() and len(once["step"]) == 300
    for name in once:
        np.testing.assert_array_equal(once[name], often[name])

    def full_disk(self, run_id, step, arrays, series="records"):
        if step > 0:
            raise OSError(28, "No space left on device")
        return append(self, run_id, step, arrays, series)

    append = Store.append
    monkeypatch.setattr(Store, "append", full_disk)
    with pytest.raises(OSError, match="No space left"):
        in_process(tmp_path / "c", "mala", {"step_size": 0.1}, **spec)


@pytest.mark.parametrize(
    ("steps", "length", "flush_every", "blocks"),
    [
        (10, 4, 0, [(0, 1), (1, 3), (4, 4), (8, 2)]),  # the first step alone, then noise blocks
        (10, 4, 3, [(0, 1), (1, 2), (3, 1), (4, 2), (6, 2), (8, 1), (9, 1)]),  # and flush cuts
        (1, 256, 0, [(0, 1)]),
    ],
)
def test_the_block_plan_follows_the_noise_blocks(steps, length, flush_every, blocks):
    from runs.loop import plan

    assert list(plan(steps, length, flush_every)) == blocks


def test_progress_is_reported_twice_a_second_however_often_records_flush(tmp_path, monkeypatch):
    """Flushes at every block report progress at the first block, every FLUSH_SECONDS and at the
    end, not at each flush (a SQLite commit each); a spec's own flush_every reports at each."""
    from runs import loop as run
    from runs.pace import FLUSH_SECONDS

    reports = []
    set_progress = Store.set_progress

    def spy(self, run_id, progress):
        reports.append(progress["steps_done"])
        set_progress(self, run_id, progress)

    monkeypatch.setattr(Store, "set_progress", spy)
    monkeypatch.setattr(run, "FLUSH_BYTES", 1)
    spec = {"chains": 16, "steps": 1400, "thin": 1, "compile": "never"}
    start = time.perf_counter()
    in_process(tmp_path / "a", "mala", {"step_size": 0.1}, **spec)
    seconds = time.perf_counter() - start
    assert reports[0] == 1 and reports[-1] == 1400
    assert len(reports) <= 2 + seconds / FLUSH_SECONDS + 1 < len(list(run.plan(1400, 256)))
    reports.clear()
    in_process(tmp_path / "b", "mala", {"step_size": 0.1}, **spec, flush_every=200)
    assert reports[:-1] == list(range(200, 1401, 200))


def test_the_eta_follows_the_sampling_rate_not_the_time_spent_building(tmp_path, monkeypatch):
    # a target that takes 2 s to build (a dataset, a compile, a training): counted from the
    # start, the first report's rate made a 0.1 s remainder an ETA of seconds
    from runs import loop as run

    build = run.build
    monkeypatch.setattr(run, "build", lambda spec: (time.sleep(2.0), build(spec))[1])
    reports = []

    def spy(self, run_id, progress):
        reports.append((time.perf_counter(), progress["steps_done"], progress["eta_s"]))

    monkeypatch.setattr(Store, "set_progress", spy)
    spec = {"chains": 8, "steps": 4000, "flush_every": 1000, "compile": "never"}
    in_process(tmp_path, "sgld", {"step_size": 1e-3}, **spec)
    end = reports[-1][0]
    when, done, eta = reports[0]
    assert done == 1000
    assert eta <= 3 * (end - when) + 0.5, (eta, end - when)


def test_snapshots_are_the_full_positions_at_every_strideth_step(tmp_path):
    """A projected run keeps the full position every ``snapshot_stride``-th step: the positions
    a run of the same seed records in full at those steps, and its records their projection."""
    from runs.loop import execute
    from runs.spec import parse_spec

    spec = {
        "target": {"name": "mlp", "params": {"hidden_sizes": [4]}},  # d = 310: projected
        "sampler": {"name": "sgld", "params": {"step_size": 1e-4, "batch_size": 16}},
        "chains": 3,
        "steps": 300,
        "thin": 2,
        "record": {"snapshots": 15},  # 150 records: a snapshot every 10th, every 20th step
        "compile": "never",
    }
    runs = []
    for home, positions in (("projected", "auto"), ("full", "all")):
        spec["record"]["positions"] = positions
        store = Store(tmp_path / home)
        run_id = store.create(parse_spec(spec).model_dump(mode="json"))
        execute(parse_spec(spec), store, run_id)
        runs.append((store, run_id))
    (store, projected), (full_store, full) = runs
    snaps = store.read(projected, series="snapshots")
    every = full_store.read(full)
    np.testing.assert_array_equal(snaps["step"], np.arange(0, 300, 20))
    np.testing.assert_array_equal(snaps["position"], every["position"][::10])
    basis = store.get_array(projected, "projection")
    records = store.read(projected)["position"]
    assert records.shape == (150, 3, 8)
    np.testing.assert_allclose(records, every["position"] @ basis, rtol=1e-5, atol=1e-5)


def test_momentum_kernels_record_their_scalars_per_step(tmp_path):
    summary, data = in_process(tmp_path, "sgnht", {"step_size": 0.01}, chains=8, steps=64)
    assert data["kinetic"].shape == data["thermostat"].shape == (64, 8)
    assert (data["kinetic"] >= 0).all()
    assert summary["scalars"]["kinetic"] == pytest.approx(float(data["kinetic"].mean()), rel=1e-6)


# -- the CLI's edges, in this process (cli.main.main): each answer names what was wrong --


def main(home: Path, *argv: str) -> int:
    from cli.main import main as jobs_main

    os.environ["BASIN_HOME"] = str(home)  # the caller's monkeypatch restores it
    return jobs_main(list(argv))


MALA = ["--target", "banana", "--sampler", "mala", "--param", "step_size=0.1"]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("BASIN_HOME", str(tmp_path))
    return tmp_path


def test_bad_spec_files_and_flags_exit_2_with_one_message(home, capsys, monkeypatch):
    spec = {"target": {"name": "banana", "params": {}}, "steps": 100}
    cases = [
        (b"\xff\xfe{}", [], "spec: cannot read"),  # not UTF-8
        (b"[1, 2]", MALA, "must hold a JSON object, not a list"),
        (json.dumps({**spec, "llc": [1]}).encode(), ["--w0", "init"], "llc: must be a JSON"),
        (json.dumps(spec).encode(), ["--param", "step_size=1"], "--param needs a sampler"),
    ]
    for i, (content, flags, message) in enumerate(cases):
        path = home / f"spec{i}.json"
        path.write_bytes(content)
        assert main(home, "submit", str(path), *flags) == 2, message
        assert message in capsys.readouterr().err
    # an LLC that cannot start is refused when queued, not failed later by the worker
    assert main(home, "submit", *MALA, "--observe", "llc", "--w0", "train") == 2
    assert "llc.w0: banana has no data to train on" in capsys.readouterr().err
    monkeypatch.setenv("BASIN_MEMORY_BUDGET", "1GB")
    assert main(home, "submit", *MALA) == 2
    err = capsys.readouterr().err
    assert "BASIN_MEMORY_BUDGET: must be a number of bytes > 0, got '1GB'" in err
    monkeypatch.delenv("BASIN_MEMORY_BUDGET")
    assert Store(home).list() == []  # nothing was queued


def test_flags_set_single_parameters_of_a_spec_files_target_and_sampler(home, capsys):
    path = home / "spec.json"
    path.write_text(json.dumps({"target": {"name": "banana", "params": {"b": 0.1}}, "steps": 10}))
    assert main(home, "submit", str(path), "--sampler", "mala", "--param", "step_size=0.5") == 0
    assert main(home, "submit", str(path), "--target-param", "a=3", "--sampler", "ula") == 0
    first, second = (Store(home).get(i).spec for i in capsys.readouterr().out.split())
    assert first["sampler"]["params"]["step_size"] == 0.5
    assert first["target"]["params"]["b"] == 0.1
    assert second["target"]["params"]["a"] == 3.0 and second["target"]["params"]["b"] == 0.1


def test_sweep_grids_must_be_non_empty_and_zero_is_refused_not_replaced(home, capsys):
    dln = ["sweep", "dln", "--problems", "1", "--submit-only"]
    cases = [
        ([*dln, "--samplers", "sgld", "--step-sizes", "1e-6", "--steps", "0"], "steps"),
        ([*dln, "--samplers", "sgld", "--step-sizes", "1e-6", "--chains", "0"], "chains"),
        (["sweep", "dln", "--problems", "0", "--step-sizes", "1e-6"], "problems: must be"),
        ([*dln, "--samplers", ",", "--step-sizes", "1e-6"], "--samplers: must name one or more"),
        ([*dln, "--samplers", "sgld", "--step-sizes", ","], "--step-sizes: must be one or more"),
        (
            ["sweep", "calibrate", "--target", "rrr", "--sampler", "sgld", "--step-sizes", "1e-6"],
            "--nbetas: must be one or more",
        ),
    ]
    cases[-1][0].extend(["--nbetas", ",", "--submit-only"])
    for argv, message in cases:
        assert main(home, *argv) == 2, argv
        assert message in capsys.readouterr().err
    assert Store(home).list() == [] and Store(home).list_sweeps() == []


def test_export_and_surface_refuse_what_they_cannot_write_before_working(home, capsys):
    assert main(home, "submit", *MALA) == 0
    queued = capsys.readouterr().out.strip()
    assert main(home, "show", queued, "--json") == 0  # a queued run's progress is its zero
    progress = json.loads(capsys.readouterr().out)["progress"]
    assert progress["steps_done"] == 0 and progress["steps_total"] == 1000
    assert main(home, "export", queued, "--out", str(home / "q.npz")) == 2
    assert f"run {queued} has no records yet (status queued)" in capsys.readouterr().err
    assert main(home, "run", *MALA, "--chains", "4", "--steps", "200", "--json") == 0
    run_id = json.loads(capsys.readouterr().out)["run_id"]
    for argv, message in [
        (["export", run_id, "--out", str(home / "nowhere" / "x.npz")], "--out: the folder"),
        (["export", run_id, "--format", "netcdf", "--out", str(home)], "is a folder"),
        (["surface", run_id, "--out", str(home / "nowhere" / "s.npz")], "--out: the folder"),
        (["surface", run_id, "--directions", "random", "--seed", "-1"], "seed: must be"),
    ]:
        assert main(home, *argv) == 2, argv
        assert message in capsys.readouterr().err
    assert main(home, "export", run_id, "--out", str(home / "x.npz")) == 0
    assert np.load(home / "x.npz")["position"].shape == (4, 200, 2)


def test_diverged_chains_counts_those_that_diverged_after_the_last_thinned_record(home, capsys):
    # ULA at a step far past the banana's stability limit: chains blow up over the 1000 steps
    ula = ["--target", "banana", "--sampler", "ula", "--param", "step_size=0.4"]
    args = [*ula, "--chains", "8", "--steps", "1000", "--compile", "never", "--json"]
    assert main(home, "run", *args) == 0
    every = json.loads(capsys.readouterr().out)
    flags = Store(home).read(every["run_id"], names=["diverged"])["diverged"]
    truth = int(flags[-1].sum())  # every step recorded: the last record is the run's end
    assert 0 < truth < 8 and not np.array_equal(flags[599], flags[-1])  # some after step 600
    assert main(home, "run", *args, "--thin", "600") == 0
    thinned = json.loads(capsys.readouterr().out)
    assert thinned["diverged_chains"] == every["diverged_chains"] == truth


def test_a_foreground_run_honours_cancel(home, capsys):
    import threading

    store = Store(home)
    argv = ["run", *MALA, "--chains", "4", "--steps", "20000000", "--thin", "100", "--json"]
    codes = []
    thread = threading.Thread(target=lambda: codes.append(main(home, *argv)))
    thread.start()
    try:
        run_id = wait(lambda: [r.id for r in store.list() if store.records(r.id) > 0], 120)[0]
        store.request_cancel(run_id)  # what `python -m jobs cancel ID` does from another shell
        thread.join(60)
    finally:
        if thread.is_alive():  # never leave a 20,000,000-step run behind
            store.request_cancel(run_id)
            thread.join()
    summary = json.loads(capsys.readouterr().out)
    assert codes == [0] and summary["status"] == "cancelled" and summary["steps"] < 20_000_000
    assert store.get(run_id).status == "cancelled"


def test_the_summarys_draws_hold_only_their_own_bytes(tmp_path, monkeypatch):
    """The draws kept for ESS and R-hat (the first chains) must not keep each block's every
    chain alive: a view did, and a 1.1 GB store's run peaked at 1.19 GB resident (0.56 GB
    after). Each kept tensor's storage is exactly its [draws, k, d] float32 bytes."""
    from runs import loop as runs
    from runs.spec import parse_spec

    kept = []
    summary = runs.Recorder.summary

    def look(self, *args, **kwargs):
        kept.extend(self.first_draws)
        return summary(self, *args, **kwargs)

    monkeypatch.setattr(runs.Recorder, "summary", look)
    spec = parse_spec(
        {"target": {"name": "banana"}, "sampler": {"name": "mala"}, "chains": 512, "steps": 600}
    )
    store = Store(tmp_path)
    run_id = store.create(spec.model_dump(mode="json"))
    store.claim(os.getpid(), run_id)
    runs.execute(spec, store, run_id)
    assert kept and all(t.shape[1] < 512 for t in kept)  # the first chains only
    for t in kept:
        assert t.untyped_storage().nbytes() == t.numel() * 4


def test_a_supervisor_owned_by_an_app_stops_with_it_and_its_run_ends_interrupted(tmp_path):
    """What the app's pool does (``ensure_supervisor(owned=True)``): the supervisor watches the
    process that started it and, once that is gone, stops its workers as on Ctrl-C."""
    from runs.liveness import started

    home = tmp_path
    run_id = cli(home, "submit", *LONG, "--chains", "8", "--steps", "2000000").stdout.strip()
    app = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # a stand-in app
    owner = f"{app.pid}:{started(app.pid)}"
    supervisor = worker(home, "--owner", owner)
    store = Store(home)
    try:
        wait(lambda: store.records(run_id) > 0, timeout=120)
        assert supervisor.poll() is None  # its owner lives: it serves
        app.kill()
        app.wait()
        assert supervisor.wait(30) == 0  # gone within its loop's tick once the owner is
        store.mark_stale(0.0)
        assert store.get(run_id).status == "interrupted"  # resumable, its records kept
        assert store.records(run_id) > 0
    finally:
        app.kill()
        supervisor.kill()


def test_a_run_queued_beside_a_busy_worker_gets_a_worker_of_its_own(tmp_path):
    # the warm worker takes the first run at once; the second, queued while it runs, must start
    # beside it (the supervisor counted the queue alone: 1 queued, 1 worker, none spawned)
    supervisor = worker(tmp_path, "--slots", "2")
    store = Store(tmp_path)
    try:
        first = cli(tmp_path, "submit", *LONG, "--steps", "2000000").stdout.strip()
        wait(lambda: store.get(first).status == "running", 120)
        second = cli(tmp_path, "submit", *LONG, "--steps", "2000000").stdout.strip()
        wait(lambda: store.get(second).status == "running", 60)
        assert store.get(first).status == "running"
    finally:
        supervisor.terminate()  # its runs end interrupted
        supervisor.wait(30)


def test_torch_threads_nests_and_restores_each_count():
    import torch

    from runs.worker import torch_threads

    outer = torch.get_num_threads()
    with torch_threads(1):
        with torch_threads(2):  # nested in one thread: no deadlock (it once was a plain Lock)
            assert torch.get_num_threads() == 2
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == outer
