"""The Networks & LLC and DLN benchmark pages: widgets from the registries, an LLC run whose
displayed estimate is the store's, inline errors that queue nothing, calibration and DLN sweeps.
The chart builders are checked against numbers computed here."""

from __future__ import annotations

import base64
import json
from typing import get_args

import numpy as np
import pytest
from apptest import errors, no_pool, page, run_queued  # noqa: F401 (no_pool: a fixture)

import charts
import landscapes
import samplers
from runs.spec import LLCOptions
from runs.store import Store
from studies import dln, sweeps

pytestmark = pytest.mark.usefixtures("no_pool")  # the pages' runs are executed here

NETWORKS = [n for n, s in landscapes.REGISTRY.items() if s.kind == "network"]
GRADIENT = [n for n, s in samplers.REGISTRY.items() if s.kind == "sgmcmc"]


def figures(at) -> list[dict]:
    """Every plotly chart on the page, as its figure JSON."""
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def values(v) -> list:
    """A figure JSON array: plotly writes numpy arrays as base64 typed arrays."""
    if isinstance(v, dict):
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"]).tolist()
    return list(v)


def titled(at, prefix: str) -> dict:
    found = [
        f for f in figures(at) if f["layout"].get("title", {}).get("text", "").startswith(prefix)
    ]
    assert found, f"no figure titled {prefix!r}"
    return found[0]


def small_rrr(at):
    """rrr on 1000 points from its true point (no training), 2 chains x 200 steps."""
    at.selectbox(key="net.target_name").set_value("rrr").run()
    at.text_input(key="net.target.rrr.n").input("1000")
    at.selectbox(key="net.llc.rrr.w0").set_value("truth")
    at.number_input(key="net.chains").set_value(2)
    at.number_input(key="net.steps").set_value(200)
    at.number_input(key="net.burn_in").set_value(100)
    return at.run()


def test_pages_render_with_widgets_from_the_registries(home):
    at = page("networks")
    assert not at.exception
    assert at.selectbox(key="net.target_name").options == NETWORKS
    assert at.selectbox(key="net.sampler_name").options == GRADIENT
    w0_choices = list(get_args(LLCOptions.model_fields["w0"].annotation))
    assert at.selectbox(key="net.llc.dln.w0").options == w0_choices
    at.selectbox(key="net.target_name").set_value("rrr").run()
    assert float(at.text_input(key="net.sampler.rrr.sgld.step_size").value) == 1e-4
    at.selectbox(key="net.sampler_name").set_value("sghmc").run()
    assert not errors(at)
    keys = {w.key for w in [*at.text_input, *at.number_input, *at.selectbox, *at.checkbox]}
    for p in landscapes.REGISTRY["rrr"].params:
        assert f"net.target.rrr.{p.name}" in keys
    for p in samplers.REGISTRY["sghmc"].params:
        assert f"net.sampler.rrr.sghmc.{p.name}" in keys
    for field in LLCOptions.model_fields:
        assert f"net.llc.rrr.{field}" in keys
    assert "d = 27 parameters" in " ".join(c.value for c in at.caption)  # 5x3 + 3x4

    at = page("dln_benchmark")
    assert not errors(at)
    assert at.selectbox(key="dln.size_class").options == list(
        landscapes.REGISTRY["dln"].param("size_class").choices
    )
    assert at.multiselect(key="dln.samplers").options == GRADIENT


def test_the_dln_default_run_does_not_diverge(home):
    """The page opens on the DLN. With the networks' generic step size (1e-5) every chain of
    its default run diverged; its own default (1e-7 from its generating point, inside the stable
    range of docs/methods/local-sampling.md) keeps them all. Shortened to 2 chains x 200 steps."""
    at = page("networks")
    assert at.selectbox(key="net.target_name").value == "dln"
    assert at.selectbox(key="net.llc.dln.w0").value == "truth"
    assert float(at.text_input(key="net.sampler.dln.sgld.step_size").value) == 1e-7
    assert at.text_input(key="cal.step_sizes.dln.sgld").value == "1e-08, 1e-07, 1e-06"
    at.number_input(key="net.chains").set_value(2)
    at.number_input(key="net.steps").set_value(200)
    at.number_input(key="net.burn_in").set_value(100)
    at.run().button(key="net.run").click().run()
    assert not errors(at)
    (run,) = run_queued(home).list()
    assert run.status == "completed", run.error
    assert run.summary["diverged_chains"] == 0
    assert np.all(np.isfinite(run.summary["observables"]["llc"]["per_chain"]))


