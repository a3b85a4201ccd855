"""LLC figures: the live estimate, training and chain traces, the calibration grid and the DLN
benchmark's plots (Hitchcock & Hoogland 2025, Figs. 3 and 5-8).

Inputs are what the store and ``studies`` hand out: arrays with chains on the last axis
(NaN for a chain that diverged or before the burn-in ends), calibration cells and DLN metrics
as the dicts of ``studies.calibrate.results`` and ``studies.dln.results``. None means "not
known yet".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from charts.style import LEGEND

PALETTE = qualitative.Plotly
CHAIN_COLOR = "rgba(99, 110, 250, 0.35)"
BAND_COLOR = "rgba(99, 110, 250, 0.2)"
TRUE_COLOR = "black"
FLAG_COLOR = "#d62728"
STABLE_COLOR = "#2ca02c"
PENDING_COLOR = "gray"
LLC_AXIS = "λ̂, LLC estimate (dimensionless, linear)"
STEP_AXIS = "sampler step (linear)"
STEP_SIZE_AXIS = "step size ε (log scale)"
REL_AXIS = "relative error (λ̂ − λ) / λ (linear)"
METRICS = {  # calibration quantities: curve key -> (what, short y-axis title per row)
    "llc": (LLC_AXIS, "λ̂ (linear)"),
    "distance": ("distance |w − w0| (parameter units, linear)", "|w − w0| (linear)"),
    "acceptance": ("MALA acceptance of an SGLD step (probability 0-1)", "acceptance (0-1)"),
}


def _nan(values) -> np.ndarray:
    """An array of floats with None as NaN."""
    return np.asarray(values, dtype=float)


def _2d(values) -> np.ndarray:
    """[T, chains] floats; a 1-D series is one chain."""
    x = _nan(values)
    return x[:, None] if x.ndim == 1 else x


def _none(values: np.ndarray) -> list:
    """NaN as None, so plotly draws a gap (and the JSON stays valid)."""
    return [None if not math.isfinite(v) else float(v) for v in np.asarray(values, dtype=float)]


def chain_stats(values, band: str = "se") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of ``values`` [T, chains]: (mean, half-width, finite chains) over the finite
    chains; the half-width is the SD (ddof 1) or the SE = SD / sqrt(chains); 0 for one chain."""
    if band not in ("se", "sd"):
        raise ValueError(f"band must be 'se' or 'sd', got {band!r}")
    x = _2d(values)
    good = np.isfinite(x)
    count = good.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(good, x, 0).sum(1) / count
        dev = np.where(good, x - mean[:, None], 0)
        sd = np.sqrt((dev**2).sum(1) / np.maximum(count - 1, 1))
        half = sd / np.sqrt(count) if band == "se" else sd
    mean[count == 0] = np.nan
    half[count == 0] = np.nan
    return mean, half, count


def llc_figure(
    step,
    per_chain,
    true: float | None = None,
    band: str = "se",
    title: str | None = "LLC estimate",
    chains: bool = True,
) -> go.Figure:
    """The running estimate: per-chain lines (faint), their mean with a mean +- SE (or SD) band
    over the finite chains, and the true LLC dashed when known."""
    step = np.asarray(step, dtype=float)
    mean, half, _ = chain_stats(per_chain, band)
    x = _2d(per_chain)
    mode = "lines+markers" if len(step) <= 30 else "lines"
    fig = go.Figure()
    if chains:
        for c in range(x.shape[1]):
            fig.add_trace(
                go.Scatter(
                    x=step,
                    y=_none(x[:, c]),
                    mode="lines",
                    line={"color": CHAIN_COLOR, "width": 1},
                    name="chains",
                    legendgroup="chains",
                    showlegend=c == 0,
                    hovertemplate=f"chain {c}<br>step %{{x}}<br>λ̂ %{{y:.4g}}<extra></extra>",
                )
            )
    label = "SE" if band == "se" else "SD"
    fig.add_trace(
        go.Scatter(
            x=np.concatenate([step, step[::-1]]),
            y=_none(np.concatenate([mean + half, (mean - half)[::-1]])),
            fill="toself",
            fillcolor=BAND_COLOR,
            mode="lines",
            line={"width": 0},
            name=f"mean ± {label} over chains",
            hoverinfo="skip",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=step,
            y=_none(mean),
            mode=mode,
            line={"color": PALETTE[0], "width": 2},
            name="mean over chains",
        )
    )
    if true is not None:
        fig.add_hline(
            y=true, line={"dash": "dash", "color": TRUE_COLOR}, annotation_text=f"true λ = {true:g}"
        )
        fig.add_trace(  # the legend entry of the line above (hlines have none)
            go.Scatter(
                x=[None],
                y=[None],
                mode="lines",
                line={"dash": "dash", "color": TRUE_COLOR},
                name="true LLC",
            )
        )
    fig.update_layout(
        title=title,
        xaxis={"title": {"text": STEP_AXIS}},
        yaxis={"title": {"text": LLC_AXIS}},
        legend=LEGEND,
    )
    return fig


