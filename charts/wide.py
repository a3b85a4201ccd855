"""Figures of the repriorisation study (Hron et al. 2022): per-step ESS against width (Fig. 7 left),
acceptance and adapted step per cell, posterior slices in theta and in phi (Fig. 5), and the KL of
the posterior from the prior against width (their Thm 2.1; docs/methods/wide-networks.md).

Inputs are what ``studies.reprior.results`` (cells: width, parametrisation, status, ess
{"theta", "f": {min, mean, max, draws} or None}, acceptance, step), ``studies.wide.slices`` and
``studies.wide.kl_table`` return. A value that is None, NaN or not positive (on a log axis) is left
out of a figure, never drawn as zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from charts.landscape import COLORSCALE
from charts.style import study_layout

PARAMETRISATIONS = ("standard", "reprior")
LABELS = {"standard": "standard (θ)", "reprior": "repriorised (φ)"}
COLOURS = {"standard": qualitative.Plotly[0], "reprior": qualitative.Plotly[1]}
QUANTITIES = {"f": "f(X_test)", "theta": "θ"}
CLIP_QUANTILE = 0.95  # slices: the colour scale stops here, so one steep corner hides nothing
CONTOURS = 15  # contour levels between a slice's floor and its clip


def _number(value) -> float | None:
    """``value`` as a finite float, else None."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _positive(value) -> float | None:
    value = _number(value)
    return value if value is not None and value > 0 else None


def _width_ticks(widths) -> dict:
    """A log width axis ticked at the widths drawn (4, 8, ... 512), not at 2, 3, ... 9."""
    ticks = sorted({int(w) for w in widths})
    if not ticks:
        return {"type": "log"}
    return {"type": "log", "tickvals": ticks, "ticktext": [str(w) for w in ticks]}


def _log_layout(
    fig: go.Figure, title: str, x: str, y: str, widths=(), height: int = 420
) -> go.Figure:
    study_layout(
        fig,
        height,
        title=title,
        xaxis={"title": x, **_width_ticks(widths)},
        yaxis={"title": y, "type": "log"},
    )
    fig.update_yaxes(exponentformat="power")
    return fig


def ess_figure(cells: Sequence[Mapping], quantity: str = "f") -> go.Figure:
    """Per-step ESS of ``quantity`` ("f": f(X_test), "theta": θ) against width, log-log, one
    trace per parametrisation: the mean over the random projections, bars from the smallest to
    the largest. A run still going is drawn hollow (its ESS from the records so far)."""
    fig, drawn = go.Figure(), []
    for parametrisation in PARAMETRISATIONS:
        points = []
        for cell in cells:
            if cell.get("parametrisation") != parametrisation:
                continue
            ess = (cell.get("ess") or {}).get(quantity) or {}
            mean = _positive(ess.get("mean"))
            if mean is None:
                continue
            low, high = _number(ess.get("min")), _number(ess.get("max"))
            points.append((cell["width"], mean, low, high, cell.get("status"), ess.get("draws")))
        if not points:
            continue
        points.sort(key=lambda p: p[0])
        drawn += [p[0] for p in points]
        width = np.array([p[0] for p in points], dtype=float)
        mean = np.array([p[1] for p in points], dtype=float)
        above = np.array([0.0 if p[3] is None else max(p[3] - p[1], 0.0) for p in points])
        below = np.array([0.0 if p[2] is None else max(p[1] - p[2], 0.0) for p in points])
        status = [p[4] or "" for p in points]
        fig.add_trace(
            go.Scatter(
                x=width,
                y=mean,
                mode="lines+markers",
                name=LABELS[parametrisation],
                line={"color": COLOURS[parametrisation]},
                marker={
                    "color": COLOURS[parametrisation],
                    "size": 10,
                    "symbol": ["circle" if s == "completed" else "circle-open" for s in status],
                },
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": above,
                    "arrayminus": below,
                    "visible": True,
                },
                customdata=np.array(
                    [[s, "" if p[5] is None else p[5]] for s, p in zip(status, points, strict=True)]
                ),
                hovertemplate=f"{LABELS[parametrisation]}<br>width %{{x}}<br>ESS/step %{{y:.3g}}"
                "<br>%{customdata[0]}, %{customdata[1]} draws<extra></extra>",
            )
        )
    name = QUANTITIES.get(quantity, quantity)
    return _log_layout(
        fig,
        f"Per-step ESS of {name} against width",
        "hidden-layer width (log scale)",
        "per-step ESS (bars: min–max)",
        drawn,
    )


