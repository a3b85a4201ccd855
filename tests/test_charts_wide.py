"""The Wide networks figures (charts.wide) against hand-built sweep cells, slices and KL rows:
what is plotted is what was given, on the axes the paper uses, with missing numbers left out."""

from __future__ import annotations

import math

import numpy as np
import pytest

import charts


def ess(mean, low, high, draws=150):
    return {"mean": mean, "min": low, "max": high, "draws": draws}


def cell(width, parametrisation, f=None, theta=None, status="completed", acc=None, step=None):
    given = f is not None or theta is not None
    return {
        "width": width,
        "parametrisation": parametrisation,
        "status": status,
        "ess": {"f": f, "theta": theta} if given else None,
        "acceptance": acc,
        "step": step,
    }


CELLS = [  # out of width order, one still running, one without numbers yet, one NaN
    cell(128, "reprior", ess(0.10, 0.07, 0.16), ess(0.07, 0.05, 0.09), acc=0.98, step=0.16),
    cell(8, "standard", ess(0.011, 0.005, 0.05), ess(0.0064, 0.003, 0.012), acc=0.88, step=0.025),
    cell(8, "reprior", ess(0.032, 0.018, 0.06), ess(0.015, 0.01, 0.03), acc=0.88, step=0.079),
    cell(128, "standard", ess(0.014, 0.005, 0.055), ess(0.007, 0.004, 0.012), "running", 0.9),
    cell(32, "standard", status="queued"),
    cell(32, "reprior", ess(math.nan, math.nan, math.nan), ess(0.02, 0.01, 0.03), acc=None),
]


def trace(fig, name):
    (found,) = [t for t in fig.data if t.name == name]
    return found


def test_ess_figure_plots_the_given_means_with_min_max_bars_on_log_axes():
    fig = charts.ess_figure(CELLS, "f")
    assert [t.name for t in fig.data] == ["standard (θ)", "repriorised (φ)"]
    standard, reprior = trace(fig, "standard (θ)"), trace(fig, "repriorised (φ)")
    # sorted by width; the queued cell (no ESS) and the NaN mean are left out, not drawn as 0
    assert list(standard.x) == [8, 128] and list(reprior.x) == [8, 128]
    np.testing.assert_allclose(standard.y, [0.011, 0.014])
    np.testing.assert_allclose(reprior.y, [0.032, 0.10])
    np.testing.assert_allclose(reprior.error_y.array, [0.06 - 0.032, 0.16 - 0.10])
    np.testing.assert_allclose(reprior.error_y.arrayminus, [0.032 - 0.018, 0.10 - 0.07])
    assert reprior.error_y.symmetric is False
    # the running run's point (its ESS so far) is hollow; finished ones are filled
    assert list(standard.marker.symbol) == ["circle", "circle-open"]
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert list(fig.layout.xaxis.tickvals) == [8, 128]  # ticked at the widths drawn
    assert "f(X_test)" in fig.layout.title.text


def test_ess_figure_of_theta_reads_theta_and_keeps_the_nan_f_cell():
    fig = charts.ess_figure(CELLS, "theta")
    reprior = trace(fig, "repriorised (φ)")
    assert list(reprior.x) == [8, 32, 128]  # width 32's theta is finite, its f was NaN
    np.testing.assert_allclose(reprior.y, [0.015, 0.02, 0.07])
    assert "θ" in fig.layout.title.text


def test_ess_figure_without_numbers_has_no_traces():
    fig = charts.ess_figure([cell(8, "standard", status="queued")], "f")
    assert not fig.data
    assert fig.layout.xaxis.type == "log"


def test_acceptance_figure_band_with_mh_and_floor_without():
    fig = charts.acceptance_figure(CELLS, True, (0.8, 0.97), 0.98)
    accept = [t for t in fig.data if t.xaxis == "x"]
    steps = [t for t in fig.data if t.xaxis == "x2"]
    by_name = {t.name: t for t in accept}
    assert list(by_name["standard (θ)"].x) == [8, 128]
    np.testing.assert_allclose(by_name["standard (θ)"].y, [0.88, 0.9])
    assert list(by_name["standard (θ)"].marker.symbol) == ["circle", "circle-open"]  # running
    assert list(by_name["repriorised (φ)"].x) == [8, 128]  # width 32 has no acceptance
    step = {t.name: t for t in steps}["repriorised (φ)"]
    np.testing.assert_allclose(step.y, [0.079, 0.16])
    (band,) = fig.layout.shapes
    assert (band.y0, band.y1) == (0.8, 0.97)
    assert fig.layout.yaxis2.type == "log"

    skipped = charts.acceptance_figure(CELLS, False, (0.8, 0.97), 0.98)
    (floor,) = skipped.layout.shapes
    assert floor.y0 == floor.y1 == 0.98