def test_adam_sgld_s_default_run_lands_near_the_truth(home):
    """RMSProp- and Adam-SGLD start at a x SGLD's step (their step eps / (sqrt(v) + a) reaches
    eps / a near w0). At SGLD's own step (1e-4) Adam's estimate on rrr was 20.8 of 8, above
    d/2 = 13.5; at 1e-5 it is 8.1 (seed 0; 8.6 at seed 1)."""
    at = page("networks")
    at.selectbox(key="net.target_name").set_value("rrr").run()
    at.selectbox(key="net.sampler_name").set_value("adam-sgld").run()
    assert float(at.text_input(key="net.sampler.rrr.adam-sgld.step_size").value) == 1e-5
    assert at.text_input(key="cal.step_sizes.rrr.adam-sgld").value == "1e-06, 1e-05, 0.0001"
    at.button(key="net.run").click().run()
    assert not errors(at)
    (run,) = run_queued(home).list()
    assert run.status == "completed", run.error
    llc = run.summary["observables"]["llc"]
    assert abs(llc["mean"] - llc["true"]) < 0.25 * llc["true"] and llc["true"] == 8
    assert not {w["code"] for w in llc["warnings"]} & {"above_max", "nan", "spikes"}


def test_llc_run_shows_the_stores_estimate(home):
    at = small_rrr(page("networks"))
    at.button(key="net.run").click().run()
    assert not errors(at)
    (run,) = run_queued(home).list()
    assert run.spec["observables"] == ["llc"] and run.spec["llc"]["w0"] == "truth"
    assert run.spec["sampler"]["params"]["localization"] == 1.0
    assert run.status == "completed", run.error
    at.run()
    assert not errors(at)
    est = Store(home).get(run.id).summary["observables"]["llc"]
    flushes = Store(home).read(run.id, series="flushes")

    figure = titled(at, "LLC estimate")
    mean = next(t for t in figure["data"] if t["name"] == "mean over chains")
    assert values(mean["x"])[-1] == flushes["step"][-1] == 199
    assert values(mean["y"])[-1] == pytest.approx(np.mean(est["per_chain"]), rel=1e-9)
    true_line = [s for s in figure["layout"]["shapes"] if s["type"] == "line"]
    assert true_line[0]["y0"] == est["true"] == 8.0

    shown = at.metric[0].value.split("±")
    assert float(shown[0]) == pytest.approx(est["mean"], rel=5e-4)
    assert float(shown[1]) == pytest.approx(est["se"], rel=5e-2)
    per_chain = at.dataframe[1].value["λ̂"].tolist()
    assert per_chain == pytest.approx(est["per_chain"], rel=1e-12)


def test_a_classification_run_shows_its_posterior_predictive_metrics(home):
    """The checkbox (classification networks only) adds the "predictive" observable; the
    finished run's metrics are the summary's, each with what it means."""
    at = small_rrr(page("networks"))
    assert "net.predictive" not in {c.key for c in at.checkbox}  # rrr: a regression network
    at.selectbox(key="net.target_name").set_value("mlp").run()
    at.selectbox(key="net.target.mlp.dataset").set_value("moons").run()
    at.text_input(key="net.target.mlp.hidden_sizes").input("4")
    at.selectbox(key="net.llc.mlp.w0").set_value("init")
    at.checkbox(key="net.predictive").check().run()
    at.button(key="net.run").click().run()
    assert not errors(at), errors(at)
    store = Store(home)
    (run,) = store.list()
    assert run.spec["observables"] == ["llc", "predictive"]
    run_queued(home)
    at.run()
    assert not errors(at), errors(at)
    block = store.get(run.id).summary["observables"]["predictive"]
    table = next(d.value for d in at.dataframe if "meaning" in d.value.columns)
    assert list(table["metric"]) == [
        "ensemble log p",
        "mean single-draw log p",
        "accuracy",
        "ECE",
        "confidence",
        "curvature",
        "draws",
    ]
    shown = dict(zip(table["metric"], table["value"], strict=True))
    assert float(shown["ensemble log p"]) == pytest.approx(block["log_p"], rel=1e-5)
    assert float(shown["accuracy"]) == pytest.approx(block["accuracy"], rel=1e-5)
    assert int(shown["draws"]) == block["draws"] == 2 * 100
    assert all(table["meaning"].str.len() > 10)


def test_bad_values_show_inline_errors_and_queue_nothing(home):
    at = small_rrr(page("networks"))
    at.text_input(key="net.sampler.rrr.sgld.step_size").set_value("-1").run()
    assert any("step_size" in e for e in errors(at))
    at.button(key="net.run").click().run()
    assert any("nothing was queued" in e for e in errors(at))
    assert not at.exception

    at.text_input(key="net.sampler.rrr.sgld.step_size").set_value("1e-5")
    at.number_input(key="net.burn_in").set_value(200).run()  # burn-in must stay below steps
    at.button(key="net.run").click().run()
    assert any("burn_in" in e for e in errors(at))
    at.text_input(key="cal.step_sizes.rrr.sgld").set_value("1e-5, abc").run()
    assert any("step_sizes" in e for e in errors(at))
    assert Store(home).list() == [] and Store(home).list_sweeps() == []


