"""The Playground and Compare pages (AppTest): widgets from the registries, bad input refused
inline with no run created, and short runs whose figures and tables carry the right numbers
(the funnel's exact N(0, 9) neck, the store's acceptance, ESS and per-step verdicts)."""

from __future__ import annotations

import base64
import json
import math

import numpy as np
import pytest
from apptest import errors, no_pool, page, run_queued, verdicts  # noqa: F401 (no_pool: a fixture)

import charts
import landscapes
import samplers
from landscapes import Spec
from runs.store import Store
from samplers.explain import EXPLAIN, explain

pytestmark = pytest.mark.usefixtures("no_pool")  # runs executed here (`home`: a conftest fixture)

WIDGETS = ("text_input", "number_input", "checkbox", "selectbox")


def keyed(at, prefix: str) -> dict[str, str]:
    """Widgets whose key starts with ``prefix``: parameter name -> label."""
    out = {}
    for kind in WIDGETS:
        for w in getattr(at, kind):
            if w.key and w.key.startswith(prefix):
                out[w.key.removeprefix(prefix)] = w.label
    return out


def registry_labels(spec: Spec, skip=()) -> dict[str, str]:
    return {
        p.name: f"{p.name} ({p.unit})" if p.unit else p.name
        for p in spec.params
        if p.name not in skip
    }


def array(value) -> np.ndarray:
    """A plotly trace array from a chart's JSON: a list, or {"dtype", "bdata"} (base64)."""
    if isinstance(value, dict):
        data = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        return data.reshape(value["shape"]) if "shape" in value else data
    return np.asarray(value, dtype=float)


def figures(at) -> dict[str, dict]:
    """Plotly charts on the page by title."""
    out = {}
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        out[(spec["layout"].get("title") or {}).get("text", "")] = spec
    return out


# -- samplers.explain and charts.runs ---------------------------------------------------------


def test_every_registered_sampler_is_explained_with_its_paper(monkeypatch):
    for name, spec in samplers.REGISTRY.items():
        latex, paragraph = EXPLAIN[name]
        assert latex.strip() and paragraph.strip()
        assert spec.paper in paragraph
        assert explain(name) == (latex, paragraph)
    toy = Spec("toy", "mcmc", "A toy kernel.", "Nobody (2099)", (), lambda **kw: None)
    monkeypatch.setitem(samplers.REGISTRY, "toy", toy)
    latex, paragraph = explain("toy")
    assert latex == "" and "A toy kernel." in paragraph and "Nobody (2099)" in paragraph
    with pytest.raises(KeyError, match="unknown sampler"):
        explain("no-such-sampler")


def test_histogram_density_is_normalised_over_all_draws():
    edges = charts.histogram_edges(-1.0, 1.0, 4)
    density = charts.histogram_density([-0.9, -0.1, 0.2, 0.3, 5.0, np.nan], edges)
    # 5 finite draws, one out of range, bins of width 0.5: the bars integrate to 4/5.
    np.testing.assert_allclose(density, [0.4, 0.4, 0.8, 0.0])
    assert (density * np.diff(edges)).sum() == pytest.approx(0.8)


def test_histogram_of_degenerate_or_huge_ranges_has_its_draws_in_a_bar():
    # Constant draws, however large, two draws a few ulp apart, and a range past 1.8e308:
    # every bin has a width and the bars integrate to 1 over the draws they hold.
    for draws in ([1e20] * 5, [1.0, 1.0 + 1e-15], [-1e308, 1e308], [0.0] * 3):
        fig = charts.histogram_figure(np.asarray(draws))
        bar = fig.data[0]
        assert np.all(np.asarray(bar.width) > 0)
        assert np.sum(np.asarray(bar.y) * np.asarray(bar.width)) == pytest.approx(1.0)


# -- Playground -------------------------------------------------------------------------------


def test_playground_widgets_are_the_registry_params(home):
    at = page("playground")
    for name in ("funnel", "custom", "normal-crossing", "banana"):
        at.selectbox(key="pg.target_name").select(name).run()
        assert not errors(at), errors(at)
        # dim is pinned to 2: the playground draws the plane.
        want = registry_labels(landscapes.REGISTRY[name], skip=("dim",))
        assert keyed(at, f"pg.target.{name}.") == want
    for name in ("mala", "hmc", "sghmc", "splitting"):
        at.selectbox(key="pg.sampler_name").select(name).run()
        assert keyed(at, f"pg.sampler.{name}.") == registry_labels(samplers.REGISTRY[name])
        assert len(at.latex) >= 2  # the update equation beside the controls, and below
    assert not errors(at)


