"""Nested sampling's animation (``runs.nested``'s frames): the live points, the point removed at
each iteration, the RadFriends region and the candidates it wasted, on the target's contours.

A pure function of arrays (no Streamlit, no torch). The region is drawn as what RadFriends draws
from: a ball of the frame's radius around each live point, in the unit cube the box maps to, so
an ellipse with semi-axes radius x the box's widths in the plane; the union of the outlines is
one line trace (a polygon per ball, NaN between), cheap for the browser at a few hundred balls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from charts.runs import relative_log_density

FRAMES_SHOWN = 60  # frames the figure holds at most, evenly spread over those recorded
OUTLINE = 24  # sides of the polygon drawn for each ball
REMOVED, ADDED, WASTED = "rgb(214, 39, 40)", "rgb(44, 160, 44)", "rgb(150, 150, 150)"


def shown_frames(count: int, most: int = FRAMES_SHOWN) -> np.ndarray:
    """Indices of at most ``most`` of ``count`` frames, evenly spread, first and last kept."""
    if count <= most:
        return np.arange(count)
    return np.unique(np.linspace(0, count - 1, most).round().astype(int))


def outlines(centres: np.ndarray, semi_axes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(x, y): the outlines of ellipses with ``semi_axes`` [2] around ``centres`` [N, 2], one
    polygon each, NaN between them (one line trace draws them all)."""
    angle = np.linspace(0.0, 2 * np.pi, OUTLINE + 1)
    x = centres[:, :1] + semi_axes[0] * np.cos(angle)[None, :]
    y = centres[:, 1:2] + semi_axes[1] * np.sin(angle)[None, :]
    gap = np.full((len(centres), 1), np.nan)
    return np.hstack([x, gap]).ravel(), np.hstack([y, gap]).ravel()


def _frame_data(frames: Mapping[str, np.ndarray], k: int) -> list[go.Scatter]:
    live, scale = frames["live"][k][:, :2], frames["scale"][:2]
    x, y = outlines(live, float(frames["radius"][k]) * scale)
    wasted = frames["rejected"][k][:, :2]
    wasted = wasted[np.isfinite(wasted).all(-1)]
    removed, added = frames["removed"][k][None, :2], frames["added"][k][None, :2]
    return [
        go.Scatter(
            x=x, y=y, mode="lines", line={"width": 0.6, "color": "rgba(255, 127, 14, 0.55)"}
        ),
        go.Scatter(
            x=live[:, 0], y=live[:, 1], mode="markers", marker={"size": 4, "color": "black"}
        ),
        go.Scatter(
            x=wasted[:, 0],
            y=wasted[:, 1],
            mode="markers",
            marker={"size": 5, "color": WASTED, "symbol": "x-thin-open"},
        ),
        go.Scatter(
            x=removed[:, 0],
            y=removed[:, 1],
            mode="markers",
            marker={"size": 12, "color": REMOVED, "symbol": "x"},
        ),
        go.Scatter(
            x=added[:, 0],
            y=added[:, 1],
            mode="markers",
            marker={"size": 11, "color": ADDED, "symbol": "star"},
        ),
    ]


NAMES = (
    "RadFriends region (a ball around each live point)",
    "live points",
    "candidates wasted (in the region, below the contour)",
    "removed (lowest likelihood)",
    "its replacement",
)


def _caption(frames: Mapping[str, np.ndarray], k: int) -> str:
    i = int(frames["iteration"][k])
    return f"iteration {i}: log Z so far {float(frames['log_z'][k]):.3f}"


def nested_figure(
    frames: Mapping[str, np.ndarray],
    grid: Mapping,
    labels: Sequence[str] = ("w0", "w1"),
    *,
    log_scale: bool = True,
    title: str = "Nested sampling: live points and the RadFriends region",
    height: int = 620,
    most: int = FRAMES_SHOWN,
) -> go.Figure:
    """The animation of a nested run's ``frames`` (``iteration`` [K], ``live`` [K, N, d],
    ``removed``/``added`` [K, d], ``radius`` [K], ``scale`` [d], ``rejected`` [K, R, d], NaN
    rows padding, ``log_z`` [K]) over the contours of ``grid`` (``xs``, ``ys``, ``log_density``
    [ny, nx]), the first two coordinates, at most ``most`` frames, with play, pause and a
    slider."""
    xs, ys = np.asarray(grid["xs"], dtype=float), np.asarray(grid["ys"], dtype=float)
    z = relative_log_density(grid["log_density"])
    picked = shown_frames(len(frames["iteration"]), most)
    fig = go.Figure(
        go.Contour(
            x=xs,
            y=ys,
            z=z if log_scale else np.exp(z),
            colorscale="Blues",
            ncontours=20,
            contours={"coloring": "fill", "showlines": False},
            showscale=False,
            hoverinfo="skip",
            name="target",
        )
    )
    for trace, name in zip(_frame_data(frames, int(picked[0])), NAMES, strict=True):
        fig.add_trace(trace.update(name=name))
    moved = list(range(1, 1 + len(NAMES)))
    fig.frames = [
        go.Frame(
            data=_frame_data(frames, int(k)),
            traces=moved,
            name=str(int(frames["iteration"][k])),
            layout={"annotations": [_note(_caption(frames, int(k)))]},
        )
        for k in picked
    ]
    fig.update_layout(
        title={"text": title},
        height=height,
        xaxis={"title": labels[0], "range": [xs[0], xs[-1]]},
        yaxis={"title": labels[1], "range": [ys[0], ys[-1]], "scaleanchor": "x"},
        legend={"orientation": "h", "y": -0.12},
        annotations=[_note(_caption(frames, int(picked[0])))],
        **_player([str(int(frames["iteration"][k])) for k in picked]),
    )
    return fig


def _player(names: list[str]) -> dict:
    """Play and Pause buttons and a slider over the frames ``names``."""
    play = {"frame": {"duration": 300, "redraw": False}, "transition": {"duration": 0}}
    steps = [
        {
            "method": "animate",
            "label": name,
            "args": [[name], {"mode": "immediate", **play}],
        }
        for name in names
    ]
    buttons = [
        {"label": "Play", "method": "animate", "args": [None, {"fromcurrent": True, **play}]},
        {"label": "Pause", "method": "animate", "args": [[None], {"mode": "immediate", **play}]},
    ]
    return {
        "updatemenus": [
            {"type": "buttons", "direction": "left", "x": 0.0, "y": 1.08, "buttons": buttons}
        ],
        "sliders": [{"steps": steps, "currentvalue": {"prefix": "iteration "}, "y": -0.02}],
    }


def _note(text: str) -> dict:
    return {
        "text": text,
        "xref": "paper",
        "yref": "paper",
        "x": 1.0,
        "y": 1.06,
        "showarrow": False,
        "xanchor": "right",
    }
