"""The funnel experiment's figure (Yu et al., Fig. 2): draws over log p contours beside
the histogram of the neck v against its true density.

Pure: numpy arrays in, a plotly Figure out. The grid is as ``charts.runs.density_figure`` takes
it: ``log_p[j, i]`` at ``(xs[i], ys[j])``, here the normalised log density.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from charts.runs import histogram_density
from charts.style import LEGEND

HISTOGRAM, TRUTH, DRAWS = "#ff9f1c", "#1f77b4", "rgba(30, 30, 30, 0.55)"  # the paper's colours
CONTOUR_LINES = ("#9ecae1", "#4292c6", "#2171b5", "#08306b")  # lowest level lightest


def step_curve(edges, values) -> tuple[np.ndarray, np.ndarray]:
    """A per-bin value (a density averaged over each bin) as the x, y of a stepped line."""
    edges, values = np.asarray(edges, dtype=float), np.asarray(values, dtype=float)
    return np.repeat(edges, 2)[1:-1], np.repeat(values, 2)


def funnel_figure(
    xs: Sequence[float],
    ys: Sequence[float],
    log_p,
    levels: Sequence[float],
    cloud,
    v_draws,
    v_edges,
    v_curve: tuple,
    title: str | None = None,
    labels: Sequence[str] = ("θ1", "v"),
    curve_name: str = "exact",
    height: int | None = None,
) -> go.Figure:
    """Left: ``cloud`` [n, 2] (x, v) as dots over the contours of ``log_p`` at ``levels``,
    on the grid's axes. Right, sharing the v axis: the density histogram of ``v_draws`` on
    ``v_edges`` (horizontal bars; draws outside the edges count in the total) and the true
    density ``v_curve`` = (v, pdf) as a line."""
    xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    fig = make_subplots(
        rows=1, cols=2, shared_yaxes=True, column_widths=[0.7, 0.3], horizontal_spacing=0.03
    )
    _level_lines(fig, xs, ys, log_p, levels)
    cloud = np.asarray(cloud, dtype=float).reshape(-1, 2)
    fig.add_trace(
        go.Scatter(
            x=cloud[:, 0],
            y=cloud[:, 1],
            mode="markers",
            marker={"size": 3, "color": DRAWS},
            name=f"{len(cloud):,} random draws",
            hovertemplate=f"{labels[0]}=%{{x:.3g}}<br>{labels[1]}=%{{y:.3g}}<extra></extra>",
        ),
        row=1,
        col=1,
    )
    edges = np.asarray(v_edges, dtype=float)
    fig.add_trace(
        go.Bar(
            y=edges[:-1] / 2 + edges[1:] / 2,
            x=histogram_density(v_draws, edges),
            width=np.diff(edges),
            orientation="h",
            marker={"color": HISTOGRAM, "line": {"width": 0}},
            opacity=0.85,
            name=f"{labels[1]} histogram",
        ),
        row=1,
        col=2,
    )
    fig.add_trace(
        go.Scatter(
            x=np.asarray(v_curve[1], dtype=float),
            y=np.asarray(v_curve[0], dtype=float),
            mode="lines",
            line={"color": TRUTH, "width": 2},
            name=curve_name,
        ),
        row=1,
        col=2,
    )
    fig.update_xaxes(title_text=labels[0], range=[float(xs[0]), float(xs[-1])], row=1, col=1)
    fig.update_xaxes(title_text="density", row=1, col=2)
    fig.update_yaxes(title_text=labels[1], range=[float(ys[0]), float(ys[-1])], row=1, col=1)
    fig.update_layout(
        title=title,
        height=height,
        bargap=0,
        legend=LEGEND,
        margin={"l": 50, "r": 20, "t": 40 if title else 10, "b": 40},
    )
    return fig


def _level_lines(fig: go.Figure, xs: np.ndarray, ys: np.ndarray, log_p, levels) -> None:
    """One labelled contour line of ``log_p`` per level, on the left panel."""
    for i, level in enumerate(sorted(levels)):
        fig.add_trace(
            go.Contour(
                x=xs,
                y=ys,
                z=np.asarray(log_p, dtype=float),
                contours={
                    "start": level,
                    "end": level,
                    "size": 1.0,
                    "coloring": "lines",
                    "showlabels": True,
                    "labelfont": {"size": 9, "color": CONTOUR_LINES[-1]},
                },
                line={"width": 1.5},
                colorscale=[[0, CONTOUR_LINES[i % 4]], [1, CONTOUR_LINES[i % 4]]],
                showscale=False,
                hoverinfo="skip",
                name=f"log p = {level:g}",
                showlegend=False,
            ),
            row=1,
            col=1,
        )
