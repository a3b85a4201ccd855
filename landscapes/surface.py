"""Loss-landscape surfaces: the loss over a 2-D affine slice of parameter space (TATi: Heber et
al. 2020, Sec. 3.2).

Take the trajectory a sampler walked, find two directions v0, v1 (principal components of the
trajectory, filter-normalised random directions, or top Hessian eigenvectors), and evaluate the
full-data loss on the grid theta(c0, c1) = theta* + c0 v0 + c1 v1 around a reference point theta*.
The trajectory is projected on the same plane, c = argmin |theta_t - theta* - c0 v0 - c1 v1|
(the dot products c_j = (theta_t - theta*) . v_j when the directions are orthonormal), and keeps
its own full-data loss, so points sit off the surface where the plane is not the whole story.

Grid points are evaluated as chains (``Target.plane_loss``): a chunk of points is one ``[C, d]``
batch for the target's chain-batched loss, so a 41 x 41 grid costs a few batched forward passes,
on any device; an MLP computes its first layer once per direction, not once per point
(``MLP.plane_loss``), and a deep linear network's loss comes from the data's second moments
(``Target.full_loss``). Nothing here forms a d x d matrix: the PCA is an SVD of the (points x d)
trajectory, and Hessian eigenvectors come from Lanczos (ARPACK) on Hessian-vector products.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch
from torch import Tensor

from .base import DATA_CHUNK, ParamError, Target
from .directions import (
    PCA,
    Directions,
    check_components,
    hessian_directions,
    pca,
    pca_directions,
    random_directions,
)

DIRECTIONS = ("pca", "random", "hessian")
REFERENCES = ("auto", "w0", "mean", "last", "best")
# (v0, v1) as 1-based component numbers: TATi pairs one large- and one small-variance direction.
ZOOM_DOMAINS = tuple(10.0**i for i in range(1, -6, -1))  # TATi's half-widths, 10 down to 1e-5
COMPONENT_PRESETS = {
    "PC1 / PC2": (1, 2),
    "TATi SLP: PC1 / PC64": (1, 64),
    "TATi MLP: PC1 / PC100": (1, 100),
}
SPECTRUM = 100  # principal components reported at least (when the trajectory has them)
# Floats of parameters + activations per batch of grid points. On a CPU a batch that stays near
# the cache is no slower, and a larger one can be slower: a 41 x 41 surface of `tanh` (generic
# path, float32, 2 cores) took 131-148 ms in chunks of 418 points and 164-172 ms in chunks of
# 836 (three processes, medians of 7, alternating); the digits MLP's rows
# (MLP.plane_loss) took 23-25 ms as 21 + 20 points, 22-24 ms whole and 25-27 ms in parts
# of 14. A GPU wants large batches, bounded by memory (~256 MB in float64).
CHUNK_ELEMENTS = {"cpu": 2**21, "cuda": 2**25}


# -- evaluation ----------------------------------------------------------------------------------


def points_per_chunk(target: Target) -> int:
    """Grid points per batched forward pass, so that parameters plus activations of one chunk
    stay within the device's CHUNK_ELEMENTS (activations: data points x the layers' widths)."""
    widths = sum(shape[0] for shape in target.layout.values() if len(shape) > 1) or 1
    per_point = target.dim + min(target.n or 1, DATA_CHUNK) * widths
    budget = CHUNK_ELEMENTS.get(target.device.type, CHUNK_ELEMENTS["cuda"])
    return max(1, budget // per_point)


def losses(target: Target, points: Tensor, chunk: int | None = None) -> np.ndarray:
    """Full-data loss [P] at ``points`` [P, d], ``chunk`` points at a time as chains. Non-finite
    values come back as NaN (a grid point far out may overflow; the rest stand)."""
    chunk = chunk or points_per_chunk(target)
    with torch.no_grad():
        parts = [target.full_loss(points[s : s + chunk]) for s in range(0, len(points), chunk)]
    return finite(torch.cat(parts) if parts else points.new_empty(0))


def finite(values: Tensor) -> np.ndarray:
    """Losses as float64 numpy, NaN where a point overflowed (the rest of the grid stands)."""
    values = values.double().cpu().numpy()
    return np.where(np.isfinite(values), values, np.nan)


def coordinates(grid: int, half_width: float) -> np.ndarray:
    """``grid`` equidistant coordinates on [-half_width, half_width], endpoints included, with the
    centre exactly 0 (so the grid's centre is theta* itself)."""
    whole = isinstance(grid, numbers.Integral) and not isinstance(grid, bool)  # numpy's too
    if not (whole and 3 <= grid <= 1001 and grid % 2 == 1):
        raise ParamError("grid", f"must be an odd integer in [3, 1001], got {grid!r}")
    if not (math.isfinite(half_width) and half_width > 0):
        raise ParamError("range", f"must be a finite number > 0, got {half_width!r}")
    h = (grid - 1) // 2
    return half_width * (np.arange(grid) - h) / h


def grid_losses(
    target: Target,
    theta: np.ndarray,
    vectors: np.ndarray,
    c0: np.ndarray,
    c1: np.ndarray,
    chunk: int | None = None,
) -> np.ndarray:
    """[len(c0), len(c1)]: ``loss[i, j]`` = L(theta + c0[i] v0 + c1[j] v1), evaluated a chunk of
    grid points at a time (the points are made per chunk, so memory stays bounded)."""
    a, b = np.meshgrid(c0, c1, indexing="ij")
    return plane_losses(target, theta, vectors, a.ravel(), b.ravel(), chunk).reshape(
        len(c0), len(c1)
    )


def plane_losses(
    target: Target,
    theta: np.ndarray,
    vectors: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    chunk: int | None = None,
) -> np.ndarray:
    """[P] the full-data loss at theta + a_p v0 + b_p v1 (``Target.plane_loss``: points as
    chains, ``chunk`` at a time); non-finite values come back as NaN."""
    kw = {"device": target.device, "dtype": target.dtype}
    with torch.no_grad():
        values = target.plane_loss(
            *(torch.as_tensor(x, **kw) for x in (theta, vectors, a, b)),
            chunk or points_per_chunk(target),
        )
    return finite(values)


def sweep(
    target: Target, theta: np.ndarray, direction: np.ndarray, coords: np.ndarray, chunk=None
) -> np.ndarray:
    """[m] the 1-D sweep L(theta + c v) at ``coords`` (TATi Fig. 8). The sweep runs along the
    plane's second axis, so its points share the first coordinate, as a grid row's do
    (``MLP.plane_loss`` shares work along a row: a 201-point digits sweep 8 ms, not 14)."""
    vectors = np.stack([np.zeros_like(direction), direction])
    return plane_losses(target, theta, vectors, np.zeros_like(coords), coords, chunk)


def project(
    points: np.ndarray, theta: np.ndarray, vectors: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Coordinates [..., 2] of ``points`` [..., d] on the plane through ``theta`` spanned by
    ``vectors`` (least squares, exact for points on the plane even when the directions are
    neither unit nor orthogonal), and each point's distance from the plane [...]."""
    v = np.asarray(vectors, dtype=np.float64)
    gram = v @ v.T
    flat = np.asarray(points).reshape(-1, v.shape[1])
    coords, off = np.empty((len(flat), 2)), np.empty(len(flat))
    for s in range(0, len(flat), 256):  # float64 rows in slices: bounded memory for large d
        delta = flat[s : s + 256].astype(np.float64) - theta
        c = np.linalg.solve(gram, v @ delta.T).T
        coords[s : s + 256] = c
        off[s : s + 256] = np.linalg.norm(delta - c @ v, axis=1)
    shape = np.shape(points)[:-1]
    return coords.reshape(*shape, 2), off.reshape(shape)


def auto_range(path: np.ndarray) -> float:
    """The smallest TATi zoom domain [-10^i, 10^i] holding the projected path with a 10% margin."""
    extent = np.nanmax(np.abs(path)) if np.isfinite(path).any() else 0.0
    if not extent > 0:
        return 1.0
    return float(10.0 ** math.ceil(math.log10(1.1 * extent)))


# -- the whole surface ---------------------------------------------------------------------------


def surface(
    target: Target,
    trajectory: np.ndarray,
    steps: np.ndarray | None = None,
    *,
    w0: np.ndarray | None = None,
    directions: str = "pca",
    components=(1, 2),
    grid: int = 41,
    half_width: float | None = None,
    reference: str = "auto",
    burn_in: int = 0,
    every: int | None = None,
    path_chains: int = 8,
    path_points: int = 200,
    spectrum: int = SPECTRUM,
    pca_method: str = "auto",
    normalisation: str = "auto",
    hessian_method: str = "auto",
    seed: int = 0,
    chunk: int | None = None,
) -> dict:
    """The loss surface around a reference point of ``trajectory`` [chains, draws, d] (draws at
    ``steps``); returns the arrays and facts that ``python -m jobs surface`` writes.

    The PCA uses the draws from ``burn_in`` on (all chains pooled); the overlay shows every
    ``every``-th draw (default: at most ``path_points`` per chain) of the first ``path_chains``
    chains with its full-data loss. ``reference``: w0 (the run's trained point, else the
    target's truth), mean (of the PCA draws), last (the first chain's last draw), best (the
    lowest-loss overlay point), or auto (w0 when there is one, else best). ``half_width``:
    the grid is [-half_width, half_width]^2; None picks the smallest 10^i domain holding the path.
    """
    traj = np.asarray(trajectory)
    components, kept, every = _checked(
        target,
        traj,
        directions,
        components,
        reference,
        burn_in,
        every,
        path_chains,
        seed,
        path_points,
    )
    steps = np.arange(traj.shape[1]) if steps is None else np.asarray(steps)
    shown = kept[:path_chains]
    index, shown_points, path_loss = _overlay(target, traj, shown, every, chunk)
    body = traj[kept, burn_in:]
    reference, theta = _reference_point(
        target, traj, kept, body, reference, w0, path_loss, shown_points
    )
    dirs, result = _plane(
        target,
        theta,
        body,
        directions,
        components,
        spectrum,
        pca_method,
        normalisation,
        hessian_method,
        seed,
    )
    path, off_plane = project(shown_points, theta, dirs.vectors)
    half_width = auto_range(path) if half_width is None else float(half_width)
    out = _plane_losses(target, theta, dirs, grid, half_width, chunk)
    seen = np.concatenate([out["loss"].ravel(), path_loss.ravel(), [out["reference_loss"]]])
    out.update(
        path=path,
        path_loss=path_loss,
        path_step=steps[index],
        path_chain=shown,
        off_plane=off_plane,
        theta=theta,
        reference=reference,
        lowest_loss=float(np.nanmin(seen)) if np.isfinite(seen).any() else math.nan,
        diverged_chains=int(traj.shape[0] - len(kept)),
    )
    return out | _direction_facts(dirs, result)


def _direction_facts(dirs: Directions, result: PCA | None) -> dict:
    """The plane's directions as ``surface`` reports them, with the PCA's spectrum (empty
    without a PCA) and the directions' own facts (``meta_*``)."""
    return {
        "directions": dirs.vectors,
        "direction_kind": dirs.kind,
        "components": np.asarray(dirs.components),
        "direction_values": np.asarray(dirs.values),
        "label0": dirs.labels[0],
        "label1": dirs.labels[1],
        "explained_variance_ratio": (
            result.explained_variance_ratio if result is not None else np.empty(0)
        ),
        **{f"meta_{k}": v for k, v in dirs.meta.items()},
    }


def _checked(
    target: Target,
    traj: np.ndarray,
    directions: str,
    components,
    reference: str,
    burn_in: int,
    every: int | None,
    path_chains: int,
    seed: int,
    path_points: int,
) -> tuple[tuple[int, int], np.ndarray, int]:
    """``surface``'s arguments checked, each error naming its field: returns the components,
    the chains that never diverged, and the overlay's thinning."""
    if directions not in DIRECTIONS:
        raise ParamError("directions", f"must be one of {list(DIRECTIONS)}, got {directions!r}")
    components = check_components(components)
    if reference not in REFERENCES:
        raise ParamError("reference", f"must be one of {list(REFERENCES)}, got {reference!r}")
    if target.dim < 2:
        raise ParamError("target", f"a surface needs d >= 2 parameters; {target.name} has d = 1")
    if traj.ndim != 3 or traj.shape[2] != target.dim:
        raise ParamError(
            "trajectory", f"must be [chains, draws, {target.dim}], got {list(traj.shape)}"
        )
    draws = traj.shape[1]
    finite = np.isfinite(traj).all(axis=(1, 2))  # diverged chains stay out of PCA and overlay
    if not finite.any():
        raise ParamError("trajectory", "every chain has NaN or Inf positions (all diverged)")
    if not 0 <= burn_in < draws:
        raise ParamError("burn_in", f"must be in [0, {draws - 1}] (draws recorded), got {burn_in}")
    if every is None:
        every = max(1, math.ceil(draws / path_points))
    if every < 1:
        raise ParamError("every", f"must be >= 1, got {every}")
    if path_chains < 1:
        raise ParamError("path_chains", f"must be >= 1, got {path_chains}")
    if not 0 <= seed < 2**63:  # numpy's generators take no negative seed
        raise ParamError("seed", f"must be an integer in [0, 2^63), got {seed}")
    return components, np.flatnonzero(finite), every


def _reference_point(
    target: Target,
    traj: np.ndarray,
    kept: np.ndarray,
    body: np.ndarray,
    reference: str,
    w0: np.ndarray | None,
    path_loss: np.ndarray,
    shown_points: np.ndarray,
) -> tuple[str, np.ndarray]:
    """The plane's centre theta, and the reference it is ("auto" resolved: w0 when there is
    one, else best)."""
    ref_w0 = (
        w0 if w0 is not None else (None if target.w0 is None else target.w0.double().cpu().numpy())
    )
    if reference == "auto":
        reference = "w0" if ref_w0 is not None else "best"
    if reference == "w0":
        if ref_w0 is None:
            raise ParamError(
                "reference",
                "w0 needs an LLC run's trained point or a target with a truth; "
                "use mean, last or best",
            )
        theta = np.asarray(ref_w0, dtype=np.float64).reshape(target.dim)
    elif reference == "mean":
        theta = body.reshape(-1, target.dim).mean(axis=0, dtype=np.float64)
    elif reference == "last":
        theta = traj[kept[0], -1].astype(np.float64)
    else:
        if not np.isfinite(path_loss).any():
            raise ParamError(
                "reference", "best needs a finite loss on the trajectory; use w0, mean or last"
            )
        c, p = np.unravel_index(np.nanargmin(path_loss), path_loss.shape)
        theta = shown_points[c, p].astype(np.float64)
    return reference, theta


def _plane(
    target: Target,
    theta: np.ndarray,
    body: np.ndarray,
    directions: str,
    components: tuple[int, int],
    spectrum: int,
    pca_method: str,
    normalisation: str,
    hessian_method: str,
    seed: int,
) -> tuple[Directions, PCA | None]:
    """The plane's two directions, and the PCA of the draws after burn-in (its spectrum is
    reported whatever the directions, when there are 2 draws or more)."""
    result = None
    if body.shape[0] * body.shape[1] >= 2:
        k = max(components) if directions == "pca" else 1
        rows, rank = (
            body.shape[0] * body.shape[1],
            min(body.shape[0] * body.shape[1] - 1, target.dim),
        )
        want = min(rank, max(spectrum, k))
        if directions == "pca" and k > rank:
            raise ParamError(
                "components",
                f"must be in [1, {rank}] (principal components of {rows} draws in "
                f"d={target.dim}), got {list(components)}",
            )
        result = pca(body, want, pca_method, seed)
    if directions == "pca":
        if result is None:
            raise ParamError("trajectory", "the PCA needs at least 2 draws after burn-in")
        dirs = pca_directions(result, components)
    elif directions == "random":
        dirs = random_directions(target, theta, seed, normalisation)
    else:
        dirs = hessian_directions(target, theta, components, hessian_method, seed)
    return dirs, result


def _overlay(
    target: Target, traj: np.ndarray, shown: np.ndarray, every: int, chunk: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The overlay: every ``every``-th draw (and the last) of the chains ``shown``, each with
    its true full-data loss. Returns the draws' indices, the points [chains, points, d] and
    their losses [chains, points]."""
    draws = traj.shape[1]
    index = np.arange(0, draws, every)
    if index[-1] != draws - 1:
        index = np.append(index, draws - 1)  # always show where the chain ended
    shown_points = traj[np.ix_(shown, index)]  # [chains, points, d]
    flat = torch.as_tensor(
        shown_points.reshape(-1, target.dim), device=target.device, dtype=target.dtype
    )
    return index, shown_points, losses(target, flat, chunk).reshape(len(shown), len(index))


def _plane_losses(
    target: Target, theta: np.ndarray, dirs: Directions, grid: int, half_width: float, chunk
) -> dict:
    """The loss on a ``grid`` x ``grid`` square of the plane, [-half_width, half_width]^2, at its
    centre, and along each direction out to 5 times the half-width, with their extremes."""
    c0 = c1 = coordinates(grid, half_width)
    loss = grid_losses(target, theta, dirs.vectors, c0, c1, chunk)
    reference_loss = float(plane_losses(target, theta, dirs.vectors, np.zeros(1), np.zeros(1))[0])
    sweep_c = np.linspace(-5 * half_width, 5 * half_width, 201)  # TATi Fig. 8: 5x the domain
    sweep_loss = np.stack([sweep(target, theta, v, sweep_c, chunk) for v in dirs.vectors])
    return {
        "c0": c0,
        "c1": c1,
        "loss": loss,
        "sweep_c": sweep_c,
        "sweep_loss": sweep_loss,
        "reference_loss": reference_loss,
        "centre_loss": float(loss[grid // 2, grid // 2]),
        "range": half_width,
        "grid_min": float(np.nanmin(loss)) if np.isfinite(loss).any() else math.nan,
        "grid_max": float(np.nanmax(loss)) if np.isfinite(loss).any() else math.nan,
        "nonfinite": int(np.isnan(loss).sum()),
    }