def test_clipped_stops_at_the_quantile_and_keeps_nan():
    z = np.array([[0.0, 1.0, 2.0], [3.0, np.inf, np.nan], [4.0, 5.0, 100.0]])
    out, low, high = charts.clipped(z, 0.5)
    finite = np.array([0, 1, 2, 3, 4, 5, 100.0])
    assert low == 0.0 and high == pytest.approx(np.quantile(finite, 0.5))
    assert out[2, 2] == high and out[1, 1] == high  # the steep corner and +inf: the top colour
    assert math.isnan(out[1, 2])
    assert out[0, 1] == 1.0  # below the clip: unchanged


def slices(grid=5):
    a = np.linspace(-1, 1, grid)
    i, j = np.meshgrid(a, a, indexing="ij")
    theta = 40 * i**2 + 3 * j**2 + i  # steep along a, not symmetric in (a, b)
    phi = 0.5 * (i**2 + j**2)
    return {
        "a": a,
        "b": a,
        "theta": theta,
        "phi": phi,
        "line_theta": theta[:, grid // 2],
        "line_phi": phi[:, grid // 2],
        "half_width": 1.0,
        "width": 128,
        "parametrisation": "reprior",
    }


def test_slice_figure_draws_both_slices_indexed_y_then_x_with_their_own_bars():
    s = slices()
    fig = charts.slice_figure(s)
    theta, phi = (t for t in fig.data if t.type == "contour")
    # z[j][i] is the value at (a[i], b[j]); raw values in the hover, clipped ones coloured
    np.testing.assert_allclose(np.asarray(theta.customdata), s["theta"].T)
    expected, low, high = charts.clipped(s["theta"])
    np.testing.assert_allclose(np.asarray(theta.z), expected.T)
    assert np.asarray(theta.z).max() == pytest.approx(high)
    assert high < s["theta"].max()  # the steep end is clipped: the bowl keeps its colours
    assert theta.contours.start == pytest.approx(low)
    assert theta.contours.end == pytest.approx(high)
    assert (theta.coloraxis, phi.coloraxis) == ("coloraxis", "coloraxis2")
    assert fig.layout.coloraxis.cmax == pytest.approx(high)
    assert fig.layout.coloraxis2.cmax == pytest.approx(charts.clipped(s["phi"])[2])
    titles = [a.text for a in fig.layout.annotations]
    assert titles[0].startswith("θ") and titles[1].startswith("φ")
    assert f"{s['theta'].max():.3g}" in titles[0]  # the slice's own range, unclipped
    assert "width 128" in fig.layout.title.text


def test_slice_figure_with_one_bar_shares_levels_so_the_flatter_slice_has_fewer():
    s = slices(grid=21)
    fig = charts.slice_figure(s, shared=True)
    theta, phi = (t for t in fig.data if t.type == "contour")
    assert theta.coloraxis == phi.coloraxis == "coloraxis"
    assert "coloraxis2" not in fig.layout.to_plotly_json()
    assert theta.contours.to_plotly_json() == phi.contours.to_plotly_json()
    size, start = phi.contours.size, phi.contours.start
    levels = lambda z: len(np.unique(np.floor((np.asarray(z) - start) / size)))  # noqa: E731
    assert levels(phi.z) < levels(theta.z)


def test_slice_line_figure_plots_both_lines():
    s = slices()
    fig = charts.slice_line_figure(s)
    assert [t.name for t in fig.data] == ["in θ (original)", "in φ (repriorised)"]
    np.testing.assert_allclose(fig.data[0].y, s["line_theta"])
    np.testing.assert_allclose(fig.data[1].y, s["line_phi"])
    np.testing.assert_allclose(fig.data[0].x, s["a"])


def test_kl_figure_plots_both_kls_against_width_and_skips_what_a_log_axis_cannot_show():
    rows = [
        {"width": 32, "depth": 1, "n": 32, "reprior": 52.0, "standard": 3000.0, "draws": 1000},
        {"width": 8, "depth": 1, "n": 32, "reprior": 289.0, "standard": 3050.0, "draws": 1000},
        {"width": 512, "depth": 1, "n": 32, "reprior": 0.0, "standard": None, "draws": 1000},
        {"width": 128, "depth": 1, "n": 32, "reprior": math.nan, "standard": 2990.0, "draws": 1000},
    ]
    fig = charts.kl_figure(rows)
    phi, theta = fig.data
    assert "p_φ" in phi.name and "p_θ" in theta.name
    assert list(phi.x) == [8, 32] and list(phi.y) == [289.0, 52.0]
    assert list(theta.x) == [8, 32, 128] and list(theta.y) == [3050.0, 3000.0, 2990.0]
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert "depth 1, n 32, prior draws 1000" in fig.layout.title.text
