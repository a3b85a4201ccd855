"""Nested sampling as a run kind (runs/nested.py) and on the pages (ui/nested_view.py).

- A nested run through the run loop (``runs.loop.execute``, as a worker runs it) lands in the
  store: its summary's log Z within 3 of its own errors of the exact normaliser on the gaussian,
  banana and donut (seed 1, as tests/test_nested.py: seed 0 puts the donut at 3.3), its records
  (the dead points, then the live ones) whose weights sum to 1, equally weighted draws, the
  animation's frames and a good verdict; a resumed run writes no row twice and ends the same.
- The spec refuses what a nested run cannot use (a network: no box; sampling fields), by field.
- The CLI: ``run --kind nested --nested-param live=N``, ``show``, ``export`` (npz only).
- The Playground lists nested after the MCMC kernels, submits a nested run and shows the
  evidence line with the verdict, the animation and the histograms; the Runs table's comparison
  has the log Z rows, empty for a sampling run.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from apptest import errors, figures, no_pool, page, run_queued, verdicts  # noqa: F401

from charts import table
from charts.nested import nested_figure, outlines, shown_frames
from runs.loop import execute
from runs.nested import AGREES
from runs.spec import SpecError, parse_spec
from runs.store import Store

ROOT = Path(__file__).resolve().parents[1]


def nested_spec(name: str, live: int = 200, seed: int = 1, **options) -> dict:
    return {
        "kind": "nested",
        "target": {"name": name, "params": {}},
        "nested": {"live": live, **options},
        "seed": seed,
        "dtype": "float64",
    }


def run_here(store: Store, data: dict, run_id: str | None = None, **kwargs) -> tuple[str, dict]:
    spec = parse_spec(data)
    run_id = run_id or store.create(spec.model_dump(mode="json"))
    summary = execute(spec, store, run_id, **kwargs)
    store.finish(run_id, summary["status"], summary=summary)
    return run_id, summary


# -- the run kind --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["gaussian", "banana", "donut"])
def test_a_nested_run_lands_its_evidence_within_three_errors_of_the_exact(tmp_path, name):
    store = Store(tmp_path)
    run_id, summary = run_here(store, nested_spec(name))
    assert summary["kind"] == "nested" and summary["status"] == "completed"
    assert summary["stopped"] == "dlogz"
    assert summary["exact_log_z"] is not None
    assert abs(summary["log_z"] - summary["exact_log_z"]) <= AGREES * summary["log_z_error"]
    assert abs(summary["errors_off"]) <= AGREES
    assert summary["verdict"]["status"] == "good", summary["verdict"]
    # the records: the removed points in order, then the N live points; weights sum to 1
    rows = store.read(run_id)
    m = summary["iterations"] + summary["live"]
    assert len(rows["iteration"]) == m and rows["position"].shape == (m, 2)
    assert np.array_equal(rows["iteration"], np.arange(1, m + 1))
    assert np.all(np.diff(rows["log_l"][: summary["iterations"]]) >= 0)
    weights = np.exp(rows["log_weight"] - summary["log_z"])
    assert weights.sum() == pytest.approx(1.0, rel=1e-9)
    draws = store.get_array(run_id, "draws")
    assert draws.shape == (summary["draws"], 2) and summary["draws"] == math.ceil(summary["ess"])
    live = store.get_array(run_id, "frame_live")
    assert live.ndim == 3 and live.shape[1:] == (200, 2)
    assert store.get(run_id).status == "completed"


def test_a_wrong_evidence_fails_the_verdict_with_what_to_try(tmp_path):
    # seed 0 puts the donut at 3.3 of its errors (tests/test_nested.py): the verdict says so
    _, summary = run_here(Store(tmp_path), nested_spec("donut", seed=0))
    assert summary["errors_off"] > AGREES
    (signal,) = [s for s in summary["verdict"]["signals"] if s["code"] == "evidence"]
    assert summary["verdict"]["status"] == "fail"
    assert "errors from the exact" in signal["message"] and "nested.live" in signal["try"]


def test_max_iter_stops_the_run_and_fails_the_verdict(tmp_path):
    _, summary = run_here(Store(tmp_path), nested_spec("gaussian", live=50, max_iter=20))
    assert summary["stopped"] == "max_iter" and summary["iterations"] == 20
    assert "max_iter" in [s["code"] for s in summary["verdict"]["signals"]]


def test_a_cancelled_run_resumes_to_the_same_answer_writing_no_row_twice(tmp_path):
    store = Store(tmp_path)
    _, whole = run_here(store, nested_spec("gaussian", live=50))
    calls = iter(range(10**6))
    run_id, part = run_here(
        store, nested_spec("gaussian", live=50), should_stop=lambda: next(calls) >= 3
    )
    assert part["status"] == "cancelled"
    kept = store.records(run_id)
    assert 0 < kept < whole["iterations"]  # the dead points only, no live ones
    store.requeue(run_id)
    _, resumed = run_here(store, nested_spec("gaussian", live=50), run_id=run_id)
    assert resumed["status"] == "completed"
    assert resumed["log_z"] == whole["log_z"]
    assert store.records(run_id) == whole["iterations"] + 50


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"target": {"name": "mlp"}}, "target"),
        ({"target": {"name": "funnel", "params": {"dim": 4}}}, "target"),
        ({"nested": {"live": 5}}, "nested.live"),
        ({"nested": {"lives": 100}}, "nested.lives"),
        ({"chains": 8}, "chains"),
        ({"sampler": {"name": "mala"}}, "sampler"),
        ({"vi": {}}, "vi"),
    ],
)
def test_the_spec_refuses_what_a_nested_run_cannot_use_by_field(change, field):
    with pytest.raises(SpecError) as caught:
        parse_spec({**nested_spec("donut"), **change})
    assert caught.value.field == field, str(caught.value)


def test_a_nested_block_on_a_sampling_run_is_refused():
    data = {"target": {"name": "donut"}, "sampler": {"name": "mala"}, "nested": {}}
    with pytest.raises(SpecError, match="kind 'nested' runs only") as caught:
        parse_spec(data)
    assert caught.value.field == "nested"


def test_a_nested_spec_survives_a_json_round_trip():
    spec = parse_spec(nested_spec("banana", live=64, dlogz=0.5))
    again = parse_spec(json.loads(json.dumps(spec.model_dump(mode="json"))))
    assert again == spec and again.nested.live == 64 and again.nested.update is None


def jobs(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "BASIN_HOME": str(home), "COLUMNS": "100"}
    command = [sys.executable, "-m", "jobs", *args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.slow  # six processes that each import torch: 10-35 s on a busy 2-core machine
def test_the_cli_runs_shows_and_exports_a_nested_run(tmp_path):
    done = jobs(tmp_path, "run", "--kind", "nested", "--target", "gaussian", "--seed", "1")
    assert done.returncode == 0, done.stderr
    bad = jobs(
        tmp_path, "run", "--kind", "nested", "--target", "gaussian", "--nested-param", "live=3"
    )
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith(
        "error: nested.live: must be an integer in [10, 100000]"
    )
    done = jobs(tmp_path, "run", "--kind", "nested", "--target", "donut", "--nested-param",
                "live=100", "--seed", "1", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["live"] == 100 and summary["exact_log_z"] == pytest.approx(1.66013, abs=1e-4)
    run_id = summary["run_id"]
    shown = json.loads(jobs(tmp_path, "show", run_id, "--json").stdout)
    assert shown["summary"]["log_z"] == summary["log_z"] and shown["sampler"] == "nested"
    out = tmp_path / "n.npz"
    assert jobs(tmp_path, "export", run_id, "--format", "npz", "--out", str(out)).returncode == 0
    assert set(np.load(out)) >= {"iteration", "position", "log_l", "log_weight"}
    refused = jobs(tmp_path, "export", run_id, "--format", "netcdf", "--out", str(out))
    assert refused.returncode == 2 and "nested run" in refused.stderr
    assert "Traceback" not in refused.stderr


# -- charts ----------------------------------------------------------------------------------


def test_the_animation_has_a_frame_per_shown_iteration_and_the_balls_outlined():
    k, n = 90, 30
    rng = np.random.default_rng(0)
    frames = {
        "iteration": np.arange(1, k + 1) * 5,
        "live": rng.uniform(-1, 1, (k, n, 2)),
        "removed": rng.uniform(-1, 1, (k, 2)),
        "added": rng.uniform(-1, 1, (k, 2)),
        "radius": np.full(k, 0.1),
        "scale": np.array([2.0, 4.0]),
        "rejected": np.full((k, 4, 2), np.nan),
        "log_z": np.linspace(-5, 1, k),
    }
    grid = {
        "xs": np.linspace(-1, 1, 5),
        "ys": np.linspace(-1, 1, 5),
        "log_density": np.zeros((5, 5)),
    }
    fig = nested_figure(frames, grid, ("x", "y"), most=60)
    assert len(fig.frames) == len(shown_frames(k, 60)) <= 60
    assert fig.frames[-1].name == str(frames["iteration"][-1])
    x, y = outlines(np.zeros((1, 2)), 0.1 * frames["scale"])
    assert np.nanmax(x) == pytest.approx(0.2) and np.nanmax(y) == pytest.approx(0.4)


def test_the_runs_comparison_has_log_z_rows_empty_for_a_sampling_run():
    nested = {"kind": "nested", "log_z": 1.7, "log_z_error": 0.1, "exact_log_z": 1.66}
    rows = table.compare_rows({"a": nested, "b": {"acceptance": 0.6}})
    by = {r["quantity"]: r for r in rows}
    assert by["log Z (nested)"] == {"quantity": "log Z (nested)", "a": 1.7, "b": None}
    assert by["exact log Z"]["a"] == 1.66 and by["exact log Z"]["b"] is None
    assert "log Z (nested)" not in {r["quantity"] for r in table.compare_rows({"b": {}})}
    assert table.evidence(nested) == "1.700 ± 0.100 (exact 1.660)"
    assert table.evidence({"acceptance": 0.6}) is None


# -- the Playground --------------------------------------------------------------------------


@pytest.mark.usefixtures("no_pool")
def test_the_playground_submits_a_nested_run_and_shows_its_evidence(home):
    at = page("playground")
    options = at.selectbox(key="pg.sampler_name").options
    assert options[-1] == "nested"
    at.selectbox(key="pg.target_name").select("gaussian").run()
    at.selectbox(key="pg.sampler_name").select("nested").run()
    assert not errors(at), errors(at)
    assert not [w for w in at.text_input if w.key == "pg.chains"]  # no chains to set
    at.text_input(key="pg.nested.nested.live").input("100").run()
    at.text_input(key="pg.nested.seed").input("1").run()
    at.button(key="pg.run").click().run()
    assert not errors(at), errors(at)
    (run,) = Store(home).list()
    assert run.spec["kind"] == "nested" and run.spec["nested"]["live"] == 100
    assert run.spec["seed"] == 1 and run.spec["target"]["name"] == "gaussian"
    (run,) = run_queued(home).list()
    assert run.status == "completed", run.error
    at.run()
    assert not errors(at), errors(at)
    lines = [m.value for m in at.markdown if "log Z =" in m.value]
    assert lines and "errors off" in lines[0] and "exact 1.838" in lines[0]
    assert verdicts(at), "the verdict is shown"
    shown = figures(at)
    assert "Nested sampling: live points and the RadFriends region" in shown
    assert any(t.startswith("Marginal of") for t in shown)


# -- Compare ---------------------------------------------------------------------------------


def test_compare_runs_nested_beside_a_kernel_on_the_same_potential_and_seed(home):
    """Nested sampling is Compare's last entry: on a potential without a box over every
    coordinate the page names it and queues nothing; on the donut it runs at its own live
    points with the comparison's seed, and its resampled draws join the histogram and the
    table: its KS distance (scipy's, on the same exact draws) and log Z (its summary's)."""
    from scipy.stats import ks_2samp

    from studies.diagnostics import exact_draws, labels_of, target_of

    at = page("compare")
    assert at.multiselect(key="cmp.samplers").options[-1] == "nested"
    at.multiselect(key="cmp.samplers").set_value(["mala", "nested"]).run()
    assert any("nested" in e and "box" in e for e in errors(at)), errors(at)  # funnel, d = 10
    at.button(key="cmp.run").click().run()
    assert Store(home).list() == []
    at.selectbox(key="cmp.target_name").set_value("donut").run()
    assert not errors(at), errors(at)
    at.text_input(key="cmp.nested.nested.live").input("200").run()
    at.text_input(key="cmp.chains").input("8").run()
    at.text_input(key="cmp.steps").input("300").run()
    at.text_input(key="cmp.seed").input("1").run()
    at.button(key="cmp.run").click().run()
    assert not errors(at), errors(at)
    runs = {r.spec.get("kind"): r for r in run_queued(home).list()}
    assert runs.keys() == {"sample", "nested"}
    nested, mala = runs["nested"], runs["sample"]
    assert nested.spec["nested"]["live"] == 200 and nested.spec["seed"] == mala.spec["seed"] == 1
    assert nested.spec["target"] == mala.spec["target"]
    assert all(r.status == "completed" for r in runs.values()), [r.error for r in runs.values()]
    at.run()
    assert not errors(at), errors(at)
    table = at.dataframe[0].value.set_index("sampler")
    assert list(table.index) == ["mala", "nested"]
    summary = nested.summary
    assert table.loc["nested", "log Z"].startswith(f"{summary['log_z']:.3f} ± ")
    assert table.loc["nested", "energy evaluations"] == summary["evaluations"]
    donut = target_of("donut", "{}")  # the pages' closed-form target (float64)
    label = labels_of(donut)[1]  # the page shows the last coordinate first
    draws = Store(home).get_array(nested.id, "draws")
    ks = ks_2samp(draws[:, 1], exact_draws(donut)[:, 1]).statistic
    got = float(table.loc["nested", f"KS to exact ({label})"])
    assert got == pytest.approx(ks, rel=1e-9), (got, ks)
    shown = figures(at)
    histogram = shown[f"Marginal of {label}: every sampler on the same bins"]["data"]
    assert [b["name"] for b in histogram if b["type"] == "bar"] == ["mala", "nested"]
    assert "mala: trace of " + label in shown and "nested: trace of " + label not in shown
