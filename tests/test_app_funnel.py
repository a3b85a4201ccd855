"""The Funnel page (AppTest): Yu et al.'s funnel protocol queued one run per metric, the paper's
table before any run, and a small finished experiment whose figures and tail table carry the
store's numbers. No worker is started (BASIN_NO_WORKERS=1): the runs are executed here."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from apptest import array, errors, figures, page

import charts
import landscapes
from runs.loop import execute
from runs.spec import parse_spec
from runs.store import Store
from studies import diagnostics, funnel


@pytest.fixture
def no_workers(home, monkeypatch):
    monkeypatch.setenv("BASIN_NO_WORKERS", "1")
    return home


def run_all(store: Store) -> list:
    """Execute every queued run here (eagerly: short runs), and finish it as a worker would."""
    for run in store.list():
        spec = parse_spec(run.spec).model_copy(update={"compile": "never"})
        summary = execute(spec, store, run.id)
        store.finish(run.id, summary["status"], summary=summary)
    return store.list()


def test_run_queues_the_papers_protocol_one_run_per_metric(no_workers):
    at = page("funnel")
    assert not errors(at), errors(at)
    assert at.multiselect(key="fun.metrics").value == list(funnel.PROTOCOL)
    assert "wenzel" in at.multiselect(key="fun.metrics").options
    table = at.dataframe[0].value  # before any run: the truth and the paper's rows
    assert list(table["metric"]) == ["truth", *funnel.REFERENCE]
    for metric, values in funnel.REFERENCE.items():
        row = table[table["metric"] == metric].iloc[0]
        assert [row[c] for c in funnel.COLUMNS] == pytest.approx(values)
    for metric, params in funnel.PROTOCOL.items():
        assert (
            float(at.text_input(key=f"fun.{metric}.sgrld.step_size").value) == params["step_size"]
        )
    assert float(at.text_input(key="fun.monge.sgrld.alpha2").value) == 0.1

    at.text_input(key="fun.chains").input("4")
    at.text_input(key="fun.steps").input("2000")
    at.text_input(key="fun.shampoo.sgrld.step_size").input("-1").run()
    at.button(key="fun.run").click().run()
    assert any("step_size" in e for e in errors(at)) and Store(no_workers).list() == []
    at.text_input(key="fun.shampoo.sgrld.step_size").input("0.003").run()
    at.button(key="fun.run").click().run()
    assert not errors(at), errors(at)
    runs = Store(no_workers).list()
    specs = {r.spec["sampler"]["params"]["metric"]: r.spec for r in runs}
    assert sorted(specs) == sorted(funnel.PROTOCOL) and len(runs) == 4
    for metric, spec in specs.items():  # the paper's protocol, one seed and budget
        assert spec == parse_spec(funnel.spec(metric, 4, 2000, 1)).model_dump(mode="json")
    assert at.selectbox(key="fun.shown").value == ",".join(
        r.id for r in sorted(runs, key=lambda r: r.created)
    )


def test_a_finished_experiment_shows_its_histograms_and_tails(no_workers):
    at = page("funnel")
    at.multiselect(key="fun.metrics").set_value(["identity", "monge"]).run()
    at.text_input(key="fun.chains").input("4")
    at.text_input(key="fun.steps").input("300")
    at.button(key="fun.run").click().run()
    store = Store(no_workers)
    runs = {r.spec["sampler"]["params"]["metric"]: r for r in run_all(store)}
    assert all(r.status == "completed" for r in runs.values()), [r.error for r in runs.values()]
    at.run()
    assert not errors(at), errors(at)
    shown = figures(at)
    target = landscapes.make("softplus-funnel", dtype="float64", gradient_noise=1.0)
    for metric, run in runs.items():
        data = store.read(run.id, names=["position"])["position"]
        kept = data[diagnostics.burn_records(run.spec) :].reshape(-1, 2)
        neck = shown[f"{metric}: draws over log p, v against N(0, 80)"]
        bars = next(t for t in neck["data"] if t["type"] == "bar")
        edges = charts.histogram_edges(*funnel.V_RANGE, funnel.V_BINS)
        np.testing.assert_allclose(array(bars["x"]), charts.histogram_density(kept[:, 1], edges))
        dots = next(t for t in neck["data"] if t["type"] == "scatter" and "draws" in t["name"])
        assert len(array(dots["x"])) == min(1000, len(kept))
        theta = shown[f"{metric}: θ1"]
        exact = next(t for t in theta["data"] if t["type"] == "scatter")
        x_edges = charts.histogram_edges(*funnel.X_RANGE, 56)
        mass = np.diff(target.x_cdf(torch.from_numpy(x_edges)).numpy())
        np.testing.assert_allclose(array(exact["y"])[::2], mass / np.diff(x_edges), rtol=1e-9)
        assert f"{metric}: trace of v" in shown

    table = at.dataframe[0].value
    assert list(table["metric"]) == ["truth", "identity", "identity", "monge", "monge"]
    for metric, run in runs.items():
        data = store.read(run.id, names=["position"])["position"]
        kept = data[diagnostics.burn_records(run.spec) :]
        rows = table[table["metric"] == metric]
        ours = rows[rows["source"].str.startswith("Basin")].iloc[0]
        expected = funnel.tails(kept[..., 1], kept[..., 0])
        assert [ours[c] for c in funnel.COLUMNS] == pytest.approx(list(expected.values()))
        paper = rows[rows["source"] == funnel.PAPER].iloc[0]
        assert [paper[c] for c in funnel.COLUMNS] == pytest.approx(funnel.REFERENCE[metric])
    captions = " ".join(c.value for c in at.caption)
    assert "no metric reaches the neck" in captions and "Gamma" in captions


def test_suspect_tails_are_the_ones_far_from_the_truth():
    basin = [("monge", "Basin", dict(funnel.TRUTH, **{"v min": -30}))]
    rows, flags = funnel.table(basin, metrics=())
    assert [r["source"] for r in rows][1:] == ["Basin", funnel.PAPER]
    assert flags[0] == [] and flags[1] == []  # the truth itself is never suspect
    assert flags[2] == ["P(v<-5)", "P(v<-10)", "KS vs N(0,80)"]  # the paper's monge
    assert funnel.suspect("v min", -15.0) and not funnel.suspect("v min", -21.0)
    assert funnel.suspect("KS vs N(0,80)", 0.06) and not funnel.suspect("v sd", 8.5)


def test_the_pages_default_experiment_is_queued_by_the_first_click(no_workers):
    """Issue 60, item 16: 4 metrics x 32 chains x 200,000 steps was ~342 MiB and ~430 s, over
    both budgets, so the first Run said "nothing was queued". The page's default now fits them,
    and says the paper's scale beside it."""
    at = page("funnel")
    assert not at.warning, [w.value for w in at.warning]  # no "Over budget" before the click
    at.button(key="fun.run").click().run()
    assert not errors(at), errors(at)
    runs = Store(no_workers).list()
    assert sorted(r.spec["sampler"]["params"]["metric"] for r in runs) == sorted(funnel.PROTOCOL)
    assert {(r.spec["chains"], r.spec["steps"]) for r in runs} == {(funnel.CHAINS, 20_000)}
    captions = " ".join(c.value for c in at.caption)
    assert "32 chains × 200,000 steps" in captions and "Run anyway" in captions


@pytest.mark.slow
def test_every_pages_run_button_queues_its_default_experiment(no_workers):
    """Each page's primary button (Run, Launch, Run the study, ...) at the page's defaults
    queues runs, with no error: none is over the budget on the first click."""
    buttons = {
        "funnel": "fun.run",
        "playground": "pg.run",
        "compare": "cmp.run",
        "networks": ("net.run", "cal.run", "vi.run"),
        "dln_benchmark": "dln.launch",
        "integrators": "ord.launch",
        "wide_networks": "wide.run",
    }
    store = Store(no_workers)
    for name, keys in buttons.items():
        for key in (keys,) if isinstance(keys, str) else keys:
            before = len(store.list())
            at = page(name)
            at.button(key=key).click().run()
            assert not errors(at), (name, key, errors(at))
            assert len(store.list()) > before, (name, key)
