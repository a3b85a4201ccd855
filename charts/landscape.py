"""Loss-landscape figures from the PCA of sampler trajectories (TATi, Gottwald & Reich).

A landscape is a 2-D affine slice θ(c0, c1) = θ* + c0 v0 + c1 v1 of a network's loss, drawn as a
surface with the projected sampler trajectory on top. Nested zoom domains [-10^i, 10^i]² are
plotted one per figure; each marks the next, 10x smaller, domain with a red square.

Every builder takes a mapping `s` (a dict, or an `np.load` of an .npz) with keys `c0` [g0],
`c1` [g1], `loss` [g0, g1] ("ij" indexing: loss[i, j] is the loss at (c0[i], c1[j])), and
optionally `path` [chains, points, 2], `path_loss` [chains, points], `path_chain` [chains]
(the run's chain numbers), `lowest_loss`, `label0`, `label1`, `sweep_c` [m] and `sweep_loss`
[k, m]: exactly what `python -m jobs surface --out` writes.
"""

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative

from charts.style import LEGEND  # below the plot: on the right it would cover the colour bar

SCALES = {"loss": "loss L", "log": "ln L", "lnabs": "ln |L − L0|"}

# The floor for ln|L - L0| when no other value is finite: ln of float64's machine epsilon, the
# smallest relative difference a loss of order one can resolve.
LN_EPS = float(np.log(np.finfo(np.float64).eps))

# Red is reserved for the zoom square, so it is taken out of the chain palette.
PALETTE = tuple(c for c in qualitative.Plotly if c != "#EF553B")
COLORSCALE = "Viridis"
INNER_COLOR = "red"