def test_calibration_sweep_is_queued_with_its_grid(home):
    at = small_rrr(page("networks"))
    at.text_input(key="cal.step_sizes.rrr.sgld").set_value("1e-6, 1e-5")
    at.button(key="cal.run").click().run()
    assert not errors(at)
    store = Store(home)
    (sweep,) = store.list_sweeps()
    assert sweep["kind"] == "calibrate" and len(sweep["cells"]) == 2
    assert sorted(c["step_size"] for c in sweep["cells"]) == [1e-6, 1e-5]
    for cell in sweep["cells"]:
        spec = store.get(cell["run_id"]).spec
        assert spec["sampler"]["params"]["step_size"] == cell["step_size"]
        assert spec["target"]["name"] == "rrr" and spec["observables"] == ["llc"]
    grid = titled(at, "Calibration")
    titles = [a["text"] for a in grid["layout"]["annotations"]]
    assert len(titles) == 2 and titles[0].startswith("ε = 1e-06, nβ = 144.8")
    store.delete(sweep["cells"][1]["run_id"])  # from the Runs page: the sweep counts it done
    (bar,) = at.run().get("progress")
    assert not errors(at), errors(at)  # the grid draws the cell that is left
    assert "1 deleted" in bar.proto.text and sweeps.progress(store, sweep)["done"] >= 1


def test_dln_sweep_fills_in_its_plots_and_is_deleted(home):
    at = page("dln_benchmark")
    at.number_input(key="dln.problems").set_value(1)
    at.multiselect(key="dln.samplers").set_value(["sgld"])
    at.text_input(key="dln.step_sizes").set_value("1e-6")
    at.number_input(key="dln.steps").set_value(200)
    at.number_input(key="dln.n").set_value(1000)
    at.button(key="dln.launch").click().run()
    assert not errors(at)
    store = Store(home)
    (sweep,) = store.list_sweeps()
    assert sweep["kind"] == "dln" and len(sweep["cells"]) == 1
    run_queued(home)
    at.run()
    assert not errors(at)
    (metric,) = dln.results(store, store.get_sweep(sweep["id"]))["metrics"]
    trace = titled(at, "Relative error")["data"][0]
    assert trace["name"] == "sgld" and values(trace["x"]) == [1e-6]
    assert values(trace["y"])[0] == pytest.approx(metric["relative_error_mean"])
    chains, runs = titled(at, "NaN fraction")["data"][:2]
    assert values(chains["y"]) == [metric["nan_fraction"]]
    assert values(runs["y"]) == [metric["nan_run_fraction"]] and "runs" in runs["name"]
    at.button(key="dln.delete").click().run()
    assert store.list_sweeps() == [] and store.list() == []


def test_a_dln_step_size_out_of_range_names_the_field_and_the_range(home):
    at = page("dln_benchmark")
    at.text_input(key="dln.step_sizes").set_value("1e-6, 99").run()  # SGLD's step: at most 10
    assert any("sweep.step_sizes" in e and "99" in e and "10" in e for e in errors(at))
    at.button(key="dln.launch").click().run()
    assert Store(home).list_sweeps() == [] and Store(home).list() == []


def test_dln_sweep_over_the_memory_budget_is_refused_before_queuing(home, monkeypatch):
    monkeypatch.setenv("BASIN_MEMORY_BUDGET", str(2**10))
    at = page("dln_benchmark")
    at.number_input(key="dln.problems").set_value(1)
    at.button(key="dln.launch").click().run()
    assert any("memory" in e and "budget" in e for e in errors(at))
    assert Store(home).list_sweeps() == [] and Store(home).list() == []


def test_llc_figure_band_and_calibration_marks():
    per_chain = np.array([[np.nan, np.nan, np.nan], [1.0, 2.0, 6.0], [2.0, np.nan, 4.0]])
    figure = charts.llc_figure([0, 100, 200], per_chain, true=3.0, band="se")
    band = next(t for t in figure.data if t.name == "mean ± SE over chains")
    se = np.std([1.0, 2.0, 6.0], ddof=1) / np.sqrt(3)
    assert band.y[1] == pytest.approx(3.0 + se) and band.y[-2] == pytest.approx(3.0 - se)
    assert band.y[0] is None  # nothing finite before the burn-in ends
    mean = next(t for t in figure.data if t.name == "mean over chains")
    assert mean.y[2] == 3.0  # the diverged chain is left out

    curve = {"step": [1, 2], "llc": [1.0, 1.1], "flush_step": [2], "distance": [0.1]}
    cells = [
        {"step_size": 1e-5, "nbeta": None, "nbeta_value": 10.0, "flags": [], "curve": curve},
        {"step_size": 1e-4, "nbeta": None, "nbeta_value": 10.0, "flags": ["nan"], "curve": curve},
    ]
    grid = charts.calibration_grid(cells, {"10.0": 1e-5}, step_sizes=[1e-6, 1e-5, 1e-4])
    notes = [(a.text.split("<br>")[1], a.font.color) for a in grid.layout.annotations]
    assert notes == [
        ("queued", "gray"),
        ("stable · recommended", "#2ca02c"),
        ("⚠ nan", "#d62728"),
    ]
    frames = [s for s in grid.layout.shapes if s.type == "rect"]
    assert len(frames) == 1 and frames[0].xref == "x2 domain"