def loss_curve(steps, losses, title: str | None = "Training loss", log_y: bool = True):
    """A loss against optimiser (or sampler) steps, on a log y axis by default."""
    fig = go.Figure(
        go.Scatter(
            x=np.asarray(steps, dtype=float),
            y=_none(_nan(losses)),
            mode="lines+markers" if len(steps) <= 30 else "lines",
            name="loss",
        )
    )
    fig.update_layout(
        title=title,
        xaxis={"title": {"text": "optimiser step (linear)"}},
        yaxis={
            "title": {"text": "training loss L_n (log scale)" if log_y else "loss L_n (linear)"},
            "type": "log" if log_y else "linear",
            "exponentformat": "power",  # 10⁻³, not 0.001 beside 1e-4
        },
    )
    return fig


def chain_traces(step, values, y_title: str, title: str | None = None, log_y: bool = False):
    """One line per chain of ``values`` [T, chains] against the step."""
    step = np.asarray(step, dtype=float)
    x = _2d(values)
    fig = go.Figure(
        [
            go.Scatter(
                x=step,
                y=_none(x[:, c]),
                mode="lines+markers" if len(step) <= 30 else "lines",
                name=f"chain {c}",
                line={"color": PALETTE[c % len(PALETTE)], "width": 1},
            )
            for c in range(x.shape[1])
        ]
    )
    fig.update_layout(
        title=title,
        xaxis={"title": {"text": STEP_AXIS}},
        yaxis={
            "title": {"text": y_title},
            "type": "log" if log_y else "linear",
            "exponentformat": "power",
        },
        showlegend=x.shape[1] <= 16,
    )
    return fig


# ---------------------------------------------------------------------------------------------
# Calibration grid.


def _key(nbeta) -> str:
    return "auto" if nbeta is None else f"{float(nbeta):g}"


def calibration_grid(
    cells: Sequence[Mapping],
    recommended: Mapping[str, float | None] | None = None,
    step_sizes: Sequence[float] | None = None,
    nbetas: Sequence[float | None] | None = None,
    metric: str = "llc",
) -> go.Figure:
    """Rows nbeta, columns step size: each cell's ``metric`` ("llc", "distance", "acceptance")
    against the step. A cell is a ``studies.calibrate.results`` row (``flags`` set: finished) or a
    running one (no ``flags``: drawn grey). Flagged cells get a red title naming the flags, the
    recommended cell of each row (``recommended[str(nbeta_value)]``) a green frame."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {list(METRICS)}, got {metric!r}")
    step_sizes = sorted(step_sizes or {c["step_size"] for c in cells})
    if nbetas is None:
        nbetas = sorted({c["nbeta"] for c in cells}, key=lambda v: -1 if v is None else v)
    rows, cols = len(nbetas), len(step_sizes)
    titles, grid = _grid_cells(cells, step_sizes, nbetas)
    fig = make_subplots(
        rows=rows,
        cols=cols,
        subplot_titles=titles,
        shared_xaxes=True,
        horizontal_spacing=min(0.08, 0.4 / max(cols, 1)),
        vertical_spacing=min(0.2, 0.6 / max(rows, 1)),  # room for two-line titles
    )
    recommended = recommended or {}
    status = []  # (suffix, colour) of each subplot title, set once the traces are in
    for i, cell in enumerate(grid):
        if cell is None:
            status.append(("queued", PENDING_COLOR))
        else:
            status.append(_calibration_cell(fig, i, cols, cell, metric, titles[i], recommended))
    for note, (suffix, color) in zip(fig.layout.annotations, status, strict=False):
        note.update(text=f"{note.text}<br>{suffix}", font={"color": color, "size": 11})
    for col in range(cols):
        fig.update_xaxes(title_text=STEP_AXIS, row=rows, col=col + 1)
    for row in range(rows):
        fig.update_yaxes(title_text=METRICS[metric][1], row=row + 1, col=1)
    fig.update_layout(
        height=max(340, 300 * rows),
        title=f"Calibration: {METRICS[metric][0]} vs step, per step size × nβ",
        margin={"t": 110},
    )
    return fig


def _grid_cells(cells: Sequence[Mapping], step_sizes, nbetas) -> tuple[list[str], list]:
    """The grid's subplot titles and its cells (None where a cell has no run yet), row by row."""
    by_key = {(_key(c["nbeta"]), float(c["step_size"])): c for c in cells}
    titles, grid = [], []
    for nbeta in nbetas:
        for eps in step_sizes:
            cell = by_key.get((_key(nbeta), float(eps)))
            grid.append(cell)
            value = nbeta if cell is None else cell.get("nbeta_value", nbeta)
            shown = "n/log n" if value is None else f"{value:.4g}"
            titles.append(f"ε = {eps:g}, nβ = {shown}")
    return titles, grid