def scaled(loss, scale: str = "loss", lowest: float | None = None) -> np.ndarray:
    """Loss on the plotting scale: "loss" (L), "log" (ln L) or "lnabs" (ln |L - L0|).

    `lowest` is L0; None takes the smallest finite value of `loss`. For "log", L <= 0 gives NaN.
    For "lnabs", points with L == L0 exactly (ln 0 = -inf) are floored to the smallest finite
    value of the result, so the minimum is drawn as the lowest point without stretching the
    colour scale; if nothing else is finite the floor is LN_EPS. NaN stays NaN, and infinite
    losses (overflow) become NaN too, so every non-finite value is drawn as a gap.
    """
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {list(SCALES)}, got scale={scale!r}")
    x = np.array(loss, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        if scale == "loss":
            out = x
        elif scale == "log":
            out = np.log(np.where(x > 0, x, np.nan))
        else:
            l0 = _finite_min(x) if lowest is None else float(lowest)
            out = np.log(np.abs(x - l0))
            at_minimum = out == -np.inf
            out[at_minimum] = _finite_min(out, default=LN_EPS)
    out[np.isinf(out)] = np.nan
    return out


def surface_figure(
    s: Mapping,
    scale: str = "lnabs",
    overlay: bool = True,
    inner: float | None = None,
    title: str | None = None,
) -> go.Figure:
    """3-D surface of the scaled loss, chains on top, the next zoom domain as a red square."""
    c0, c1, loss = _grid(s)
    paths = _paths(s) if overlay else None
    lowest = _lowest(s, loss)
    if paths is None:
        (z,) = _scaled_jointly(scale, lowest, loss)
    else:
        path_loss = _path_loss(s, paths)
        # Grid and path share one L0 and one floor so their heights are comparable.
        z, path_z = _scaled_jointly(scale, lowest, loss, path_loss)

    fig = go.Figure(_loss_trace(go.Surface, c0, c1, z, scale, "loss surface"))
    if paths is not None:
        for k, (xy, zk) in enumerate(zip(paths, path_z, strict=True)):
            color = PALETTE[k % len(PALETTE)]
            fig.add_trace(
                go.Scatter3d(
                    x=xy[:, 0],
                    y=xy[:, 1],
                    z=zk,
                    mode="lines+markers",
                    name=_chain_name(s, k),
                    line={"color": color, "width": 4},
                    marker={"color": color, "size": _start_sizes(len(xy), 6, 2)},
                )
            )
    if inner is not None:
        half = _half_width(inner)
        x, y = _square(half)
        fig.add_trace(
            go.Scatter3d(
                x=x,
                y=y,
                z=np.full(len(x), _finite_min(z, default=0.0)),
                mode="lines",
                name=_domain_name(half),
                line={"color": INNER_COLOR, "width": 5},
            )
        )
    label0, label1 = _labels(s)
    fig.update_layout(
        title=title,
        legend=LEGEND,
        # A 3-D scene draws its axis titles outside its box: from plotly's default eye (1.25
        # in each axis) and margins, "PC1 (50.7% of variance)" was cut at a half-page column's
        # edges. From further away with no side margins every title shows at 460 px wide (the
        # top margin is left alone: the title stays level with the contour plot's beside it).
        margin={"l": 0, "r": 0, "b": 0},
        scene={
            # The grid is the zoom domain: trajectories leaving it must not rescale the view.
            "xaxis": {"title": {"text": label0}, "range": _extent(c0)},
            "yaxis": {"title": {"text": label1}, "range": _extent(c1)},
            "zaxis": {"title": {"text": SCALES[scale]}},
            "camera": {"eye": {"x": 1.9, "y": 1.9, "z": 1.3}},
        },
    )
    return fig


def contour_figure(
    s: Mapping,
    scale: str = "lnabs",
    overlay: bool = True,
    inner: float | None = None,
    title: str | None = None,
) -> go.Figure:
    """Filled contours of the scaled loss, chain paths (start enlarged), next zoom domain in red."""
    c0, c1, loss = _grid(s)
    (z,) = _scaled_jointly(scale, _lowest(s, loss), loss)
    fig = go.Figure(_loss_trace(go.Contour, c0, c1, z, scale, "loss"))
    paths = _paths(s) if overlay else None
    if paths is not None:
        for k, xy in enumerate(paths):
            color = PALETTE[k % len(PALETTE)]
            fig.add_trace(
                go.Scatter(
                    x=xy[:, 0],
                    y=xy[:, 1],
                    mode="lines+markers",
                    name=_chain_name(s, k),
                    line={"color": color, "width": 2},
                    # Only the start gets a visible marker; the rest still carry hover values.
                    marker={"color": color, "size": _start_sizes(len(xy), 10, 0)},
                )
            )
    if inner is not None:
        half = _half_width(inner)
        fig.add_shape(
            type="rect",
            x0=-half,
            y0=-half,
            x1=half,
            y1=half,
            line={"color": INNER_COLOR, "width": 2},
            name=_domain_name(half),
        )
    label0, label1 = _labels(s)
    fig.update_layout(
        title=title,
        legend=LEGEND,
        xaxis={"title": {"text": label0}, "range": _extent(c0), "constrain": "domain"},
        yaxis={
            "title": {"text": label1},
            "range": _extent(c1),
            "constrain": "domain",
            "scaleanchor": "x",
            "scaleratio": 1,
        },
    )
    return fig


def spectrum_figure(
    ratio, highlight: Sequence[int] = (1, 2), title: str | None = None
) -> go.Figure:
    """Explained-variance ratio against component index (1-based) on a log axis.

    Non-positive and non-finite ratios have no place on a log axis and are dropped, highlighted
    ones included; highlights beyond the number of components are ignored.
    """
    ratio = np.asarray(ratio, dtype=float).ravel()
    index = np.arange(1, len(ratio) + 1)
    keep = np.isfinite(ratio) & (ratio > 0)
    marked = np.isin(index, list(highlight)) & keep
    fig = go.Figure(
        [
            go.Scatter(
                x=index[keep],
                y=ratio[keep],
                mode="lines+markers",
                name="explained variance ratio",
                line={"color": PALETTE[0]},
            ),
            go.Scatter(
                x=index[marked],
                y=ratio[marked],
                mode="markers",
                name="highlighted",
                marker={"color": PALETTE[3], "size": 12, "symbol": "diamond"},
            ),
        ]
    )
    fig.update_layout(
        title=title,
        xaxis={"title": {"text": "principal component"}, "dtick": 1 if len(ratio) <= 20 else None},
        yaxis={
            "title": {"text": "explained variance ratio (log scale)"},
            "type": "log",
            "exponentformat": "power",
        },
    )
    return fig


def sweep_figure(s: Mapping, scale: str = "loss", title: str | None = None) -> go.Figure:
    """1-D sweeps: row r of `sweep_loss` along direction r, the other coordinate held at 0."""
    missing = [key for key in ("sweep_c", "sweep_loss") if key not in s]
    if missing:
        raise ValueError(f"sweep_figure needs 'sweep_c' and 'sweep_loss'; missing {missing}")
    c = np.asarray(s["sweep_c"], dtype=float).ravel()
    sweeps = np.atleast_2d(np.asarray(s["sweep_loss"], dtype=float))
    if sweeps.ndim != 2 or sweeps.shape[1] != len(c):
        raise ValueError(
            f"'sweep_loss' has shape {sweeps.shape}, expected (directions, len(sweep_c)) = "
            f"(k, {len(c)})"
        )
    lowest = _lowest(s, sweeps)
    # All rows share one floor so that the sweeps are comparable.
    (y,) = _scaled_jointly(scale, lowest, sweeps)
    labels = _labels(s)
    fig = go.Figure(
        [
            go.Scatter(
                x=c,
                y=row,
                mode="lines",
                name=labels[r] if r < len(labels) else f"direction {r}",
                line={"color": PALETTE[r % len(PALETTE)]},
            )
            for r, row in enumerate(y)
        ]
    )
    fig.update_layout(
        title=title,
        xaxis={"title": {"text": "coordinate along the direction"}},
        yaxis={"title": {"text": SCALES[scale]}},
    )
    return fig


def _loss_trace(trace: type, c0: np.ndarray, c1: np.ndarray, z: np.ndarray, scale: str, name: str):
    """The scaled loss over the grid as a ``trace`` (go.Surface, go.Contour), its colour bar
    titled with the scale."""
    return trace(
        x=c0,
        y=c1,
        z=z.T,  # plotly wants z[y][x]; loss is indexed [c0, c1]
        colorscale=COLORSCALE,
        colorbar={"title": {"text": SCALES[scale]}},
        name=name,
    )


def _grid(s: Mapping) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    for key in ("c0", "c1", "loss"):
        if key not in s:
            raise ValueError(f"missing required key {key!r}")
    c0 = np.asarray(s["c0"], dtype=float)
    c1 = np.asarray(s["c1"], dtype=float)
    loss = np.asarray(s["loss"], dtype=float)
    for key, c in (("c0", c0), ("c1", c1)):
        if c.ndim != 1 or len(c) == 0:
            raise ValueError(f"{key!r} must be a non-empty 1-D array, got shape {c.shape}")
    if loss.shape != (len(c0), len(c1)):
        raise ValueError(
            f"'loss' has shape {loss.shape}, expected (len(c0), len(c1)) = {(len(c0), len(c1))}"
        )
    return c0, c1, loss


def _paths(s: Mapping) -> np.ndarray | None:
    """The trajectories [chains, points, 2], or None when there is nothing to draw."""
    if "path" not in s:
        return None
    path = np.asarray(s["path"], dtype=float)
    if path.size == 0:
        return None
    if path.ndim != 3 or path.shape[2] != 2:
        raise ValueError(f"'path' must have shape (chains, points, 2), got {path.shape}")
    return path


def _path_loss(s: Mapping, paths: np.ndarray) -> np.ndarray:
    if "path_loss" not in s:
        raise ValueError("'path' is given without 'path_loss', which sets the heights of chains")
    path_loss = np.asarray(s["path_loss"], dtype=float)
    if path_loss.shape != paths.shape[:2]:
        raise ValueError(
            f"'path_loss' has shape {path_loss.shape}, expected (chains, points) = "
            f"{paths.shape[:2]}"
        )
    return path_loss


def _lowest(s: Mapping, loss: np.ndarray) -> float:
    """L0: `lowest_loss` when stored, else the smallest finite loss on the grid and path."""
    if "lowest_loss" in s:
        return float(s["lowest_loss"])
    seen = [loss.ravel()]
    if "path_loss" in s:
        seen.append(np.asarray(s["path_loss"], dtype=float).ravel())
    return _finite_min(np.concatenate(seen))


def _labels(s: Mapping) -> tuple[str, str]:
    # .item() unwraps the 0-d string arrays that np.load returns.
    return tuple(
        str(np.asarray(s[key]).item()) if key in s else default
        for key, default in (("label0", "c0"), ("label1", "c1"))
    )


def _scaled_jointly(scale: str, lowest: float, *arrays: np.ndarray) -> list[np.ndarray]:
    """scaled() over several arrays at once, so that the lnabs floor is the same for all."""
    flat = scaled(np.concatenate([a.ravel() for a in arrays]), scale, lowest)
    parts = np.split(flat, np.cumsum([a.size for a in arrays])[:-1])
    return [part.reshape(a.shape) for part, a in zip(parts, arrays, strict=True)]


def _finite_min(x: np.ndarray, default: float = np.nan) -> float:
    finite = x[np.isfinite(x)]
    return float(finite.min()) if finite.size else default


def _extent(c: np.ndarray) -> list[float]:
    return [float(c.min()), float(c.max())]


def _half_width(inner) -> float:
    half = float(inner)
    if not (np.isfinite(half) and half > 0):
        raise ValueError(f"inner must be a positive half-width, got inner={inner!r}")
    return half


def _square(half: float) -> tuple[list[float], list[float]]:
    """Corners of [-half, half]², closed by repeating the first."""
    return [-half, half, half, -half, -half], [-half, -half, half, half, -half]


def _domain_name(half: float) -> str:
    return f"next domain [-{half:g}, {half:g}]²"


def _chain_name(s: Mapping, k: int) -> str:
    """The run's own chain number when the surface says which chains it drew (`path_chain`)."""
    chains = np.asarray(s.get("path_chain", ())).ravel()
    return f"chain {int(chains[k]) if k < chains.size else k}"


def _start_sizes(n: int, start: float, rest: float) -> list[float]:
    return [start] + [rest] * (n - 1) if n else []
