"""The Wide networks page (Hron et al. 2022): a small repriorisation study submitted from the page
runs (here, in-process: no worker is started) and its ESS figures, ratio table, verdicts,
posterior slices and KL show the runs' own numbers; what cannot run is refused by name with
nothing queued."""

from __future__ import annotations

import numpy as np
import pytest
from apptest import array, errors, figures, no_pool, page, run_queued  # noqa: F401 (a fixture)

from runs.store import Store
from studies import registry, wide

FLAG = "**width "  # a study's own verdict lines start so: the runs' result, not a page error


def page_errors(at) -> list[str]:
    return [e for e in errors(at) if not e.startswith(FLAG)]


pytestmark = pytest.mark.usefixtures("no_pool")  # runs executed here (`home`: a conftest fixture)


@pytest.mark.parametrize(
    ("setup", "field"),
    [
        ({"wide.steps": "200", "wide.warmup": "200"}, "**warmup**"),
        ({"wide.data": "digits", "wide.n": "2000"}, "**target.params.n**"),
        ({"wide.widths": []}, "**widths**"),
    ],
)
def test_what_cannot_run_is_refused_by_name_and_nothing_is_queued(home, setup, field):
    at = page("wide_networks")
    assert not errors(at), errors(at)
    for key, value in setup.items():
        if key == "wide.widths":
            at.multiselect(key=key).set_value(value)
        elif key == "wide.data":
            at.selectbox(key=key).select(value)
        else:
            at.text_input(key=key).input(value)
    at.run()
    at.button(key="wide.run").click().run()
    assert not at.exception
    shown = " ".join(e.value for e in at.error)
    assert field in shown, shown
    assert not Store(home).list()
    if field == "**widths**":
        return
    # the explanation shows what the RunSpec says to repriorised runs elsewhere, by field
    said = " ".join(m.value for m in at.markdown)
    for name in ("observables", "sampler.params.batch_size", "sampler.params.localization"):
        assert f"**{name}**" in said, said


def test_a_small_study_runs_and_the_page_shows_its_numbers(home):
    at = page("wide_networks")
    at.multiselect(key="wide.widths").set_value([4, 8])
    at.text_input(key="wide.steps").input("200")
    at.text_input(key="wide.warmup").input("50")
    at.text_input(key="wide.chains").input("2")
    at.run()
    at.button(key="wide.run").click().run()
    assert not page_errors(at), page_errors(at)
    store = Store(home)
    runs = store.list()
    assert sorted(
        (r.spec["target"]["params"]["width"], r.spec["target"]["params"]["parametrisation"])
        for r in runs
    ) == [(4, "reprior"), (4, "standard"), (8, "reprior"), (8, "standard")]
    assert {(r.spec["steps"], r.spec["burn_in"], r.spec["chains"]) for r in runs} == {(200, 50, 2)}
    run_queued(home)
    at.run()
    assert not page_errors(at), page_errors(at)

    (sweep,) = store.list_sweeps()
    result = registry.results(store, sweep["id"])
    assert {c["status"] for c in result["cells"]} == {"completed"}
    shown = figures(at)
    for quantity, title in (("f", "f(X_test)"), ("theta", "θ")):
        fig = shown[f"Per-step ESS of {title} against width"]
        for trace in fig["data"]:
            parametrisation = "standard" if trace["name"].startswith("standard") else "reprior"
            rows = sorted(
                (c for c in result["cells"] if c["parametrisation"] == parametrisation),
                key=lambda c: c["width"],
            )
            assert list(array(trace["x"])) == [4, 8]
            np.testing.assert_allclose(
                array(trace["y"]), [c["ess"][quantity]["mean"] for c in rows]
            )
    assert "Acceptance and adapted step against width" in shown

    table = at.dataframe[0].value
    assert list(table["width"]) == [4, 8]
    np.testing.assert_allclose(table["ESS ratio f(X_test)"], [r["f"] for r in result["ratios"]])
    np.testing.assert_allclose(table["ESS ratio θ"], [r["theta"] for r in result["ratios"]])
    assert list(table["numbers"]) == ["final", "final"]

    # verdicts from the runs' own numbers: each cell outside [0.8, 0.97] red, with its value
    red = " ".join(e.value for e in at.error)
    for c in result["cells"]:
        outside = not 0.8 <= c["acceptance"] <= 0.97
        assert (f"acceptance {c['acceptance']:.3f}" in red) == outside, (c, red)
    amber = " ".join(w.value for w in at.warning)
    for r in result["ratios"]:
        assert (f"**width {r['width']}**" in amber) == (min(r["f"], r["theta"]) <= 1), amber

    # posterior slices through the first finished run, the numbers studies.wide.slices computes
    run_id = at.selectbox(key="wide.slice.run").value
    cell = next(c for c in result["cells"] if c["run_id"] == run_id)
    s = wide.slices(store, run_id, grid=41, half_width=1.0)
    shown = figures(at)
    label = {"standard": "standard (θ)", "reprior": "repriorised (φ)"}[cell["parametrisation"]]
    planes = shown[f"Posterior slices through the last draw (width {cell['width']}, {label} run)"]
    raw = [array(t["customdata"]).reshape(41, 41) for t in planes["data"] if t["type"] == "contour"]
    np.testing.assert_allclose(raw[0], s["theta"].T)
    np.testing.assert_allclose(raw[1], s["phi"].T)
    lines = shown["−log p along one random direction through the last draw"]
    np.testing.assert_allclose(array(lines["data"][1]["y"]), s["line_phi"])

    # the KL from prior draws at the chosen widths, depth and n
    at.button(key="wide.kl.run").click().run()
    assert not page_errors(at), page_errors(at)
    title = "KL of the posterior from the prior against width (depth 1, n 16, prior draws 1000)"
    kl = figures(at)[title]
    rows = wide.kl_table((4, 8), depth=1, n=16, draws=1000)
    np.testing.assert_allclose(array(kl["data"][0]["y"]), [r["reprior"] for r in rows])
    np.testing.assert_allclose(array(kl["data"][1]["y"]), [r["standard"] for r in rows])


