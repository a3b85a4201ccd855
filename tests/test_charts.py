"""Landscape figures against a hand-built surface whose value at every grid point is known:
loss = 1 + c0² + 3 c1², minimum 1 at the origin, which lies on the grid."""

import math

import numpy as np
import pytest

import charts

C0 = np.linspace(-1, 1, 5)
C1 = np.linspace(-2, 2, 7)  # a different length, so a transposed z has the wrong shape
LOSS = 1 + C0[:, None] ** 2 + 3 * C1[None, :] ** 2


def landscape(chains: int = 3, points: int = 4) -> dict:
    t = np.linspace(0, 1, points)
    path = np.stack([np.stack([0.1 * k + t, -t], axis=-1) for k in range(chains)])
    return {
        "c0": C0,
        "c1": C1,
        "loss": LOSS,
        "path": path,
        "path_loss": 1 + path[..., 0] ** 2 + 3 * path[..., 1] ** 2,
        "lowest_loss": 1.0,
        "label0": "PC1 (62.1% of variance)",
        "label1": "PC2 (20.0% of variance)",
        "sweep_c": C0,
        "sweep_loss": np.stack([1 + C0**2, 1 + 3 * C0**2]),
    }


def test_surface_z_is_indexed_y_then_x():
    z = np.asarray(charts.surface_figure(landscape(), scale="loss").data[0].z)
    assert z.shape == (7, 5)
    # z[j][i] is the loss at (c0[i], c1[j]): c0 = 1, c1 = -2 gives 1 + 1 + 12.
    assert z[0][4] == pytest.approx(14.0)
    assert z[4][0] == pytest.approx(1 + 1 + 3 * (2 / 3) ** 2)
    np.testing.assert_array_equal(z, LOSS.T)


def test_scaled_closed_forms():
    np.testing.assert_array_equal(charts.scaled(LOSS, "loss", 1.0), LOSS)
    np.testing.assert_allclose(charts.scaled(LOSS, "log", 1.0), np.log(LOSS))
    lnabs = charts.scaled(LOSS, "lnabs", 1.0)
    # The minimum (c0 = 0, c1 = 0) is floored to the next smallest value, ln 0.5² at c0 = ±0.5.
    assert lnabs[2, 3] == pytest.approx(math.log(0.25))
    rest = np.ones_like(LOSS, dtype=bool)
    rest[2, 3] = False
    np.testing.assert_allclose(lnabs[rest], np.log(LOSS[rest] - 1))


def test_scaled_nan_and_non_positive():
    loss = np.array([np.nan, -1.0, 0.0, 2.0, np.inf])
    assert np.isnan(charts.scaled(loss, "loss", 0.0)[[0, 4]]).all()
    log = charts.scaled(loss, "log", 0.0)
    assert np.isnan(log[:3]).all() and log[3] == pytest.approx(math.log(2))
    lnabs = charts.scaled(loss, "lnabs", 2.0)
    assert np.isnan(lnabs[[0, 4]]).all()
    np.testing.assert_allclose(lnabs[1:3], [math.log(3), math.log(2)])
    assert lnabs[3] == pytest.approx(math.log(2))  # floored to the smallest finite value
    # With nothing else finite the floor is ln(machine epsilon).
    assert charts.scaled([1.0, np.nan], "lnabs", 1.0)[0] == pytest.approx(
        math.log(np.finfo(float).eps)
    )


def test_nan_grid_points_are_gaps():
    s = landscape()
    s["loss"] = LOSS.copy()
    s["loss"][4, 0] = np.nan
    for build in (charts.surface_figure, charts.contour_figure):
        z = np.asarray(build(s).data[0].z)
        assert np.isnan(z[0][4]) and np.isfinite(np.delete(z.ravel(), 4)).all()


def test_overlay_one_trace_per_chain_in_distinct_colours():
    s = landscape(chains=3)
    for build in (charts.surface_figure, charts.contour_figure):
        fig = build(s)
        assert len(fig.data) == 1 + 3
        assert [t.name for t in fig.data[1:]] == ["chain 0", "chain 1", "chain 2"]
        assert len({t.line.color for t in fig.data[1:]}) == 3
        assert len(build(s, overlay=False).data) == 1