def test_playground_bad_input_is_inline_and_queues_nothing(home):
    at = page("playground")
    at.selectbox(key="pg.sampler_name").select("mala").run()
    at.text_input(key="pg.sampler.mala.step_size").input("-1").run()
    assert any("step_size" in e for e in errors(at)), errors(at)
    at.button(key="pg.run").click().run()
    assert not at.exception
    assert Store(home).list() == []

    at.text_input(key="pg.sampler.mala.step_size").input("0.1").run()
    at.selectbox(key="pg.target_name").select("custom").run()
    at.text_input(key="pg.target.custom.formula").input("x +* y").run()
    assert any("custom.formula" in e for e in errors(at)), errors(at)
    at.button(key="pg.run").click().run()
    assert not at.exception
    assert Store(home).list() == []
    # what the user typed is quoted as text: Markdown made '__import__' a bold 'import'
    at.text_input(key="pg.target.custom.formula").input("__import__('os')").run()
    shown = "**custom.formula**: '\\_\\_import\\_\\_' is not an allowed function"
    assert any(e.startswith(shown) for e in errors(at)), errors(at)


def test_playground_run_shows_the_funnel_neck_against_the_exact_marginal(home):
    at = page("playground")
    at.selectbox(key="pg.target_name").select("funnel").run()
    at.selectbox(key="pg.sampler_name").select("mala").run()
    at.text_input(key="pg.sampler.mala.step_size").input("0.3").run()
    at.text_input(key="pg.chains").input("16").run()
    at.text_input(key="pg.steps").input("300").run()
    at.button(key="pg.run").click().run()
    assert not errors(at), errors(at)
    (run,) = Store(home).list()
    assert run.spec["target"] == {"name": "funnel", "params": {"dim": 2, "gradient_noise": 0.0}}
    assert run.spec["sampler"]["name"] == "mala"
    assert run.spec["sampler"]["params"]["step_size"] == 0.3
    assert (run.spec["chains"], run.spec["steps"], run.spec["burn_in"]) == (16, 300, 30)

    (run,) = run_queued(home).list()
    assert run.status == "completed", run.error
    at.run()
    assert not errors(at), errors(at)
    shown = figures(at)
    assert {"Marginal of x", "Marginal of v", "Trace of x", "Trace of v"} <= set(shown)
    curve = next(t for t in shown["Marginal of v"]["data"] if t["name"].startswith("exact"))
    x, y = array(curve["x"]), array(curve["y"])
    assert np.interp(0.0, x, y) == pytest.approx(1 / math.sqrt(2 * math.pi * 9), abs=1e-6)
    bars = next(t for t in shown["Marginal of v"]["data"] if t["type"] == "bar")
    assert len(array(bars["y"])) == 60

    summary = run.summary
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["acceptance"] == f"{summary['acceptance']:.3g}"
    table = at.dataframe[0].value
    assert list(table["coordinate"]) == ["x", "v"]
    np.testing.assert_allclose(table["ESS bulk"], summary["coordinates"]["ess_bulk"])
    np.testing.assert_allclose(table["R-hat"], summary["coordinates"]["rhat"])
    assert table["exact P(< t)"][1] == pytest.approx(0.158655, abs=1e-5)  # P(v < -3) = Phi(-1)

    # The animated view: the first steps traced with every proposal, played in the browser
    # (tests/test_browser_animation.py plays it)
    assert run.spec["record"]["animate"] == 300  # every step of this 300-step run
    assert any(c.value.startswith("**Animated**: the first 300 steps") for c in at.caption)
    assert not errors(at), errors(at)


