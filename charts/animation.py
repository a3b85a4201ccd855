"""The animated view's data: a run's traced first steps as the browser player reads them.

Pure functions of arrays (no Streamlit, no torch): ``payload`` packs the density grid and each
panel's positions, proposals, verdicts and integrator paths as base64 float32 (a third of the
bytes of JSON numbers, decoded by the page in one call), for ``ui/animation.html``.
"""

from __future__ import annotations

import base64

import numpy as np

PATH_POINTS = 33  # points kept of an integrator's path per step (HMC: all of 11; NUTS: spread)


def _b64(array: np.ndarray | None) -> str | None:
    if array is None:
        return None
    return base64.b64encode(np.ascontiguousarray(array, dtype="<f4").tobytes()).decode()


def square_view(bounds) -> list[float]:
    """[x0, x1, y0, y1]: ``bounds`` widened to a square, so both axes share one scale (a ring
    stays a ring)."""
    (a, b), (c, d) = bounds
    half = max(b - a, d - c) / 2
    mx, my = (a + b) / 2, (c + d) / 2
    return [mx - half, mx + half, my - half, my + half]


def thin_path(path: np.ndarray, points: int = PATH_POINTS) -> np.ndarray:
    """[T, k, L, d] paths with at most ``points`` of their L points, evenly spread, both ends
    kept (NaN padding stays NaN)."""
    length = path.shape[2]
    if length <= points:
        return path
    keep = np.unique(np.linspace(0, length - 1, points).round().astype(int))
    return path[:, :, keep]


def panel(name: str, trace: dict[str, np.ndarray], steps: int | None = None) -> dict:
    """One run's traced steps (``position`` [T + 1, k, d], ``proposal`` [T, k, d], ``accepted``
    [T, k], optional ``path`` [T, k, L, d]) as a player panel, the first two coordinates, at
    most ``steps`` steps."""
    proposal = trace["proposal"][:steps]
    t, k = proposal.shape[:2]
    path = trace.get("path")
    if path is not None:
        path = thin_path(path[:t, :, :, :2])
    return {
        "name": name,
        "T": int(t),
        "k": int(k),
        "L": 0 if path is None else int(path.shape[2]),
        "position": _b64(trace["position"][: t + 1, :, :2]),
        "proposal": _b64(proposal[..., :2]),
        "accepted": _b64(trace["accepted"][:t]),
        "path": _b64(path),
    }


def payload(
    grid: dict,
    bounds,
    labels: list[str],
    panels: list[dict],
    key: str,
    log_scale: bool = True,
    more: bool = False,
    scroll: bool = False,
) -> dict:
    """Everything the player draws: the density grid (log density, [ny, nx]) and its square
    view, the panels, a ``key`` under which the tab keeps its frame and speed (so a re-render
    with more steps goes on where it was), ``more``: steps are still arriving, ``scroll``:
    bring the player into view when first shown."""
    xs, ys = np.asarray(grid["xs"]), np.asarray(grid["ys"])
    z = np.nan_to_num(np.asarray(grid["log_density"], dtype=float), nan=-1e30, neginf=-1e30)
    return {
        "grid": {
            "x0": float(xs[0]),
            "x1": float(xs[-1]),
            "y0": float(ys[0]),
            "y1": float(ys[-1]),
            "nx": len(xs),
            "ny": len(ys),
            "z": _b64(np.maximum(z, -1e30)),
        },
        "view": square_view(bounds),
        "labels": list(labels[:2]),
        "panels": panels,
        "key": key,
        "log_scale": log_scale,
        "more": more,
        "scroll": scroll,
    }