def _calibration_cell(
    fig: go.Figure, i: int, cols: int, cell: Mapping, metric: str, title: str, recommended
) -> tuple[str, str]:
    """Subplot ``i``: the cell's curve (and the true λ), a green frame where it is the
    recommended step of its row; returns its title's (suffix, colour)."""
    row, col = divmod(i, cols)
    curve = cell.get("curve") or {}
    x = curve.get("step" if metric == "llc" else "flush_step", [])
    y = curve.get(metric, [])
    flags = cell.get("flags")
    color = PENDING_COLOR if flags is None else (FLAG_COLOR if flags else PALETTE[0])
    fig.add_trace(
        go.Scatter(
            x=list(x),
            y=_none(_nan(y)) if len(y) else [],
            mode="lines+markers" if len(x) <= 30 else "lines",
            line={"color": color},
            showlegend=False,
            name=title,
        ),
        row=row + 1,
        col=col + 1,
    )
    if metric == "llc" and cell.get("true") is not None:
        fig.add_hline(
            y=cell["true"], line={"dash": "dash", "color": TRUE_COLOR}, row=row + 1, col=col + 1
        )
    best = recommended.get(str(cell.get("nbeta_value")))
    if flags == [] and best is not None and math.isclose(best, cell["step_size"]):
        axis = "" if i == 0 else str(i + 1)
        fig.add_shape(
            type="rect",
            xref=f"x{axis} domain",
            yref=f"y{axis} domain",
            x0=0,
            x1=1,
            y0=0,
            y1=1,
            line={"color": STABLE_COLOR, "width": 3},
        )
        return "stable · recommended", STABLE_COLOR
    if flags is None:
        return cell.get("status", "running"), PENDING_COLOR
    if flags:
        return "⚠ " + ", ".join(flags), FLAG_COLOR
    return "stable", STABLE_COLOR


# ---------------------------------------------------------------------------------------------
# DLN benchmark (Hitchcock & Hoogland 2025, Figs. 3, 5-8): ``metrics`` rows of
# ``studies.dln.results``.


def _note_when_empty(fig: go.Figure, note: str) -> go.Figure:
    """``note`` in the middle of a figure none of whose traces has a point with both x and y
    (None is a gap): an empty plot alone reads as a fault. Its axes go: their ranges came from
    the half-points alone, and their tick labels ran into the note."""
    points = (zip(t.x or (), t.y or (), strict=False) for t in fig.data)
    if not any(x is not None and y is not None for trace in points for x, y in trace):
        fig.add_annotation(text=note, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False)
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
    return fig


def _by_sampler(metrics: Sequence[Mapping]) -> dict[str, list[Mapping]]:
    out: dict[str, list[Mapping]] = {}
    for m in sorted(metrics, key=lambda m: (m["sampler"], m["step_size"])):
        out.setdefault(m["sampler"], []).append(m)
    return out


def _per_sampler_lines(metrics, key: str, title: str, y_title: str, error: str | None = None):
    fig = go.Figure()
    for i, (sampler, rows) in enumerate(_by_sampler(metrics).items()):
        errors = None
        if error is not None:
            errors = {"type": "data", "array": _none(_nan([r[error] for r in rows]))}
        fig.add_trace(
            go.Scatter(
                x=[r["step_size"] for r in rows],
                y=_none(_nan([r[key] for r in rows])),
                error_y=errors,
                mode="lines+markers",
                name=sampler,
                line={"color": PALETTE[i % len(PALETTE)]},
            )
        )
    fig.update_layout(
        title=title,
        xaxis={"title": {"text": STEP_SIZE_AXIS}, "type": "log", "exponentformat": "power"},
        yaxis={"title": {"text": y_title}},
        legend={"title": {"text": "sampler"}},
    )
    return fig


