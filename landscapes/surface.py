"""Loss-landscape surfaces: the loss over a 2-D affine slice of parameter space (TATi, ref. 003 §2).

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
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from .base import DATA_CHUNK, ParamError, Target

DIRECTIONS = ("pca", "random", "hessian")
REFERENCES = ("auto", "w0", "mean", "last", "best")
# (v0, v1) as 1-based component numbers: TATi pairs one large- and one small-variance direction.
ZOOM_DOMAINS = tuple(10.0**i for i in range(1, -6, -1))  # TATi's half-widths, 10 down to 1e-5
COMPONENT_PRESETS = {
    "PC1 / PC2": (1, 2),
    "TATi SLP: PC1 / PC64": (1, 64),
    "TATi MLP: PC1 / PC100": (1, 100),
}
EXACT_PCA_MAX = 1000  # min(points, d) up to which the PCA is a full SVD
SPECTRUM = 100  # principal components reported at least (when the trajectory has them)
DENSE_HESSIAN_MAX = 64  # d up to which the Hessian is formed from d HVPs and solved with eigh
# Floats of parameters + activations per batch of grid points. On a CPU a batch that stays near
# the cache is no slower, and a larger one can be slower: a 41 x 41 surface of `tanh` (generic
# path, float32, 2 cores) took 131-148 ms in chunks of 418 points and 164-172 ms in chunks of
# 836 (three processes, medians of 7, alternating); the digits MLP's rows
# (MLP.plane_loss) took 23-25 ms as 21 + 20 points, 22-24 ms whole and 25-27 ms in parts
# of 14. A GPU wants large batches, bounded by memory (~256 MB in float64).
CHUNK_ELEMENTS = {"cpu": 2**21, "cuda": 2**25}


# -- directions ----------------------------------------------------------------------------------


@dataclass
class PCA:
    """Principal axes of a trajectory: ``components`` [k, d] orthonormal rows, variances
    descending; ``explained_variance_ratio`` is relative to the trajectory's total variance."""

    components: np.ndarray
    explained_variance: np.ndarray
    explained_variance_ratio: np.ndarray
    mean: np.ndarray
    method: str


def pca(points: np.ndarray, k: int | None = None, method: str = "auto", seed: int = 0) -> PCA:
    """PCA of ``points`` [..., d] (chains x draws x d are pooled into rows, one global mean).

    ``method``: "exact" (LAPACK SVD of the rows), "randomized" (Halko et al. on the rows, top k
    only), "incremental" (IncrementalPCA in row batches) or "auto" (exact when min(rows, d) <=
    EXACT_PCA_MAX). ``k`` defaults to the rank of the centred rows, min(rows - 1, d)."""
    from sklearn.decomposition import PCA as SkPCA
    from sklearn.decomposition import IncrementalPCA

    x = np.asarray(points)
    x = x.reshape(-1, x.shape[-1])
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    rows, d = x.shape
    if rows < 2:
        raise ParamError("trajectory", f"the PCA needs at least 2 points, got {rows}")
    if not np.isfinite(x).all():
        raise ParamError("trajectory", "has NaN or Inf positions (a diverged chain); drop it first")
    rank = min(rows - 1, d)
    k = rank if k is None else int(k)
    if not 1 <= k <= rank:
        raise ParamError(
            "components", f"must be in [1, {rank}] for {rows} points in d={d}, got {k}"
        )
    if method == "auto":
        method = "exact" if min(rows, d) <= EXACT_PCA_MAX else "randomized"
    if method == "exact":
        model = SkPCA(n_components=k, svd_solver="full")
    elif method == "randomized":
        model = SkPCA(n_components=k, svd_solver="randomized", random_state=seed)
    elif method == "incremental":
        model = IncrementalPCA(n_components=k, batch_size=max(5 * k, 256))
    else:
        raise ParamError(
            "method", f"must be one of auto, exact, randomized, incremental, got {method!r}"
        )
    model.fit(x)
    return PCA(
        components=np.asarray(model.components_, dtype=np.float64),
        explained_variance=np.asarray(model.explained_variance_, dtype=np.float64),
        explained_variance_ratio=np.asarray(model.explained_variance_ratio_, dtype=np.float64),
        mean=np.asarray(model.mean_, dtype=np.float64),
        method=method,
    )


