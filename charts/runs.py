"""Figures of a run's draws: a 2-D density with chains on top, traces and marginal histograms.

Pure: numpy arrays in, plotly Figures out. Densities are given as log densities (-U up to a
constant) on a grid, ``log_density[j, i]`` at ``(xs[i], ys[j])``; positions are chain-batched
as the store records them, so a page passes ``position[:, chains, k]`` slices straight through.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from charts.landscape import PALETTE
from charts.style import FONT, LEGEND


def _color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def relative_log_density(log_density, floor: float = 20.0) -> np.ndarray:
    """log density minus its finite maximum, clipped below at -``floor`` (NaN stays NaN)."""
    z = np.array(log_density, dtype=float)
    z[z == np.inf] = np.nan  # an infinite density cannot be drawn; -inf clips to the floor
    finite = z[np.isfinite(z)]
    if finite.size == 0:
        return np.full(z.shape, np.nan)
    return np.maximum(z - finite.max(), -floor)


def density_figure(
    xs: Sequence[float],
    ys: Sequence[float],
    log_density,
    paths=None,
    cloud=None,
    labels: Sequence[str] = ("w0", "w1"),
    *,
    log_scale: bool = True,
    floor: float = 20.0,
    title: str | None = None,
    height: int | None = None,
    divergent=None,
) -> go.Figure:
    """Contours of the target with chains and draws on top.

    ``log_density`` [ny, nx]: -U on the grid (any additive constant). Contours show -U relative
    to its maximum (``log_scale``, clipped at -``floor``) or the relative density exp(-U).
    ``paths`` [chains, k, 2]: each chain's last k positions, drawn as a line ending in a marker.
    ``cloud`` [n, 2]: draws as small orange markers. ``divergent`` [m, 2]: the draws whose
    step hit a divergent transition (NUTS), as red crosses. (Each proposal, accepted or
    rejected, is the animated view's: ``charts.animation``.)
    """
    z = relative_log_density(log_density, floor)
    view = ((xs[0], xs[-1]), (ys[0], ys[-1]))
    colorbar = "−U − max(−U) (log density)" if log_scale else "e^(−U) / max (density)"
    fig = go.Figure(
        go.Contour(
            x=np.asarray(xs, dtype=float),
            y=np.asarray(ys, dtype=float),
            z=z if log_scale else np.exp(z),
            colorscale="Blues",
            ncontours=20,
            contours={"coloring": "fill", "showlines": False},
            colorbar={"title": {"text": colorbar, "side": "right"}},
            hovertemplate=f"{labels[0]}=%{{x:.3g}}<br>{labels[1]}=%{{y:.3g}}<br>%{{z:.3g}}"
            "<extra></extra>",
            name="target",
        )
    )
    _draws_and_paths(fig, cloud, paths)
    if divergent is not None and len(divergent):
        divergent = np.asarray(divergent, dtype=float)
        fig.add_trace(
            go.Scatter(
                x=divergent[:, 0],
                y=divergent[:, 1],
                mode="markers",
                marker={"size": 8, "color": "rgb(214, 39, 40)", "symbol": "x"},
                name="divergent transitions",
            )
        )
    fig.update_layout(
        title=title,
        height=height,
        # one scale on both axes: the donut is a ring, not an ellipse
        xaxis={"title": labels[0], "range": [float(v) for v in view[0]], "constrain": "domain"},
        yaxis={
            "title": labels[1],
            "range": [float(v) for v in view[1]],
            "scaleanchor": "x",
            "scaleratio": 1,
            "constrain": "domain",
        },
        legend=LEGEND,
        font=FONT,
        margin={"l": 50, "r": 20, "t": 40 if title else 10, "b": 40},
    )
    return fig


def _draws_and_paths(fig: go.Figure, cloud, paths) -> None:
    """``density_figure``'s draws as small orange markers and each chain's path as a line
    ending in a larger marker, on top of its contours."""
    if cloud is not None and len(cloud):
        cloud = np.asarray(cloud, dtype=float)
        fig.add_trace(
            go.Scatter(
                x=cloud[:, 0],
                y=cloud[:, 1],
                mode="markers",
                # orange on the blue fill: visible on the darkest contours too
                marker={"size": 4, "color": "rgba(255, 127, 14, 0.55)"},
                name="draws",
                hoverinfo="skip",
            )
        )
    if paths is not None:
        paths = np.asarray(paths, dtype=float)
        for i, path in enumerate(paths):
            fig.add_trace(
                go.Scatter(
                    x=path[:, 0],
                    y=path[:, 1],
                    mode="lines+markers",
                    line={"color": _color(i), "width": 1.5},
                    marker={"size": [3] * (len(path) - 1) + [9], "color": _color(i)},
                    name=f"chain {i}",
                )
            )


def trace_figure(
    step,
    values,
    title: str | None,
    y_title: str,
    names: Sequence[str] | None = None,
    x_title: str = "step",
    y_range: Sequence[float] | None = None,
    burn_in: float | None = None,
    height: int | None = None,
) -> go.Figure:
    """One line per column of ``values`` [T, series] against ``step`` [T] (chains by default);
    ``burn_in`` marks the end of the burn-in with a dashed line."""
    step = np.asarray(step)
    values = np.asarray(values, dtype=float)
    if values.ndim == 1:
        values = values[:, None]
    names = [f"chain {i}" for i in range(values.shape[1])] if names is None else list(names)
    fig = go.Figure(
        [
            go.Scatter(
                x=step, y=values[:, i], mode="lines", line={"color": _color(i)}, name=names[i]
            )
            for i in range(values.shape[1])
        ]
    )
    if burn_in:
        fig.add_vline(  # labelled at the bottom: the title and legend hold the top
            x=burn_in,
            line={"dash": "dash", "color": "grey"},
            annotation_text="burn-in",
            annotation_position="bottom right",
        )
    fig.update_layout(
        title=title,
        height=height,
        font=FONT,
        xaxis={"title": x_title},
        yaxis={"title": y_title, **({"range": list(y_range)} if y_range is not None else {})},
        legend=LEGEND,
        showlegend=values.shape[1] <= 16,
        margin={"l": 50, "r": 20, "t": 40 if title else 10, "b": 40},
    )
    return fig


def histogram_edges(lo: float, hi: float, bins: int = 60) -> np.ndarray:
    """``bins`` equal bins over [lo, hi]: share them to compare several samplers' histograms.
    A range too narrow to split (constant draws, 1e20 as much as 0) is widened around its
    middle, so every bin has a width."""
    lo, hi = float(lo), float(hi)
    t = np.linspace(0.0, 1.0, int(bins) + 1)
    edges = lo * (1 - t) + hi * t  # not lo + (hi - lo) t: hi - lo overflows past 1.8e308
    if not np.all(np.diff(edges) > 0):
        mid = lo / 2 + hi / 2
        half = max(0.5, 1e-6 * abs(mid))
        edges = (mid - half) * (1 - t) + (mid + half) * t
    return edges


def histogram_density(samples, edges) -> np.ndarray:
    """Probability density per bin: counts / (finite draws x bin width). Draws outside the
    edges count in the total, so the bars show the true density where they are drawn instead
    of renormalising the part that falls in range."""
    x = np.asarray(samples, dtype=float).ravel()
    x = x[np.isfinite(x)]
    edges = np.asarray(edges, dtype=float)
    if x.size == 0:
        return np.zeros(len(edges) - 1)
    counts, _ = np.histogram(x, edges)
    return counts / (x.size * np.diff(edges))


def histogram_figure(
    samples,
    exact_x=None,
    exact_density=None,
    title: str | None = None,
    x_title: str = "value",
    *,
    edges=None,
    bins: int = 60,
    exact_name: str = "exact",
    height: int | None = None,
) -> go.Figure:
    """Normalised histogram(s) (probability density) with the exact marginal overlaid.

    ``samples``: draws [n], or a mapping name -> draws to overlay several samplers on the same
    ``edges`` (default: ``bins`` bins over the finite range of all draws). ``exact_x``,
    ``exact_density``: the exact marginal density on a grid (None: no curve).
    """
    series = dict(samples) if isinstance(samples, Mapping) else {"draws": samples}
    if edges is None:
        pooled = np.concatenate([np.asarray(v, dtype=float).ravel() for v in series.values()])
        pooled = pooled[np.isfinite(pooled)]
        lo, hi = (pooled.min(), pooled.max()) if pooled.size else (0.0, 1.0)
        edges = histogram_edges(lo, hi, bins)
    edges = np.asarray(edges, dtype=float)
    centers, widths = edges[:-1] / 2 + edges[1:] / 2, np.diff(edges)  # no overflow at 1e308
    overlay = len(series) > 1
    fig = go.Figure()
    for i, (name, draws) in enumerate(series.items()):
        fig.add_trace(
            go.Bar(
                x=centers,
                y=histogram_density(draws, edges),
                width=widths,
                name=name,
                marker={"color": _color(i), "line": {"width": 0}},
                opacity=0.5 if overlay else 0.75,
            )
        )
    if exact_x is not None and exact_density is not None:
        fig.add_trace(
            go.Scatter(
                x=np.asarray(exact_x, dtype=float),
                y=np.asarray(exact_density, dtype=float),
                mode="lines",
                line={"color": "black", "width": 2},
                name=exact_name,
            )
        )
    fig.update_layout(
        title=title,
        height=height,
        barmode="overlay",
        bargap=0,
        xaxis={"title": x_title, "range": [float(edges[0]), float(edges[-1])]},
        yaxis={"title": "probability density"},
        font=FONT,
        legend=LEGEND,  # inside the plot it covered the peak of a narrow marginal
        margin={"l": 50, "r": 20, "t": 40 if title else 10, "b": 40},
    )
    return fig


def iat_direction_figure(
    variances,
    iats: Mapping[str, Sequence[float] | None],
    title: str | None = "IAT per direction",
    *,
    unit: str = "steps",
    height: int | None = None,
) -> go.Figure:
    """Grouped bars of each sampler's integrated autocorrelation time along each direction, on
    a log axis, with a dashed line at 1 (ideal: independent draws).

    ``variances`` [k]: the variance along each direction, largest (slowest) first; direction j
    is labelled "j+1 (var v)". ``iats``: sampler -> IAT per direction [k] (None or NaN: no bar),
    one trace per sampler."""
    variances = np.asarray(variances, dtype=float).ravel()
    names = [f"{j + 1} (var {v:.3g})" for j, v in enumerate(variances)]
    fig = go.Figure()
    for i, (name, values) in enumerate(iats.items()):
        y = np.full(len(names), np.nan) if values is None else np.asarray(values, dtype=float)
        fig.add_trace(
            go.Bar(
                x=names,
                y=np.where(np.isfinite(y) & (y > 0), y, np.nan),
                name=name,
                marker={"color": _color(i)},
                hovertemplate=f"{name}<br>direction %{{x}}<br>IAT %{{y:.3g}} {unit}<extra></extra>",
            )
        )
    # The line is a shape (data coordinates, so y = 1); an annotation on a log axis takes
    # log10 of its position (plotly.js), so its label sits at y = 0.
    fig.add_shape(
        type="line",
        xref="paper",
        x0=0,
        x1=1,
        yref="y",
        y0=1.0,
        y1=1.0,
        line={"dash": "dash", "color": "black"},
    )
    fig.add_annotation(
        xref="paper",
        x=0,
        yref="y",
        y=0.0,
        text="ideal (τ = 1)",
        showarrow=False,
        xanchor="left",
        yanchor="bottom",
    )
    fig.update_layout(
        title=title,
        height=height,
        barmode="group",
        xaxis={"title": "direction (1 = widest, slowest)", "type": "category"},
        yaxis={"title": f"IAT τ ({unit}, log scale)", "type": "log", "dtick": 1},
        font=FONT,
        legend=LEGEND,
        margin={"l": 50, "r": 20, "t": 40 if title else 10, "b": 40},
    )
    return fig
