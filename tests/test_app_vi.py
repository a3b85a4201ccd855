"""The Free energy (VI) tab of Networks & LLC (docs/methods/vi.md): an n-scan submitted from the
page runs (here, in-process: no worker is started), and its curves, slope figure and metrics show
the runs' own numbers, refitted here with numpy; what cannot run is refused by name."""

from __future__ import annotations

import math

import numpy as np
import pytest
from apptest import array, errors, figures, no_pool, page, run_queued  # noqa: F401 (a fixture)

from runs.store import Store

NS = (200, 400, 800)
EPOCHS = 6

pytestmark = pytest.mark.usefixtures("no_pool")  # runs executed here (`home`: a conftest fixture)


def tanh_scan(at, ns: str = ", ".join(map(str, NS))):
    at.selectbox(key="net.target_name").set_value("tanh").run()
    at.text_input(key="net.target.tanh.hidden").input("1")
    at.text_input(key="vi.ns").input(ns)
    at.number_input(key="vi.epochs").set_value(EPOCHS)
    return at.run()


def test_a_small_scan_runs_and_the_tab_shows_its_slope(home):
    at = tanh_scan(page("networks"))
    at.button(key="vi.run").click().run()
    assert not errors(at), errors(at)
    store = Store(home)
    runs = store.list()
    assert sorted((r.spec["vi"]["points"], r.spec["vi"]["source"]) for r in runs) == sorted(
        (n, s) for n in NS for s in ("gamma", "gaussian")
    )
    # one dataset of max(n) points, each fit on its first n (nested), the page's epochs
    assert {r.spec["target"]["params"]["n"] for r in runs} == {max(NS)}
    assert {r.spec["vi"]["epochs"] for r in runs} == {EPOCHS}
    run_queued(home)
    runs = store.list()
    at.run()
    assert not errors(at), errors(at)  # the short fits' verdicts are warnings, not errors

    psi = {(r.spec["vi"]["source"], r.spec["vi"]["points"]): r.summary["psi"] for r in runs}
    shown = figures(at)
    slope_fig = next(f for title, f in shown.items() if title.startswith("Free energy"))
    for source, name in (("gamma", "nf_gamma"), ("gaussian", "nf_gaussian")):
        want = np.polyfit(np.log(NS), [-psi[source, n] for n in NS], 1)[0]
        (points,) = [t for t in slope_fig["data"] if t.get("name", "").startswith(f"−Ψ {name},")]
        assert array(points["y"]) == pytest.approx([-psi[source, n] for n in NS], rel=1e-12)
        assert array(points["x"]) == pytest.approx(np.log(NS), rel=1e-12)
        (metric,) = [m for m in at.metric if m.label == f"slope of −Ψ, {name}"]
        assert float(metric.value.split(" ± ")[0]) == pytest.approx(want, abs=5e-4)
    (true,) = [m for m in at.metric if m.label == "true λ"]
    assert true.value == "0.5"  # H = 1: lambda = 1/2
    curves = next(f for title, f in shown.items() if title.startswith("Each fit's objective"))
    assert len(curves["data"]) == 2 * len(NS)
    one = runs[0]
    (trace,) = [
        t
        for t in curves["data"]
        if t.get("name") == f"nf_{one.spec['vi']['source']} n = {one.spec['vi']['points']}"
    ]
    stored = store.read(one.id)["objective"]
    assert array(trace["y"]) == pytest.approx(stored, rel=1e-12)
    # the exact free energy beside them (H = 1: quadrature), below which every Psi lies
    exact = [t for t in slope_fig["data"] if t.get("name", "").startswith("−log Z̄ exact")]
    assert exact and all(math.isfinite(v) for v in array(exact[0]["y"]))
    # each fit is too short to judge: the table says so, the page shows the scan's warnings
    assert any("too few to tell" in w.value for w in at.warning)


@pytest.mark.parametrize(
    ("target", "ns", "field"),
    [("tanh", "500", "**ns**"), ("mlp", "200, 400", "**target**"), ("tanh", "1, x", "**vi.ns**")],
)
def test_what_cannot_run_is_refused_by_name_and_nothing_is_queued(home, target, ns, field):
    at = page("networks")
    at.selectbox(key="net.target_name").set_value(target).run()
    at.text_input(key="vi.ns").input(ns)
    at.run()
    at.button(key="vi.run").click().run()
    assert not at.exception
    shown = " ".join(e.value for e in at.error)
    assert field in shown, shown
    assert not Store(home).list()