def acceptance_figure(
    cells: Sequence[Mapping], mh: bool, band: Sequence[float], floor: float
) -> go.Figure:
    """Per cell, against width: the acceptance after the warm-up (left; with MH skipped, the
    mean acceptance probability) with the ``band`` it should stay in (MH on) or the ``floor``
    it should stay above (MH skipped), and the step the warm-up adapted to (right, log-log)."""
    fig = make_subplots(
        rows=1,
        cols=2,
        horizontal_spacing=0.12,
        subplot_titles=(
            "acceptance" if mh else "mean acceptance probability (MH skipped)",
            "adapted step ε",
        ),
    )
    low = 1.0
    for parametrisation in PARAMETRISATIONS:
        rows = sorted(
            (c for c in cells if c.get("parametrisation") == parametrisation),
            key=lambda c: c["width"],
        )
        low = min(low, _acceptance_and_step(fig, parametrisation, rows))
    if mh:
        fig.add_hrect(
            y0=band[0],
            y1=band[1],
            fillcolor="green",
            opacity=0.12,
            line_width=0,
            row=1,
            col=1,
        )
    else:
        fig.add_hline(y=floor, line={"color": "green", "dash": "dash"}, row=1, col=1)
    bottom = min(low, band[0] if mh else floor) - 0.03
    fig.update_yaxes(range=[bottom, 1.01], title="after the warm-up", row=1, col=1)
    fig.update_yaxes(type="log", exponentformat="power", title="ε", row=1, col=2)
    fig.update_xaxes(title="width (log scale)", **_width_ticks(c["width"] for c in cells))
    study_layout(fig, 400, top=70, title="Acceptance and adapted step against width")
    return fig


def _acceptance_and_step(fig: go.Figure, parametrisation: str, rows: list) -> float:
    """One parametrisation's acceptance (left; hollow while a run goes) and adapted step
    (right) against width; returns its lowest acceptance (1 when there is none yet)."""
    accept = [(c["width"], c.get("status"), _number(c.get("acceptance"))) for c in rows]
    accept = [(w, s, a) for w, s, a in accept if a is not None]
    step = [(c["width"], _positive(c.get("step"))) for c in rows]
    step = [(w, s) for w, s in step if s is not None]
    style = {"color": COLOURS[parametrisation]}
    if accept:
        fig.add_trace(
            go.Scatter(
                x=[w for w, _, _ in accept],
                y=[a for _, _, a in accept],
                mode="lines+markers",
                name=LABELS[parametrisation],
                legendgroup=parametrisation,
                line=style,
                marker={  # hollow while the run goes: its acceptance so far
                    **style,
                    "size": 9,
                    "symbol": [
                        "circle" if s == "completed" else "circle-open" for _, s, _ in accept
                    ],
                },
            ),
            row=1,
            col=1,
        )
    if step:
        fig.add_trace(
            go.Scatter(
                x=[w for w, _ in step],
                y=[s for _, s in step],
                mode="lines+markers",
                name=LABELS[parametrisation],
                legendgroup=parametrisation,
                showlegend=not accept,
                line=style,
                marker={**style, "size": 9},
            ),
            row=1,
            col=2,
        )
    return min((a for _, _, a in accept), default=1.0)


