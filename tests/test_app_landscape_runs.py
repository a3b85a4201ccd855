"""The Runs and Landscape pages (AppTest) on runs executed in this process: a banana MALA run
(d = 2, positions recorded) and a tiny digits MLP (d = 310, snapshots). No worker is started
(BASIN_NO_WORKERS=1), so a run created here stays queued until the test says otherwise."""

from __future__ import annotations

import base64
import io
import json
import os
import shutil

import numpy as np
import pandas as pd
import pytest
from apptest import errors, home, page  # noqa: F401

from charts import table
from runs.loop import execute
from runs.spec import parse_spec
from runs.store import Store
from studies import surface as surfaces
from ui.text import plain

BANANA = {
    "target": {"name": "banana"},
    "sampler": {"name": "mala", "params": {"step_size": 0.1}},
    "chains": 6,
    "steps": 300,
    "burn_in": 50,
}
MLP = {
    "target": {"name": "mlp", "params": {"hidden_sizes": [4]}},
    "sampler": {"name": "sgld", "params": {"step_size": 1e-4, "batch_size": 64}},
    "chains": 2,
    "steps": 40,
}


def spec_dict(spec: dict) -> dict:
    return parse_spec(spec).model_dump(mode="json")


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    """The two runs, executed once per module (the banana's compile dominates) and finished
    as a worker would finish them; each test gets its own copy of this store."""
    root = tmp_path_factory.mktemp("seeded")
    store = Store(root)
    ids = {}
    for name, spec in (("banana", BANANA), ("mlp", MLP)):
        run_id = store.create(spec_dict(spec))
        summary = execute(parse_spec(spec), store, run_id)
        store.finish(run_id, summary["status"], summary=summary)
        ids[name] = run_id
    store.close()  # the last connection checkpoints the WAL: the copies are whole
    return root, ids


@pytest.fixture
def runs(home, seeded, monkeypatch):  # noqa: F811
    monkeypatch.setenv("BASIN_NO_WORKERS", "1")
    root, ids = seeded
    shutil.copytree(root, home, dirs_exist_ok=True)
    return ids


def open_runs(at, *run_ids):
    return at.multiselect(key="runs.open").set_value(list(run_ids)).run()


def export(at, run_id: str, label: str):
    at.selectbox(key=f"runs.format.{run_id}").set_value(label).run()
    at.button(key=f"runs.prepare.{run_id}").click().run()
    assert not errors(at), errors(at)
    return at.session_state[f"runs.export.{run_id}.{label_kind(label)}"]


def label_kind(label: str) -> str:
    return {"NetCDF (ArviZ)": "nc", ".npz (numpy)": "npz", "CSV of traces": "csv"}[label]


def values(array) -> np.ndarray:
    """A plotly JSON array: a list, or the typed {"dtype", "bdata"} form plotly writes."""
    if isinstance(array, dict):
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"])
    return np.asarray(array)


def test_runs_page_lists_opens_compares_and_exports(runs, home):  # noqa: F811
    store = Store(home)
    banana, mlp = runs["banana"], runs["mlp"]
    at = page("runs")
    assert not errors(at), errors(at)
    table = at.dataframe[0].value.set_index("id")
    assert set(table.index) == {banana, mlp}
    assert table.loc[banana, ["target", "sampler", "chains", "steps", "status"]].tolist() == [
        "banana",
        "mala",
        6,
        300,
        "completed",
    ]
    assert table.loc[mlp, "status"] == "completed" and table.loc[mlp, "progress (%)"] == 100

    # One opened: its spec and the acceptance the store holds.
    at = open_runs(at, banana)
    assert not errors(at), errors(at)
    record = store.get(banana)
    assert json.loads(at.json[0].value) == record.spec
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["acceptance"] == f"{record.summary['acceptance']:.4g}"
    assert any(p.proto.value == 100 for p in at.get("progress"))

    # .npz: chain-major, every record.
    data, count = export(at, banana, ".npz (numpy)")
    npz = np.load(io.BytesIO(data))
    assert count == 300 and npz["position"].shape == (6, 300, 2) and npz["loss"].shape == (6, 300)
    assert at.get("download_button")
    # CSV: one row per step and chain, each row the stored value.
    data, _ = export(at, banana, "CSV of traces")
    csv = pd.read_csv(io.BytesIO(data))
    assert len(csv) == 300 * 6
    assert {"step", "chain", "loss", "accepted", "diverged", "position_0", "position_1"} <= set(
        csv.columns
    )
    stored = store.read(banana)
    row = csv[(csv.step == stored["step"][123]) & (csv.chain == 4)].iloc[0]
    assert row.loss == pytest.approx(float(stored["loss"][123, 4]), rel=1e-6)
    assert row.position_1 == pytest.approx(float(stored["position"][123, 4, 1]), rel=1e-6)
    data, _ = export(at, banana, "NetCDF (ArviZ)")
    assert data[:4] in (b"\x89HDF", b"CDF\x01", b"CDF\x02")

    # Two opened: their summaries side by side; the MLP's CSV has no position columns (d > 64).
    at = open_runs(at, banana, mlp)
    assert not errors(at), errors(at)
    compare = at.dataframe[1].value
    assert list(compare.columns) == [banana, mlp]
    assert compare.loc["acceptance", banana] == pytest.approx(record.summary["acceptance"])
    assert compare.loc["seconds", mlp] == pytest.approx(store.get(mlp).summary["seconds"])
    data, _ = export(at, mlp, "CSV of traces")
    csv = pd.read_csv(io.BytesIO(data))
    assert len(csv) == 40 * 2 and not any(c.startswith("position") for c in csv.columns)


