"""The Integrators page (TATi's order study for class) and its figure: a small study submitted
from the page runs (here, in-process: no worker pool) and its error lines, slopes and table
appear; what cannot be run is refused by name with nothing queued."""

from __future__ import annotations

import numpy as np
import pytest
from apptest import errors, no_pool, page, run_queued  # noqa: F401 (no_pool: a fixture)

import charts
from runs.store import Store

pytestmark = pytest.mark.usefixtures("no_pool")  # the page's runs are executed here


def cell(sampler, h, error, se):
    return {"sampler": sampler, "step_size": h, "error": error, "error_se": se}


def test_order_figure_draws_points_fits_and_guides():
    hs = [0.25, 0.125, 0.0625]
    cells = [cell("gla2", h, 0.5 * h**2, 1e-4) for h in hs]
    cells += [cell("baoab", h, 1e-5, 1e-4) for h in hs]  # at the noise floor: hollow, no fit
    fits = [
        {
            "sampler": "gla2",
            "slope": 2.0,
            "slope_se": 0.01,
            "intercept": np.log(0.5),
            "expected": 2,
            "points": 3,
        },
        {
            "sampler": "baoab",
            "slope": None,
            "slope_se": None,
            "intercept": None,
            "expected": 2,
            "points": 0,
        },
    ]
    fig = charts.order_figure(cells, fits, "virial")
    names = [t.name for t in fig.data]
    assert names[0].startswith("gla2: slope 2.00")
    points, line = fig.data[0], fig.data[1]
    np.testing.assert_allclose(line.y, 0.5 * np.asarray(line.x) ** 2)  # the fitted power law
    assert list(points.marker.symbol) == ["circle"] * 3
    baoab = next(t for t in fig.data if t.name and t.name.startswith("baoab"))
    assert list(baoab.marker.symbol) == ["circle-open"] * 3
    assert {"slope 1", "slope 2"} <= set(names)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"


def test_a_small_study_fills_in_with_its_lines_and_slopes(home):
    at = page("integrators")
    assert not errors(at), errors(at)
    at.multiselect(key="ord.samplers").set_value(["gla2", "sgld"])
    at.text_input(key="ord.step_sizes").input("0.5, 0.25")
    at.number_input(key="ord.chains").set_value(256)
    at.number_input(key="ord.steps").set_value(600)
    at.run()
    at.button(key="ord.launch").click().run()
    assert not errors(at), errors(at)
    runs = run_queued(home).list()
    assert {r.status for r in runs} == {"completed"}
    specs = {(r.spec["sampler"]["name"], r.spec["sampler"]["params"]["step_size"]) for r in runs}
    # TATi's units: GLA2 at h, SGLD at 2 h / beta (beta = 10)
    assert specs == {("gla2", 0.5), ("gla2", 0.25), ("sgld", 0.1), ("sgld", 0.05)}
    at.run()
    assert not errors(at), errors(at)
    (figure,) = list(at.get("plotly_chart"))
    assert "Relative error" in figure.proto.spec
    table = at.dataframe[0].value
    assert list(table["integrator"]) == ["gla2", "sgld"]
    # two points a line, each far above its SE (GLA2's bias at h = 0.5 is 14%): a slope each
    assert table["fitted slope"].notna().all(), table


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda at: at.radio(key="ord.observable").set_value("kinetic"), "SGLD has no momentum"),
        (lambda at: at.multiselect(key="ord.samplers").set_value([]), "choose at least one"),
        (lambda at: at.text_input(key="ord.step_sizes").input("0.1, -2"), "step_sizes"),
    ],
)
def test_what_cannot_run_is_refused_by_name_and_nothing_is_queued(home, setup, message):
    at = page("integrators")
    setup(at)
    at.run()
    at.button(key="ord.launch").click().run()
    shown = " ".join(e.value for e in at.error)
    assert message in shown, shown
    assert not Store(home).list()