def clipped(z, quantile: float = CLIP_QUANTILE) -> tuple[np.ndarray, float, float]:
    """``z`` clipped to [its smallest finite value, its ``quantile``] (NaN kept, ±inf to the
    ends), and those ends: the rule both slices are drawn by."""
    z = np.asarray(z, dtype=float)
    finite = z[np.isfinite(z)]
    if not finite.size:
        return z, math.nan, math.nan
    low, high = float(finite.min()), float(np.quantile(finite, quantile))
    if high <= low:
        high = low + max(abs(low), 1.0) * 1e-9
    return np.clip(z, low, high), low, high


def _span(z) -> str:
    """The range of ``z``'s finite values, as a subplot title shows it."""
    z = np.asarray(z, dtype=float)
    finite = z[np.isfinite(z)]
    return f"{finite.min():.3g} … {finite.max():.3g}" if finite.size else "no finite values"


def _slice_panels(s: Mapping, names: tuple, shared: bool, quantile: float) -> dict:
    """Each slice clipped (``clipped``), with its ends: its own, or (``shared``) one range from
    the lower of the two floors to the higher of the two tops."""
    panels = {name: clipped(s[name], quantile) for name in names}
    if shared:
        lows = [p[1] for p in panels.values() if math.isfinite(p[1])]
        highs = [p[2] for p in panels.values() if math.isfinite(p[2])]
        if lows and highs:
            low, high = min(lows), max(highs)
            panels = {
                name: (np.clip(np.asarray(s[name], dtype=float), low, high), low, high)
                for name in names
            }
    return panels


def _colour_axes(panels: dict, shared: bool) -> dict:
    """The slices' colour axes: one bar for both (``shared``), or one beside each panel."""
    bar = {"len": 0.8, "thickness": 14, "title": "−log p − centre"}
    ends = [(p[1], p[2]) if math.isfinite(p[1]) else (None, None) for p in panels.values()]
    axes = {
        "coloraxis": {
            "colorscale": COLORSCALE,
            "colorbar": {**bar, "x": 1.0 if shared else 0.42},
            "cmin": ends[0][0],
            "cmax": ends[0][1],
        }
    }
    if not shared:
        axes["coloraxis2"] = {
            "colorscale": COLORSCALE,
            "colorbar": {**bar, "x": 1.0},
            "cmin": ends[1][0],
            "cmax": ends[1][1],
        }
    return axes


def slice_figure(s: Mapping, shared: bool = False, quantile: float = CLIP_QUANTILE) -> go.Figure:
    """The two 2-D slices of ``studies.wide.slices`` side by side: −log p minus its value at the
    centre, on the plane (a, b) through the run's last draw, in θ (left) and in φ (right).

    Colours run from the smallest value to the ``quantile`` (``clipped``), by the same rule in
    both panels: each its own bar (``shared`` False: the shapes compare, a stretched valley
    against a round bowl), or one bar from the lower of the two floors to the higher of the two
    tops (``shared``: the heights compare, and the smoother slice shows fewer contours)."""
    a, b = np.asarray(s["a"], dtype=float), np.asarray(s["b"], dtype=float)
    names = {"theta": "θ (original)", "phi": "φ (repriorised)"}
    panels = _slice_panels(s, tuple(names), shared, quantile)
    fig = make_subplots(
        rows=1,
        cols=2,
        horizontal_spacing=0.16,
        subplot_titles=[f"{label}: {_span(s[name])}" for name, label in names.items()],
    )
    for col, (name, (z, low, high)) in enumerate(panels.items(), start=1):
        raw = np.asarray(s[name], dtype=float)
        levels = {}
        if math.isfinite(low) and math.isfinite(high):  # the same levels where the bar is shared
            levels = {"start": low, "end": high, "size": (high - low) / CONTOURS}
        fig.add_trace(
            go.Contour(
                x=a,
                y=b,
                z=z.T,  # [i, j] is (a[i], b[j]): a row of a plotly z is one y
                customdata=raw.T,
                autocontour=not levels,
                contours=levels or None,
                coloraxis="coloraxis" if col == 1 or shared else "coloraxis2",
                name=names[name],
                hovertemplate="a %{x:.3g}, b %{y:.3g}<br>−log p − centre %{customdata:.4g}"
                "<extra></extra>",
            ),
            row=1,
            col=col,
        )
        fig.add_trace(
            go.Scatter(
                x=[0.0],
                y=[0.0],
                mode="markers",
                marker={"symbol": "x", "color": "white", "size": 12, "line": {"width": 1}},
                name="the run's last draw",
                showlegend=col == 1,
                hoverinfo="skip",
            ),
            row=1,
            col=col,
        )
        anchor = "x" if col == 1 else "x2"
        fig.update_yaxes(scaleanchor=anchor, scaleratio=1, title="b", row=1, col=col)
        fig.update_xaxes(title="a", constrain="domain", row=1, col=col)
    axes = _colour_axes(panels, shared)
    study_layout(
        fig,
        460,
        top=80,
        title=f"Posterior slices through the last draw (width {s.get('width')}, "
        f"{LABELS.get(s.get('parametrisation'), s.get('parametrisation'))} run)",
        **axes,
    )
    return fig


