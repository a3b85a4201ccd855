"""The two directions of a loss-landscape plane (TATi: Heber et al. 2020, Sec. 3.2): principal
components of a sampler's trajectory, filter-normalised random directions, or the Hessian's extreme
eigenvectors. Nothing here forms a d x d matrix: the PCA is an SVD of the (points x d) trajectory,
and Hessian eigenvectors come from Lanczos (ARPACK) on Hessian-vector products.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from .base import DATA_CHUNK, ParamError, Target

EXACT_PCA_MAX = 1000  # min(points, d) up to which the PCA is a full SVD
DENSE_HESSIAN_MAX = 64  # d up to which the Hessian is formed from d HVPs and solved with eigh


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