def test_surface_path_heights_share_l0():
    s = landscape()
    fig = charts.surface_figure(s, scale="lnabs")
    chain = fig.data[2]
    np.testing.assert_allclose(chain.x, s["path"][1, :, 0])
    np.testing.assert_allclose(chain.z, np.log(s["path_loss"][1] - 1))
    # Chain 0 starts at the origin (L = L0), as does the grid's minimum: both take one floor, the
    # smallest finite value over grid and path, ln 0.1² at chain 1's start (0.1, 0), not the
    # grid's own ln 0.5².
    floor = math.log(0.01)
    assert fig.data[1].z[0] == pytest.approx(floor)
    assert np.asarray(fig.data[0].z)[3][2] == pytest.approx(floor)


def test_no_or_empty_path_means_no_overlay():
    s = landscape()
    del s["path"], s["path_loss"]
    assert len(charts.surface_figure(s).data) == 1
    s["path"] = np.zeros((2, 0, 2))
    s["path_loss"] = np.zeros((2, 0))
    assert len(charts.contour_figure(s).data) == 1


def test_axis_titles():
    s = landscape()
    scene = charts.surface_figure(s, scale="log").layout.scene
    assert scene.xaxis.title.text == s["label0"]
    assert scene.yaxis.title.text == s["label1"]
    assert scene.zaxis.title.text == charts.SCALES["log"]
    fig = charts.contour_figure(s, scale="lnabs")
    assert fig.layout.xaxis.title.text == s["label0"]
    assert fig.layout.yaxis.title.text == s["label1"]
    assert fig.layout.yaxis.scaleanchor == "x"
    assert fig.data[0].colorbar.title.text == charts.SCALES["lnabs"]
    del s["label0"], s["label1"]
    assert charts.contour_figure(s).layout.xaxis.title.text == "c0"


def test_inner_square_corners():
    s = landscape()
    surface = charts.surface_figure(s, scale="loss", inner=0.1)
    square = surface.data[-1]
    assert square.line.color == "red"
    assert sorted(set(zip(square.x, square.y, strict=True))) == [
        (-0.1, -0.1),
        (-0.1, 0.1),
        (0.1, -0.1),
        (0.1, 0.1),
    ]
    assert (square.x[0], square.y[0]) == (square.x[-1], square.y[-1])  # closed
    assert set(square.z) == {1.0}  # the lowest level of the surface
    (rect,) = charts.contour_figure(s, inner=0.1).layout.shapes
    assert (rect.x0, rect.y0, rect.x1, rect.y1) == (-0.1, -0.1, 0.1, 0.1)
    with pytest.raises(ValueError, match="inner"):
        charts.contour_figure(s, inner=0.0)


def test_spectrum():
    ratio = np.array([0.6, 0.3, 0.08, 0.0, 0.02])
    fig = charts.spectrum_figure(ratio, highlight=(1, 3, 9))
    assert fig.layout.yaxis.type == "log"
    assert fig.layout.xaxis.title.text == "principal component"
    line, marked = fig.data
    assert list(line.x) == [1, 2, 3, 5]  # the zero ratio has no place on a log axis
    assert list(marked.x) == [1, 3]  # 9 is beyond the five components
    np.testing.assert_array_equal(marked.y, [0.6, 0.08])


def test_sweep():
    s = landscape()
    fig = charts.sweep_figure(s, scale="log")
    assert [t.name for t in fig.data] == [s["label0"], s["label1"]]
    np.testing.assert_allclose(fig.data[1].y, np.log(1 + 3 * C0**2))
    assert fig.layout.yaxis.title.text == charts.SCALES["log"]
    del s["sweep_c"]
    with pytest.raises(ValueError, match="sweep_c"):
        charts.sweep_figure(s)


BUILDERS = {
    "surface": lambda s: charts.surface_figure(s, inner=0.5),
    "contour": lambda s: charts.contour_figure(s, inner=0.5),
    "sweep": charts.sweep_figure,
}


@pytest.mark.parametrize("name", BUILDERS)
def test_deterministic(name):
    build = BUILDERS[name]
    assert build(landscape()).to_json() == build(landscape()).to_json()


def test_spectrum_deterministic():
    ratio = np.array([0.7, 0.2, 0.1])
    assert charts.spectrum_figure(ratio).to_json() == charts.spectrum_figure(ratio).to_json()