def slice_line_figure(s: Mapping) -> go.Figure:
    """The 1-D slices along the plane's first direction: −log p minus its centre value in θ
    and in φ on one axis, so their heights compare."""
    a = np.asarray(s["a"], dtype=float)
    fig = go.Figure()
    for name, label, colour in (
        ("line_theta", "in θ (original)", COLOURS["standard"]),
        ("line_phi", "in φ (repriorised)", COLOURS["reprior"]),
    ):
        fig.add_trace(
            go.Scatter(
                x=a,
                y=np.asarray(s[name], dtype=float),
                mode="lines",
                name=label,
                line={"color": colour, "width": 3},
            )
        )
    study_layout(
        fig,
        380,
        title="−log p along one random direction through the last draw",
        xaxis={"title": "a (distance along the direction)"},
        yaxis={"title": "−log p − its value at the draw"},
    )
    return fig


def kl_figure(rows: Sequence[Mapping]) -> go.Figure:
    """KL(q ‖ p) of the posterior from the prior against width, log-log (``studies.wide.kl_table``
    rows): in φ (``reprior``, falls toward 0 as the width grows: Thm 2.1) and in θ
    (``standard``, stays put: Prop. 2.3)."""
    fig = go.Figure()
    for key, label in (
        ("reprior", "KL(q ‖ p_φ), repriorised"),
        ("standard", "KL(q ‖ p_θ), standard"),
    ):
        points = sorted(
            (r["width"], _positive(r.get(key))) for r in rows if _positive(r.get(key)) is not None
        )
        if not points:
            continue
        fig.add_trace(
            go.Scatter(
                x=[w for w, _ in points],
                y=[v for _, v in points],
                mode="lines+markers",
                name=label,
                line={"color": COLOURS[key]},
                marker={"color": COLOURS[key], "size": 10},
                hovertemplate=f"{label}<br>width %{{x}}<br>KL %{{y:.4g}}<extra></extra>",
            )
        )
    draws = sorted({r.get("draws") for r in rows if r.get("draws")})
    depth = sorted({r.get("depth") for r in rows if r.get("depth") is not None})
    n = sorted({r.get("n") for r in rows if r.get("n") is not None})
    about = ", ".join(
        f"{k} {v[0]}"
        for k, v in (("depth", depth), ("n", n), ("prior draws", draws))
        if len(v) == 1
    )
    return _log_layout(
        fig,
        "KL of the posterior from the prior against width" + (f" ({about})" if about else ""),
        "hidden-layer width (log scale)",
        "KL(q ‖ p) (nats, log scale)",
        [r["width"] for r in rows],
    )