def dln_error_figure(metrics: Sequence[Mapping]) -> go.Figure:
    """Mean relative error over problems against the step size, per sampler, +- its SD."""
    fig = _per_sampler_lines(
        metrics,
        "relative_error_mean",
        "Relative error vs step size (bars: SD over problems)",
        REL_AXIS,
        error="relative_error_sd",
    )
    fig.add_hline(y=0, line={"dash": "dot", "color": TRUE_COLOR})
    return fig


def nan_fraction_figure(metrics: Sequence[Mapping]) -> go.Figure:
    """Per sampler against the step size: the fraction of chains that diverged (NaN, solid) and
    of runs with at least one (dashed; those runs' estimates average the surviving chains)."""
    fig = _per_sampler_lines(
        metrics, "nan_fraction", "NaN fraction vs step size", "NaN fraction (0-1)"
    )
    for i, (sampler, rows) in enumerate(_by_sampler(metrics).items()):
        fig.data[i].name = f"{sampler}: chains"
        fig.add_trace(
            go.Scatter(
                x=[r["step_size"] for r in rows],
                y=[r.get("nan_run_fraction") for r in rows],
                mode="lines+markers",
                name=f"{sampler}: runs with a NaN chain",
                line={"color": PALETTE[i % len(PALETTE)], "dash": "dash"},
            )
        )
    fig.update_yaxes(range=[-0.05, 1.05])
    return fig


def mean_vs_sd_figure(metrics: Sequence[Mapping], max_nan: float = 0.1) -> go.Figure:
    """Mean against SD of the relative error, one point per (sampler, step size) with a NaN
    fraction below ``max_nan`` (as the paper plots), labelled with the step size."""
    fig = go.Figure()
    for i, (sampler, rows) in enumerate(_by_sampler(metrics).items()):
        kept = [r for r in rows if r["nan_fraction"] < max_nan]
        fig.add_trace(
            go.Scatter(
                x=_none(_nan([r["relative_error_sd"] for r in kept])),
                y=_none(_nan([r["relative_error_mean"] for r in kept])),
                text=[f"ε = {r['step_size']:g}" for r in kept],
                mode="markers+text",
                textposition="top center",
                name=sampler,
                marker={"color": PALETTE[i % len(PALETTE)], "size": 9},
            )
        )
    fig.add_hline(y=0, line={"dash": "dot", "color": TRUE_COLOR})
    fig.update_layout(
        title=f"Mean vs SD of the relative error (NaN fraction < {max_nan:g})",
        xaxis={"title": {"text": "SD of the relative error over problems (linear)"}},
        yaxis={"title": {"text": "mean " + REL_AXIS}},
        legend={"title": {"text": "sampler"}},
    )
    return _note_when_empty(
        fig, f"No point yet: an SD needs two problems or more with NaN fraction < {max_nan:g}"
    )


def order_preservation_figure(metrics: Sequence[Mapping]) -> go.Figure:
    """Grouped bars: per step size, the fraction of problem pairs whose estimates keep the
    order of their true LLCs, per sampler (None: fewer than two finite problems)."""
    steps = sorted({m["step_size"] for m in metrics})
    fig = go.Figure()
    for i, (sampler, rows) in enumerate(_by_sampler(metrics).items()):
        value = {r["step_size"]: r["order_preservation"] for r in rows}
        fig.add_trace(
            go.Bar(
                x=[f"{s:g}" for s in steps],
                y=_none(_nan([value.get(s) for s in steps])),
                name=sampler,
                marker={"color": PALETTE[i % len(PALETTE)]},
            )
        )
    fig.update_layout(
        title="Order preservation vs step size",
        barmode="group",
        xaxis={"title": {"text": "step size ε (categories, increasing)"}, "type": "category"},
        yaxis={"title": {"text": "pairs in the true order (fraction 0-1)"}, "range": [0, 1.05]},
        legend={"title": {"text": "sampler"}},
    )
    return _note_when_empty(fig, "No bar yet: the order needs two problems or more")


# ---------------------------------------------------------------------------------------------
# The LLC over training: ``cells`` of ``studies.checkpoints.results``.

LOSS_COLOR = "#7f7f7f"
WARN_COLOR = "#ff9f1c"
CHECKPOINT_STEP_AXIS = "training step of the checkpoint (linear)"
TRAIN_LOSS_AXIS = "training loss L_n(w0) (linear)"