@dataclass
class Directions:
    """Two directions ``vectors`` [2, d] and how they were found (``labels`` name them)."""

    vectors: np.ndarray
    kind: str
    components: tuple[int, int]
    labels: tuple[str, str]
    values: tuple[float, float] = (math.nan, math.nan)  # variance ratios or Hessian eigenvalues
    meta: dict = field(default_factory=dict)


def check_components(components, available: int | None = None, what: str = "") -> tuple[int, int]:
    """Two distinct 1-based component numbers, each <= ``available`` when it is given."""
    try:
        pair = tuple(int(c) for c in components)
    except (TypeError, ValueError):
        raise ParamError(
            "components", f"must be two integers like 1,2, got {components!r}"
        ) from None
    if len(pair) != 2 or pair[0] == pair[1] or min(pair) < 1:
        raise ParamError(
            "components", f"must be two distinct integers >= 1 like 1,2, got {components!r}"
        )
    if available is not None and max(pair) > available:
        raise ParamError("components", f"must be in [1, {available}] ({what}), got {list(pair)}")
    return pair


def picked(kind: str, vectors: np.ndarray, values: np.ndarray, pair, name, **meta) -> Directions:
    """Directions ``pair`` (1-based) out of ranked ``vectors`` [k, d] with their ``values``;
    ``name(i, value)`` labels direction i."""
    i, j = pair
    return Directions(
        vectors=vectors[[i - 1, j - 1]],
        kind=kind,
        components=(i, j),
        labels=(name(i, values[i - 1]), name(j, values[j - 1])),
        values=(float(values[i - 1]), float(values[j - 1])),
        meta=meta,
    )


def pca_directions(result: PCA, components=(1, 2)) -> Directions:
    pair = check_components(components, len(result.components), "principal components found")
    return picked(
        "pca",
        result.components,
        result.explained_variance_ratio,
        pair,
        lambda i, r: f"PC{i} ({100 * r:.3g}% of variance)",
        pca_method=result.method,
    )


def filter_normalise(direction: np.ndarray, theta: np.ndarray, layout: dict) -> np.ndarray:
    """Li et al. (2018): every filter of ``direction`` rescaled to the norm of the matching filter
    of ``theta``. A filter is a row (one output unit's incoming weights) of a tensor with two or
    more axes; biases are zeroed, as Li et al. do; any other vector is one filter."""
    out, i = np.empty_like(direction), 0
    for name, shape in layout.items():
        size = math.prod(shape)
        d, t = direction[i : i + size], theta[i : i + size]
        if len(shape) == 1 and name.split(".")[-1] == "bias":
            out[i : i + size] = 0.0
        else:
            rows = shape[0] if len(shape) > 1 else 1
            d, t = d.reshape(rows, -1), t.reshape(rows, -1)
            scale = np.linalg.norm(t, axis=1, keepdims=True) / np.linalg.norm(
                d, axis=1, keepdims=True
            )
            out[i : i + size] = (d * scale).ravel()
        i += size
    return out


def random_directions(
    target: Target, theta: np.ndarray, seed: int = 0, normalisation: str = "auto"
) -> Directions:
    """Two Gaussian random directions, filter-normalised to ``theta`` ("filter", the default for
    networks: it removes the scale symmetry of ReLU layers), or orthonormal ("unit", the default
    for potentials, whose coordinates have no filters)."""
    if normalisation == "auto":
        normalisation = "unit" if target.n is None else "filter"
    rng = np.random.default_rng(seed)
    raw = rng.standard_normal((2, target.dim))
    if normalisation == "unit":
        vectors = np.linalg.qr(raw.T)[0].T
    elif normalisation == "filter":
        vectors = np.stack([filter_normalise(r, theta, target.layout) for r in raw])
        if not (np.linalg.norm(vectors, axis=1) > 0).all():
            raise ParamError(
                "normalisation",
                "filter normalisation gives a zero direction at this reference point (every "
                "filter of theta* is zero); use normalisation='unit'",
            )
    else:
        raise ParamError("normalisation", f"must be auto, filter or unit, got {normalisation!r}")
    label = "filter-normalised random" if normalisation == "filter" else "random unit"
    return Directions(
        vectors=vectors,
        kind="random",
        components=(1, 2),
        labels=(f"{label} direction 1", f"{label} direction 2"),
        meta={"normalisation": normalisation, "seed": seed},
    )