def test_a_failed_export_stays_reported_across_the_pages_refreshes(runs, home, monkeypatch):  # noqa: F811
    banana = runs["banana"]
    at = open_runs(page("runs"), banana)

    def unreadable(self, run_id, **kwargs):
        raise OSError("the disk went away")

    monkeypatch.setattr(Store, "read", unreadable)
    at.selectbox(key=f"runs.format.{banana}").set_value("CSV of traces").run()
    at.button(key=f"runs.prepare.{banana}").click().run()
    assert any("Export failed: OSError: the disk went away" in e.value for e in at.error)
    at.run()  # the fragment's refresh, every 2 s: the message must outlive it
    assert any("Export failed: OSError: the disk went away" in e.value for e in at.error)


def test_cancel_and_delete_from_the_runs_page(runs, home):  # noqa: F811
    store = Store(home)
    queued = store.create(spec_dict(BANANA))
    running = store.create(spec_dict(BANANA))
    store.claim(os.getpid(), running)  # as if a worker (this process) had taken it
    at = open_runs(page("runs"), queued, running)
    assert not errors(at), errors(at)
    texts = [p.proto.text for p in at.get("progress")]  # no progress written yet: the spec's
    assert "queued: waiting for a worker, 0/300 steps" in texts, texts
    at.button(key=f"runs.cancel.{queued}").click().run()
    assert store.get(queued).status == "cancelled"  # a queued run ends at once
    at.button(key=f"runs.cancel.{running}").click().run()
    record = store.get(running)
    assert record.cancel_requested and record.status == "running"  # its worker stops it
    assert any("Cancel requested" in c.value for c in at.caption)
    at.selectbox(key="runs.status").set_value("cancelled").run()
    assert list(at.dataframe[0].value["id"]) == [queued]  # the filter narrows the table
    assert at.multiselect(key="runs.open").value == [queued, running]  # and closes nothing
    at.selectbox(key="runs.status").set_value("all").run()
    at.button(key=f"runs.resume.{queued}").click().run()  # offered on cancelled runs
    assert store.get(queued).status != "cancelled"  # queued again (a worker may take it)

    banana = runs["banana"]
    at = open_runs(at, banana)
    at.button(key=f"runs.delete.{banana}").click().run()
    assert banana in {r.id for r in store.list()}  # nothing happens before the confirmation
    assert any(plain(banana) in w.value for w in at.warning)  # as Markdown shows it
    at.button(key=f"runs.delete.yes.{banana}").click().run()
    assert not errors(at), errors(at)
    assert banana not in {r.id for r in store.list()}
    assert banana not in set(at.dataframe[0].value["id"])
    assert at.multiselect(key="runs.open").value == []