def test_a_run_whose_every_chain_diverged_says_so(home):
    """SGLD at step 5 on N(0, 1): each step multiplies w by 1 - 5/2 = -1.5 plus noise, so every
    chain's loss overflows float32 within ~110 steps; the page says that nothing is left."""
    at = page("playground")
    at.text_input(key="pg.sampler.sgld.step_size").input("5").run()
    at.text_input(key="pg.chains").input("4").run()
    at.text_input(key="pg.steps").input("300").run()
    at.button(key="pg.run").click().run()
    (run,) = run_queued(home).list()
    assert run.status == "completed" and run.summary["diverged_chains"] == 4, run
    at.run()
    assert not at.exception
    (shown,) = verdicts(at)  # in red, with what to try
    assert shown in [e.value for e in at.error] and "verdict **fail**" in shown
    assert "every chain diverged (NaN/Inf): there are no draws" in shown
    assert "a smaller step" in shown and "(e.g. 2.5)" in shown


def test_a_run_of_a_kernel_with_a_known_bias_says_so_instead_of_a_green_completed(home):
    """RMSProp-SGLD drops the metric's Gamma term (samplers/rmsprop_sgld.py): its run completes, but
    the page warns about the bias rather than reporting a plain success."""
    at = page("playground")
    at.selectbox(key="pg.sampler_name").select("rmsprop-sgld").run()
    at.text_input(key="pg.chains").input("4").run()
    at.text_input(key="pg.steps").input("100").run()
    at.button(key="pg.run").click().run()
    (run,) = run_queued(home).list()
    assert run.status == "completed" and run.summary["warnings"][0]["code"] == "dropped_gamma"
    at.run()
    assert not at.exception
    assert any("Gamma" in v and "biased" in v for v in verdicts(at))
    assert not at.success  # never a green "completed" for a biased kernel
    assert not [s.value for s in at.success if s.value == "Run completed."]


# -- Compare ----------------------------------------------------------------------------------


def test_compare_runs_each_sampler_on_one_budget(home):
    at = page("compare")
    assert not errors(at), errors(at)
    for name in ("mala", "hmc"):  # the default choice, each with its registry widgets
        assert keyed(at, f"cmp.sampler.{name}.") == registry_labels(samplers.REGISTRY[name])
    assert keyed(at, "cmp.target.funnel.") == registry_labels(landscapes.REGISTRY["funnel"])
    at.text_input(key="cmp.sampler.hmc.step_size").input("-1").run()
    assert any("step_size" in e for e in errors(at)), errors(at)
    at.button(key="cmp.run").click().run()
    assert any("hmc" in e for e in errors(at)) and Store(home).list() == []
    at.text_input(key="cmp.target.funnel.dim").input("2").run()
    at.text_input(key="cmp.chains").input("16").run()
    at.text_input(key="cmp.steps").input("300").run()
    at.multiselect(key="cmp.samplers").set_value(["mala", "rwmh"]).run()
    at.text_input(key="cmp.sampler.rwmh.step_size").input("1").run()
    at.button(key="cmp.run").click().run()
    assert not errors(at), errors(at)
    runs = Store(home).list()
    assert sorted(r.spec["sampler"]["name"] for r in runs) == ["mala", "rwmh"]
    budget = {(r.spec["seed"], r.spec["chains"], r.spec["steps"], r.spec["burn_in"]) for r in runs}
    assert budget == {(0, 16, 300, 30)}
    target = {"name": "funnel", "params": {"dim": 2, "gradient_noise": 0.0}}
    assert all(r.spec["target"] == target for r in runs)

    runs = run_queued(home).list()
    assert all(r.status == "completed" for r in runs), [r.error for r in runs]
    at.run()
    assert not errors(at), errors(at)
    table = at.dataframe[0].value
    assert sorted(table["sampler"]) == ["mala", "rwmh"]
    by_name = {r.spec["sampler"]["name"]: r.summary for r in runs}
    for _, row in table.iterrows():
        assert row["acceptance"] == pytest.approx(by_name[row["sampler"]]["acceptance"])
        assert row["ESS bulk (v)"] == pytest.approx(
            by_name[row["sampler"]]["coordinates"]["ess_bulk"][1]
        )
    histogram = figures(at)["Marginal of v: every sampler on the same bins"]
    bars = [t for t in histogram["data"] if t["type"] == "bar"]
    assert [b["name"] for b in bars] == ["mala", "rwmh"] or [b["name"] for b in bars] == [
        "rwmh",
        "mala",
    ]
    np.testing.assert_array_equal(array(bars[0]["x"]), array(bars[1]["x"]))