def hvp(target: Target, theta: Tensor, vectors: Tensor) -> Tensor:
    """[k, d] Hessian-vector products H(theta) v of the full-data loss, one vector per chain
    (chains are independent, so one double backward gives all k), summed over data chunks."""
    k, n = vectors.shape[0], target.n
    spans = [None] if n is None else [(s, min(s + DATA_CHUNK, n)) for s in range(0, n, DATA_CHUNK)]
    out = torch.zeros_like(vectors)
    for span in spans:
        batch = None if span is None else target.batch(torch.arange(*span, device=theta.device))
        weight = 1.0 if span is None else (span[1] - span[0]) / n
        with torch.enable_grad():
            x = theta.expand(k, -1).clone().requires_grad_(True)
            (g,) = torch.autograd.grad(target.loss(x, batch).sum(), x, create_graph=True)
            (hv,) = torch.autograd.grad(g, x, grad_outputs=vectors)
        out += weight * hv.detach()
    return out


def hessian_eigen(target: Target, theta: np.ndarray, k: int, method: str = "auto", seed: int = 0):
    """The k largest (algebraic) eigenvalues of the full-data loss's Hessian at ``theta`` and their
    eigenvectors [k, d], descending: Lanczos (ARPACK's eigsh) on Hessian-vector products, or,
    for d <= DENSE_HESSIAN_MAX, numpy's eigh on the Hessian built from d products."""
    from scipy.sparse.linalg import LinearOperator, eigsh

    d = target.dim
    if not 1 <= k <= d:
        raise ParamError("components", f"must be in [1, {d}] (the Hessian's size), got {k}")
    t = torch.as_tensor(theta, device=target.device, dtype=target.dtype)
    if method == "auto":
        method = "dense" if d <= DENSE_HESSIAN_MAX or k >= d else "lanczos"
    if method == "dense":
        eye = torch.eye(d, device=t.device, dtype=t.dtype)
        h = torch.cat([hvp(target, t, eye[s : s + 256]) for s in range(0, d, 256)])
        h = h.cpu().double().numpy()
        values, vectors = np.linalg.eigh((h + h.T) / 2)
        order = np.argsort(values)[::-1][:k]
        return values[order], vectors[:, order].T
    if method != "lanczos":
        raise ParamError("method", f"must be auto, dense or lanczos, got {method!r}")
    if k >= d:
        raise ParamError("components", f"Lanczos finds at most d - 1 = {d - 1} eigenvectors")

    def matvec(v: np.ndarray) -> np.ndarray:
        v = torch.as_tensor(
            np.asarray(v, dtype=np.float64).reshape(1, d), device=t.device, dtype=t.dtype
        )
        return hvp(target, t, v)[0].cpu().double().numpy()

    start = np.random.default_rng(seed).standard_normal(d)  # ARPACK's own start is not seeded
    op = LinearOperator((d, d), matvec=matvec, dtype=np.float64)
    values, vectors = eigsh(op, k=k, which="LA", v0=start, tol=1e-8)
    order = np.argsort(values)[::-1]
    return values[order], vectors[:, order].T


