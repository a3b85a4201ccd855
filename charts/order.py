"""The integrator-order study's figure (TATi: Heber et al. 2020, Figs. 2-4): the relative error of
<virial> or <K> against the step size on log-log axes, one colour per integrator, with each
one's fitted line and slope, and guide lines of slope 1 and 2.

Inputs are ``studies.order.results``'s cells and fits; a cell not finished yet is absent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative

from charts.style import study_layout

PALETTE = qualitative.Plotly
NOISE_FLOOR = 2.0  # as studies.order.NOISE_FLOOR: a point within 2 SE of zero is drawn hollow
LABELS = {"virial": "⟨w · ∇U⟩", "kinetic": "⟨K⟩"}


def order_figure(cells: Sequence[dict], fits: Sequence[dict], observable: str) -> go.Figure:
    """|relative error| against h per integrator (log-log) with +-SE bars; points the fit left
    out (within the noise floor) hollow; the fitted line over the fitted range, its slope in
    the legend; dotted guides of slope 1 and 2 through the middle of the data."""
    fig = go.Figure()
    colour = {f["sampler"]: PALETTE[i % len(PALETTE)] for i, f in enumerate(fits)}
    all_h, all_e = [], []
    for fit in fits:
        rows = sorted(
            (c for c in cells if c["sampler"] == fit["sampler"] and c["error"] is not None),
            key=lambda c: c["step_size"],
        )
        if rows:
            h, fitted = _integrator(fig, fit, rows, colour[fit["sampler"]])
            all_h += h
            all_e += fitted
    if all_h and all_e:
        _guides(fig, all_h, all_e)
    label = LABELS.get(observable, observable)
    study_layout(
        fig,
        480,
        title=f"Relative error of {label} against the step size",
        xaxis={"title": "step size h (log scale)", "type": "log"},
        yaxis={"title": f"|{label} − exact| / exact (log scale)", "type": "log"},
    )
    fig.update_xaxes(exponentformat="power")
    fig.update_yaxes(exponentformat="power")
    return fig


def _integrator(fig: go.Figure, fit: dict, rows: list[dict], colour: str) -> tuple[list, list]:
    """One integrator's points (hollow within the noise floor) and its fitted line; returns
    every step size and the errors above the floor, for the guides."""
    name = fit["sampler"]
    h = np.array([c["step_size"] for c in rows], dtype=float)
    e = np.abs([c["error"] for c in rows])
    se = np.array([c["error_se"] or 0.0 for c in rows], dtype=float)
    floor = e <= NOISE_FLOOR * se
    shown = np.maximum(e, 1e-12)  # an exact zero has no place on a log axis
    slope = ""
    if fit["slope"] is not None:
        slope = f": slope {fit['slope']:.2f} ± {fit['slope_se']:.2f}"
    fig.add_trace(
        go.Scatter(
            x=h,
            y=shown,
            mode="markers",
            name=f"{name}{slope} (order {fit['expected']})",
            legendgroup=name,
            marker={
                "color": colour,
                "size": 10,
                "symbol": ["circle-open" if f else "circle" for f in floor],
            },
            error_y={"type": "data", "array": se, "visible": True},
            hovertemplate=f"{name}<br>h %{{x:.4g}}<br>|error| %{{y:.3g}}<extra></extra>",
        )
    )
    if fit["slope"] is not None:
        used = h[~floor]
        x = np.geomspace(used.min(), used.max(), 20)
        fig.add_trace(
            go.Scatter(
                x=x,
                y=np.exp(fit["intercept"]) * x ** fit["slope"],
                mode="lines",
                line={"color": colour},
                legendgroup=name,
                showlegend=False,
                hoverinfo="skip",
            )
        )
    return h.tolist(), shown[~floor].tolist()


def _guides(fig: go.Figure, all_h: list, all_e: list) -> None:
    """Guide lines of slope 1 and 2 through the geometric middle of the data."""
    h0, e0 = math.exp(np.mean(np.log(all_h))), math.exp(np.mean(np.log(all_e)))
    x = np.geomspace(min(all_h), max(all_h), 20)
    for order, dash in ((1, "dot"), (2, "dash")):
        fig.add_trace(
            go.Scatter(
                x=x,
                y=e0 * (x / h0) ** order,
                mode="lines",
                name=f"slope {order}",
                line={"color": "gray", "dash": dash, "width": 1},
                hoverinfo="skip",
            )
        )