def test_every_finished_run_listed_is_deleted_at_once_after_a_confirmation(runs, home):  # noqa: F811
    store = Store(home)
    queued = store.create(spec_dict(BANANA))
    failed = store.create(spec_dict(BANANA))
    store.finish(store.claim(os.getpid(), failed).id, "failed", error="boom")
    at = page("runs")
    at.selectbox(key="runs.status").set_value("completed").run()  # the filter picks them
    at.button(key="runs.delete_all").click().run()
    assert len(store.list()) == 4  # nothing happens before the confirmation
    assert any("Delete the 2 finished run(s)" in w.value for w in at.warning)
    late = store.create(spec_dict(BANANA))  # finishes after the question: not asked about
    store.finish(store.claim(os.getpid(), late).id, "completed")
    at.button(key="runs.delete_all.yes").click().run()
    assert not errors(at), errors(at)
    assert {r.id for r in store.list()} == {queued, failed, late}
    at.selectbox(key="runs.status").set_value("all").run()
    assert "the 2 finished run(s)" in at.button(key="runs.delete_all").label  # not the queued
    at.button(key="runs.delete_all").click().run()
    at.button(key="runs.delete_all.no").click().run()
    # the confirmation is gone (a queued run with no worker keeps its own notice)
    assert len(store.list()) == 3 and not [w for w in at.warning if "Delete the" in w.value]


def test_landscape_page_draws_the_runs_surface(runs, home):  # noqa: F811
    banana, mlp = runs["banana"], runs["mlp"]
    at = page("landscape")
    assert not errors(at), errors(at)
    # The newest run (the MLP) comes first; its trajectory is its snapshots.
    first = json.loads(at.json[0].value)
    assert first["run_id"] == mlp and first["source"] == "snapshots"

    at.selectbox(key="landscape.run").set_value(banana).run()
    assert not errors(at), errors(at)
    expected = surfaces.compute(
        Store(home), banana, directions="pca", components=(1, 2), grid=41, reference="auto"
    )
    facts = json.loads(at.json[0].value)
    assert facts["run_id"] == banana and facts["grid"] == 41 and facts["components"] == [1, 2]
    assert facts["centre_loss"] == pytest.approx(expected["centre_loss"], rel=1e-12)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["centre loss L(θ*)"] == table.number(expected["centre_loss"])
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert len(charts) == 4  # spectrum, surface, contour, sweeps
    spectrum, surface, contour = charts[:3]
    ratio = expected["explained_variance_ratio"]
    np.testing.assert_allclose(values(spectrum["data"][0]["y"]), ratio, rtol=1e-12)
    np.testing.assert_allclose(values(spectrum["data"][1]["y"]), ratio[[0, 1]], rtol=1e-12)
    assert surface["data"][0]["type"] == "surface" and contour["data"][0]["type"] == "contour"
    assert len(contour["data"]) == 1 + 6  # the grid and the six chains on top
    assert at.get("download_button")

    # Bad options: an inline error naming the field, no figures.
    at.selectbox(key="landscape.preset").set_value("custom").run()
    at.text_input(key="landscape.components").set_value("1,3").run()
    assert not at.exception and any("components" in e.value for e in at.error), errors(at)
    assert not at.get("plotly_chart")
    at.text_input(key="landscape.components").set_value("1,2").run()
    at.number_input(key="landscape.grid").set_value(40).run()
    assert not at.exception and any("grid" in e.value for e in at.error), errors(at)
    # A range that is not a number names the field and keeps the options drawn after it
    at.number_input(key="landscape.grid").set_value(41).run()
    at.selectbox(key="landscape.reference").set_value("mean").run()
    at.selectbox(key="landscape.domain").set_value("custom").run()
    at.text_input(key="landscape.range").set_value("abc").run()
    message = "**range**: must be a number > 0, got 'abc'"
    assert any(message in e.value for e in at.error), errors(at)
    assert at.selectbox(key="landscape.reference").value == "mean"
    at.text_input(key="landscape.range").set_value("2").run()
    assert not errors(at), errors(at)
    assert at.selectbox(key="landscape.reference").value == "mean"
    assert json.loads(at.json[0].value)["reference"] == "mean"


def test_landscape_page_says_which_chains_diverged(home):  # noqa: F811
    from test_surface import run_with_a_diverged_chain

    run_with_a_diverged_chain(home)
    at = page("landscape")
    assert not errors(at), errors(at)
    assert any("1 chain(s) diverged" in w.value for w in at.warning)
    assert json.loads(at.json[0].value)["diverged_chains"] == 1