def test_skipping_mh_is_judged_by_the_papers_acceptance_floor(home):
    at = page("wide_networks")
    at.multiselect(key="wide.widths").set_value([4])
    at.text_input(key="wide.steps").input("120")
    at.text_input(key="wide.warmup").input("30")
    at.checkbox(key="wide.skip_mh").check()
    at.run()
    assert "the paper keeps the mean acceptance probability above 0.98" in at.warning[0].value
    at.button(key="wide.run").click().run()
    store = run_queued(home)
    assert {r.spec["sampler"]["params"]["mh"] for r in store.list()} == {False}
    at.run()
    assert not page_errors(at), page_errors(at)
    (sweep,) = store.list_sweeps()
    red = " ".join(e.value for e in at.error)
    for c in registry.results(store, sweep["id"])["cells"]:
        below = c["acceptance"] < 0.98  # the mean acceptance probability, MH skipped
        assert (f"mean acceptance probability {c['acceptance']:.3f}" in red) == below, red
    assert "above 0.97" not in red  # the MH band does not apply


def test_the_kl_leaves_out_what_would_keep_the_page_waiting(home):
    at = page("wide_networks")
    at.multiselect(key="wide.widths").set_value([8, 512])
    at.text_input(key="wide.depth").input("4")
    at.run()
    said = " ".join(c.value for c in at.caption)
    assert "widths 8." in said and "Left out: 512 (~" in said, said
    assert not at.button(key="wide.kl.run").disabled
    at.selectbox(key="wide.data").select("digits")
    at.text_input(key="wide.n").input("1437")
    at.run()
    shown = " ".join(e.value for e in at.error)
    assert "**depth / n**: even width 8 would take" in shown, shown
    assert at.button(key="wide.kl.run").disabled


def test_the_networks_page_refuses_an_llc_run_of_a_repriorised_network(home):
    """The LLC localises at w0 on a tempered posterior: with reprior it is refused by name on
    the Networks & LLC page, and nothing is queued."""
    at = page("networks")
    at.selectbox(key="net.target_name").set_value("ntk-fcn").run()
    at.selectbox(key="net.target.ntk-fcn.parametrisation").set_value("reprior").run()
    next(b for b in at.button if b.label == "Run").click().run()
    shown = " ".join(errors(at))
    assert "**observables**" in shown and "cannot run with reprior" in shown, shown
    assert Store(home).list() == []
