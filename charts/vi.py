"""Figures of the variational n-scan (the VI paper; docs/methods/vi.md): each fit's objective
against its epochs, and -Psi against log n with the fitted slope beside the exact -log Z_bar and the
true lambda.

Inputs are what ``studies.vi_scan.results`` returns: cells (n, source, status, psi, psi_se,
log_z_bar, curve {"epoch", "objective"} or None), slopes {source: {slope, slope_se, intercept}
or None}, log_z_bar_fit and true_lc. A value that is None or not finite is left out, never
drawn as 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative, sample_colorscale

from charts.style import study_layout

SOURCES = ("gamma", "gaussian")
LABELS = {"gamma": "nf_gamma", "gaussian": "nf_gaussian"}
COLOURS = {"gamma": qualitative.Plotly[1], "gaussian": qualitative.Plotly[0]}
SCALES = {"gamma": "Oranges", "gaussian": "Blues"}  # one shade per n in the curves
EXACT_COLOUR = "black"


def _finite(value) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _layout(fig: go.Figure, title: str, x: dict, y: dict, height: int = 420) -> go.Figure:
    return study_layout(fig, height, left=70, title=title, xaxis=x, yaxis=y)


def objective_curves(cells: Sequence[Mapping]) -> go.Figure:
    """Each fit's per-epoch objective (the mean of its minibatch Psi estimates), one line per n
    and source, darker for larger n; a fit still going is dotted and ends where its records
    end. The first epochs can sit thousands of nats below the end, so the y axis starts at the
    lowest value any fit reached after its first tenth of epochs."""
    fig = go.Figure()
    floor = []
    for source in SOURCES:
        mine = sorted((c for c in cells if c.get("source") == source), key=lambda c: c["n"])
        shades = sample_colorscale(SCALES[source], np.linspace(0.45, 1.0, max(len(mine), 1)))
        for shade, cell in zip(shades, mine, strict=False):
            curve = cell.get("curve") or {}
            epoch = np.asarray(curve.get("epoch", ()), dtype=float)
            value = np.asarray(curve.get("objective", ()), dtype=float)
            keep = np.isfinite(value)
            if not keep.any():
                continue
            epoch, value = epoch[keep], value[keep]
            floor.append(value[len(value) // 10 :].min())
            running = "" if cell.get("status") == "completed" else f" ({cell.get('status')})"
            fig.add_trace(
                go.Scatter(
                    x=epoch,
                    y=value,
                    mode="lines",
                    name=f"{LABELS[source]} n = {cell['n']}{running}",
                    line={"color": shade, "dash": "solid" if not running else "dot"},
                    hovertemplate=f"{LABELS[source]} n = {cell['n']}<br>epoch %{{x}}"
                    "<br>objective %{y:.4g}<extra></extra>",
                )
            )
    y = {"title": "objective Ψ (epoch mean)"}
    if floor:
        tops = [max(t.y) for t in fig.data]
        low, high = min(floor), max(tops)
        pad = 0.05 * (high - low) or 1.0
        y["range"] = [low - pad, high + pad]
    if not fig.data:
        fig.add_annotation(
            text="waiting for the first epochs", showarrow=False, xref="paper", yref="paper"
        )
    return _layout(fig, "Each fit's objective as it trains", {"title": "epoch"}, y)


def _fitted_line(fig: go.Figure, log_n: np.ndarray, fit: Mapping, line: dict) -> None:
    """A least-squares line (slope, intercept) across the points' range of log n."""
    x = np.array([log_n.min(), log_n.max()])
    y = fit["slope"] * x + fit["intercept"]
    fig.add_trace(go.Scatter(x=x, y=y, mode="lines", line=line, showlegend=False, hoverinfo="skip"))


def _source_points(fig: go.Figure, source: str, points: list, fit: Mapping | None) -> tuple:
    """One source's -Psi points (n, -Psi, SE) with 2 SE bars and its fitted line; returns them
    as (log n, -Psi), an anchor for the line of the true slope."""
    log_n = np.log([p[0] for p in points])
    value = np.array([p[1] for p in points])
    se = np.array([2 * (p[2] or 0.0) for p in points])
    slope = "" if not fit else f", slope {fit['slope']:.3f}"
    if fit and fit.get("slope_se") is not None:
        slope += f" ± {fit['slope_se']:.3f}"
    fig.add_trace(
        go.Scatter(
            x=log_n,
            y=value,
            mode="markers",
            name=f"−Ψ {LABELS[source]}{slope}",
            marker={"color": COLOURS[source], "size": 10},
            error_y={"type": "data", "array": se, "visible": True},
            customdata=np.array([p[0] for p in points]),
            hovertemplate=f"{LABELS[source]}<br>n %{{customdata}}<br>−Ψ %{{y:.4g}}<extra></extra>",
        )
    )
    if fit:
        _fitted_line(fig, log_n, fit, {"color": COLOURS[source]})
    return log_n, value


def free_energy_figure(
    cells: Sequence[Mapping],
    slopes: Mapping[str, Mapping | None],
    exact_fit: Mapping | None = None,
    true_lc: Mapping | None = None,
) -> go.Figure:
    """-Psi against log n per source (bars: 2 Monte Carlo SEs of the final estimate) with its
    least-squares line, whose slope estimates lambda_vb >= lambda; the exact -log Z_bar where
    known (the free energy, which -Psi bounds from above at every n) with its own line; and a
    line of slope lambda (the true learning coefficient) through the exact points' mean, or the
    first source's, for comparison."""
    fig = go.Figure()
    anchor = None
    for source in SOURCES:
        points = [
            (c["n"], -c["psi"], c.get("psi_se"))
            for c in cells
            if c.get("source") == source and _finite(c.get("psi")) is not None
        ]
        if points:
            drawn = _source_points(fig, source, sorted(points), slopes.get(source))
            anchor = anchor or drawn
    # one exact value per n (both sources' fits compute the same quadrature)
    exact = sorted(
        {(c["n"], -c["log_z_bar"]) for c in cells if _finite(c.get("log_z_bar")) is not None}
    )
    if exact:
        log_n = np.log([p[0] for p in exact])
        value = np.array([p[1] for p in exact])
        slope = "" if not exact_fit else f", slope {exact_fit['slope']:.3f}"
        fig.add_trace(
            go.Scatter(
                x=log_n,
                y=value,
                mode="markers+lines" if not exact_fit else "markers",
                name=f"−log Z̄ exact{slope}",
                marker={"color": EXACT_COLOUR, "symbol": "diamond", "size": 9},
                line={"color": EXACT_COLOUR, "dash": "dot"},
            )
        )
        if exact_fit:
            _fitted_line(fig, log_n, exact_fit, {"color": EXACT_COLOUR, "dash": "dot"})
        anchor = (log_n, value)
    if true_lc and anchor is not None and len(anchor[0]) >= 1:
        log_n, value = anchor
        lam = true_lc["lambda"]
        x = np.array([log_n.min(), log_n.max()])
        centre = value.mean() - lam * log_n.mean()
        fig.add_trace(
            go.Scatter(
                x=x,
                y=lam * x + centre,
                mode="lines",
                name=f"slope λ = {lam:g} (true)",
                line={"color": "grey", "dash": "dash"},
                hoverinfo="skip",
            )
        )
    if not fig.data:
        fig.add_annotation(text="no finished fit yet", showarrow=False, xref="paper", yref="paper")
    return _layout(
        fig,
        "Free energy against log n: the slope estimates the learning coefficient",
        {"title": "log n"},
        {"title": "−Ψ (nats; bars: ±2 SE)"},
    )