def hessian_directions(
    target: Target, theta: np.ndarray, components=(1, 2), method: str = "auto", seed: int = 0
) -> Directions:
    pair = check_components(components, target.dim, "the Hessian's size")
    values, vectors = hessian_eigen(target, theta, max(pair), method, seed)
    return picked(
        "hessian",
        vectors,
        values,
        pair,
        lambda i, v: f"Hessian eigenvector {i} (λ = {v:.3g})",
        eigenvalues=values,
    )


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
    if directions not in DIRECTIONS:
        raise ParamError("directions", f"must be one of {list(DIRECTIONS)}, got {directions!r}")
    components = check_components(components)
    if reference not in REFERENCES:
        raise ParamError("reference", f"must be one of {list(REFERENCES)}, got {reference!r}")
    if target.dim < 2:
        raise ParamError("target", f"a surface needs d >= 2 parameters; {target.name} has d = 1")
    traj = np.asarray(trajectory)
    if traj.ndim != 3 or traj.shape[2] != target.dim:
        raise ParamError(
            "trajectory", f"must be [chains, draws, {target.dim}], got {list(traj.shape)}"
        )
    chains, draws, _ = traj.shape
    steps = np.arange(draws) if steps is None else np.asarray(steps)
    finite = np.isfinite(traj).all(axis=(1, 2))  # diverged chains stay out of PCA and overlay
    if not finite.any():
        raise ParamError("trajectory", "every chain has NaN or Inf positions (all diverged)")
    kept = np.flatnonzero(finite)
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

    # The overlay: thinned draws of a few chains, each with its true full-data loss.
    shown = kept[:path_chains]
    index = np.arange(0, draws, every)
    if index[-1] != draws - 1:
        index = np.append(index, draws - 1)  # always show where the chain ended
    shown_points = traj[np.ix_(shown, index)]  # [chains, points, d]
    flat = torch.as_tensor(
        shown_points.reshape(-1, target.dim), device=target.device, dtype=target.dtype
    )
    path_loss = losses(target, flat, chunk).reshape(len(shown), len(index))

    ref_w0 = (
        w0 if w0 is not None else (None if target.w0 is None else target.w0.double().cpu().numpy())
    )
    if reference == "auto":
        reference = "w0" if ref_w0 is not None else "best"
    body = traj[kept, burn_in:]
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

    path, off_plane = project(shown_points, theta, dirs.vectors)
    half_width = auto_range(path) if half_width is None else float(half_width)
    c0 = c1 = coordinates(grid, half_width)
    loss = grid_losses(target, theta, dirs.vectors, c0, c1, chunk)
    reference_loss = float(plane_losses(target, theta, dirs.vectors, np.zeros(1), np.zeros(1))[0])
    sweep_c = np.linspace(-5 * half_width, 5 * half_width, 201)  # TATi Fig. 8: 5x the domain
    sweep_loss = np.stack([sweep(target, theta, v, sweep_c, chunk) for v in dirs.vectors])
    seen = np.concatenate([loss.ravel(), path_loss.ravel(), [reference_loss]])
    lowest = float(np.nanmin(seen)) if np.isfinite(seen).any() else math.nan
    ratio = result.explained_variance_ratio if result is not None else np.empty(0)
    return {
        "c0": c0,
        "c1": c1,
        "loss": loss,
        "path": path,
        "path_loss": path_loss,
        "path_step": steps[index],
        "path_chain": shown,
        "off_plane": off_plane,
        "sweep_c": sweep_c,
        "sweep_loss": sweep_loss,
        "theta": theta,
        "directions": dirs.vectors,
        "direction_kind": dirs.kind,
        "components": np.asarray(dirs.components),
        "direction_values": np.asarray(dirs.values),
        "label0": dirs.labels[0],
        "label1": dirs.labels[1],
        "explained_variance_ratio": ratio,
        "reference": reference,
        "reference_loss": reference_loss,
        "centre_loss": float(loss[grid // 2, grid // 2]),
        "lowest_loss": lowest,
        "range": half_width,
        "grid_min": float(np.nanmin(loss)) if np.isfinite(loss).any() else math.nan,
        "grid_max": float(np.nanmax(loss)) if np.isfinite(loss).any() else math.nan,
        "nonfinite": int(np.isnan(loss).sum()),
        "diverged_chains": int(chains - len(kept)),
        **{f"meta_{k}": v for k, v in dirs.meta.items()},
    }