@pytest.mark.parametrize("name", BUILDERS)
def test_npz_round_trip(name, tmp_path):
    build = BUILDERS[name]
    s = landscape()
    np.savez(tmp_path / "surface.npz", **s)
    with np.load(tmp_path / "surface.npz") as loaded:
        # Scalars and labels come back as 0-d arrays; the figure must not notice.
        assert build(loaded).to_json() == build(s).to_json()
        assert "PC1 (62.1% of variance)" in build(loaded).to_json()


def test_errors_name_the_field():
    with pytest.raises(ValueError, match="scale") as err:
        charts.scaled(LOSS, "ln", 1.0)
    assert "lnabs" in str(err.value)  # lists the allowed values
    with pytest.raises(ValueError, match="scale"):
        charts.surface_figure(landscape(), scale="linear")
    for key in ("c0", "c1", "loss"):
        s = landscape()
        del s[key]
        with pytest.raises(ValueError, match=key):
            charts.contour_figure(s)
    s = landscape()
    s["loss"] = LOSS.T
    with pytest.raises(ValueError, match=r"'loss'.*\(7, 5\).*\(5, 7\)"):
        charts.surface_figure(s)


def _metrics(sd, order):
    return [
        {
            "sampler": "sgld",
            "step_size": eps,
            "problems": 1 if sd is None else 2,
            "relative_error_mean": 0.1,
            "relative_error_sd": sd,
            "nan_fraction": 0.0,
            "nan_run_fraction": 0.0,
            "order_preservation": order,
        }
        for eps in (1e-7, 1e-6)
    ]


def test_dln_figures_say_why_they_are_empty():
    """One problem has no SD and no pair to order: the figures say so instead of showing an
    empty frame; two problems draw points and bars and carry no note."""
    one = [charts.mean_vs_sd_figure(_metrics(None, None))]
    one.append(charts.order_preservation_figure(_metrics(None, None)))
    assert [len(f.layout.annotations) for f in one] == [1, 1]
    assert "two problems" in one[0].layout.annotations[0].text
    assert "two problems" in one[1].layout.annotations[0].text
    assert all(f.layout.xaxis.visible is False and f.layout.yaxis.visible is False for f in one)
    two = [charts.mean_vs_sd_figure(_metrics(0.05, 1.0))]
    two.append(charts.order_preservation_figure(_metrics(0.05, 1.0)))
    assert [len(f.layout.annotations) for f in two] == [0, 0]
    assert two[0].data[0].x == (0.05, 0.05) and two[1].data[0].y == (1.0, 1.0)


@pytest.mark.parametrize(
    ("value", "digits", "shown"),
    [
        (0.000269446, 4, "2.694e-4"),  # 0.0002694 would be cut in a metric tile
        (100.324, 4, "100.3"),
        (12345678.0, 4, "1.235e7"),
        (99999.0, 4, "1e5"),  # not Python's 1e+05
        (-5e-7, 3, "-5e-7"),
        (0.05, 3, "0.05"),
        (0.1234567, 3, "0.123"),
        (41.0, 4, "41"),
        (None, 4, "–"),
        (math.nan, 4, "–"),
        (math.inf, 4, "–"),
    ],
)
def test_metric_numbers_are_short(value, digits, shown):
    from charts.table import number

    assert number(value, digits) == shown


def test_divergent_transitions_are_red_crosses_at_the_draws_that_had_them():
    """NUTS's ``divergent`` records after the burn-in pick the draws drawn as red crosses."""
    from studies.diagnostics import divergent_draws

    position = np.arange(5 * 3 * 2, dtype=float).reshape(5, 3, 2)  # [T, C, d]
    flags = np.zeros((5, 3))
    flags[0, 1] = flags[3, 2] = flags[4, 0] = 1.0  # the first is in the burn-in
    flags[2, 2] = np.nan  # a frozen chain's record
    draws = divergent_draws({"position": position, "divergent": flags}, burn=1)
    np.testing.assert_array_equal(draws, [position[3, 2], position[4, 0]])
    assert divergent_draws({"position": position}, burn=1) is None
    xs = ys = np.linspace(-1.0, 1.0, 5)
    fig = charts.density_figure(xs, ys, np.zeros((5, 5)), divergent=draws)
    (trace,) = [t for t in fig.data if t.name == "divergent transitions"]
    assert list(trace.x) == list(draws[:, 0]) and trace.marker.symbol == "x"