def test_views_read_an_even_subsample_of_the_draws_after_burn_in():
    from studies.diagnostics import even_sample

    rng = np.random.default_rng(0)
    position = rng.normal(size=(1000, 8, 2))
    diverged = np.zeros((1000, 8), bool)
    diverged[600:, 3] = True  # chain 3 diverged at record 600: left out throughout
    sample, every, total = even_sample(position, diverged, burn=100, limit=1000)
    assert total == 900 * 7 and every == 7  # ceil(6300 / 1000)
    good = [0, 1, 2, 4, 5, 6, 7]
    np.testing.assert_array_equal(sample, position[100::7][:, good])
    assert sample.size // 2 <= 1000
    whole, every, total = even_sample(position, diverged, burn=100)
    assert every == 1 and whole.shape == (900, 7, 2)
    assert even_sample(position[:50], diverged[:50], burn=100)[2] == 0  # all still burn-in


def test_the_ks_bound_counts_no_more_effective_draws_than_the_sample_tested_has():
    from studies.diagnostics import ks_bound

    c = math.sqrt(-math.log(0.001 / 2) / 2)  # the Kolmogorov quantile at alpha = 0.001
    # a run with an ESS of 10^6 whose KS distance is taken on an even subsample of 10^5 draws
    assert ks_bound(1e6, 100_000, 20_000) == pytest.approx(c * math.sqrt(1e-5 + 1 / 20_000))
    # an ESS below the sample's size is the sample's effective count
    assert ks_bound(5e3, 100_000, 20_000) == pytest.approx(c * math.sqrt(1 / 5e3 + 1 / 20_000))
    assert ks_bound(None, 100, 20_000) is None and ks_bound(float("nan"), 100, 20_000) is None


def test_runs_keep_at_most_twenty_million_draws_unless_told():
    from studies.diagnostics import auto_thin

    assert auto_thin(32, 2000) == 1 and auto_thin(2000, 10_000) == 1  # 2e7 draws: all kept
    assert auto_thin(2001, 10_000) == 2 and auto_thin(4096, 100_000) == 21  # ceil(20.48)


def test_compare_offers_sgrld_s_metrics_and_labels_them_apart(home):
    """Two runs of one sampler (sgrld in two metrics) are two entries, two histograms, two
    traces and two table rows: keyed by the sampler's name, the second overwrote the first."""
    from studies import compare

    at = page("compare")
    options = at.multiselect(key="cmp.samplers").options
    assert {f"sgrld · {m}" for m in ("identity", "rmsprop", "wenzel", "monge", "shampoo")} <= set(
        options
    )
    at.text_input(key="cmp.target.funnel.dim").input("2").run()
    at.text_input(key="cmp.chains").input("4").run()
    at.text_input(key="cmp.steps").input("200").run()
    at.multiselect(key="cmp.samplers").set_value(["sgrld · identity", "sgrld · monge"]).run()
    skip = registry_labels(samplers.REGISTRY["sgrld"], skip=("metric",))
    for metric in ("identity", "monge"):  # the metric is the entry's: no widget for it
        assert keyed(at, f"cmp.sampler.{metric}.sgrld.") == skip
    at.text_input(key="cmp.sampler.monge.sgrld.step_size").input("0.01").run()
    at.button(key="cmp.run").click().run()
    assert not errors(at), errors(at)
    store = run_queued(home)
    params = {
        r.spec["sampler"]["params"]["metric"]: r.spec["sampler"]["params"] for r in store.list()
    }
    assert params["monge"]["step_size"] == 0.01 and params["identity"]["step_size"] == 0.1
    at.run()
    assert not errors(at), errors(at)
    labels = ["sgrld · identity", "sgrld · monge"]
    assert list(at.dataframe[0].value["sampler"]) == labels
    shown = figures(at)
    histogram = shown["Marginal of v: every sampler on the same bins"]["data"]
    assert [b["name"] for b in histogram if b["type"] == "bar"] == labels
    assert {f"{label}: trace of v" for label in labels} <= set(shown)
    box = at.selectbox(key="cmp.shown")
    assert "sgrld · identity vs sgrld · monge" in box.format_func(box.value)

    # two runs sharing a label (two clicks within seconds join one group) stay apart too
    runs = store.list()
    twin = [type("R", (), {"id": r.id, "spec": runs[0].spec}) for r in runs]
    assert len(set(compare.run_labels(twin).values())) == 2