def _cell_level(cell: Mapping) -> str:
    """ "fail", "warn" or "good": a cell's verdict, amber too when its LLC warned."""
    verdict = cell.get("verdict")
    if verdict == "fail":
        return "fail"
    if verdict == "warn" or cell.get("warnings"):
        return "warn"
    return "good"


def _flagged_points(fig: go.Figure, done: list) -> None:
    """The finished checkpoints that warned (amber) or failed (red), over their λ̂ points."""
    for level, color, name in (
        ("warn", WARN_COLOR, "warned (verdict warn or LLC warnings)"),
        ("fail", FLAG_COLOR, "verdict fail"),
    ):
        flagged = [c for c in done if _cell_level(c) == level]
        if flagged:
            fig.add_trace(
                go.Scatter(
                    x=[float(c["step"]) for c in flagged],
                    y=[float(c["llc"]) for c in flagged],
                    mode="markers",
                    marker={"color": color, "size": 12, "line": {"color": "white", "width": 1}},
                    name=name,
                    customdata=[", ".join(c.get("warnings") or []) for c in flagged],
                    hovertemplate="step %{x}<br>λ̂ %{y:.4g}<br>%{customdata}<extra></extra>",
                ),
                secondary_y=False,
            )


def checkpoint_llc_figure(cells: Sequence[Mapping], title: str | None = "LLC over training"):
    """λ̂ at each checkpoint against its training step, with a ±2 SE band over the finished
    cells (a cell still running has no point yet), the training loss at each checkpoint on a
    second y axis; points of cells that warned amber, failed red."""
    cells = sorted(cells, key=lambda c: (c["step"], c["checkpoint"]))
    done = [c for c in cells if c.get("llc") is not None and math.isfinite(c["llc"])]
    step = np.asarray([c["step"] for c in done], dtype=float)
    llc = np.asarray([c["llc"] for c in done], dtype=float)
    se = np.asarray([c["se"] if c.get("se") is not None else np.nan for c in done], dtype=float)
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(
        go.Scatter(
            x=[*step.tolist(), *step[::-1].tolist()],
            y=_none(np.concatenate([llc + 2 * se, (llc - 2 * se)[::-1]])),
            fill="toself",
            fillcolor=BAND_COLOR,
            mode="lines",
            line={"width": 0},
            name="λ̂ ± 2 SE",
            hoverinfo="skip",
        ),
        secondary_y=False,
    )
    fig.add_trace(
        go.Scatter(
            x=step.tolist(),
            y=_none(llc),
            mode="lines+markers",
            line={"color": PALETTE[0], "width": 2},
            marker={"color": PALETTE[0], "size": 8},
            name="λ̂ (mean over chains)",
            customdata=[[c["checkpoint"], c.get("se")] for c in done],
            hovertemplate="%{customdata[0]}<br>step %{x}<br>λ̂ %{y:.4g} ± %{customdata[1]:.2g}"
            "<extra></extra>",
        ),
        secondary_y=False,
    )
    _flagged_points(fig, done)
    lossy = [c for c in cells if c.get("train_loss") is not None]
    fig.add_trace(
        go.Scatter(
            x=[float(c["step"]) for c in lossy],
            y=_none([c["train_loss"] for c in lossy]),
            mode="lines+markers",
            line={"color": LOSS_COLOR, "width": 1.5, "dash": "dot"},
            marker={"symbol": "square", "size": 7, "color": LOSS_COLOR},
            name="training loss L_n(w0)",
            customdata=[c["checkpoint"] for c in lossy],
            hovertemplate="%{customdata}<br>step %{x}<br>L_n %{y:.4g}<extra></extra>",
        ),
        secondary_y=True,
    )
    fig.update_layout(title=title, legend=LEGEND)
    fig.update_xaxes(title_text=CHECKPOINT_STEP_AXIS)
    fig.update_yaxes(title_text=LLC_AXIS, secondary_y=False)
    log = bool(lossy) and all(c["train_loss"] > 0 for c in lossy)  # a loss spans decades
    fig.update_yaxes(
        title_text=TRAIN_LOSS_AXIS.replace("(linear)", "(log scale)") if log else TRAIN_LOSS_AXIS,
        type="log" if log else "linear",
        exponentformat="power",
        secondary_y=True,
        showgrid=False,
        tickmode="auto",
    )
    pending = len(cells) - len(done)
    if not done:
        return _note_when_empty(fig, f"No checkpoint finished yet ({pending} running or queued)")
    return fig
