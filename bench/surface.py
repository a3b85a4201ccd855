"""``python -m bench surface``: loss-landscape surfaces, batched against per-point loops, and
the PCA of a large trajectory.

(a) The digits MLP (64-32-10, ReLU, cross-entropy on the full training split, d = 2410): a 41 x 41
    surface on two filter-normalised random directions. Basin evaluates the grid points as
    chains (``landscapes.surface.grid_losses``; ``MLP.plane_loss`` computes the first layer once
    per direction, not once per point), in float32, and again in float64 (the surfaces'
    default). The peers are per-point loops, a forward pass at every point: the
    same target one point at a time, and what the loss-landscape code of Li et al. (2018) does,
    an ``nn.Sequential`` whose weights are overwritten for every point
    (``vector_to_parameters``) before a full-data forward pass. All give the same grid.
    The same grid on the banana (d = 2) and on the default deep linear network (d = 158,
    n = 100,000, around its truth w0), where each loop step is a forward pass over the data.
(b) The PCA of a trajectory of 2000 snapshots in d = 10^5 (float32, 800 MB): a Gaussian random
    walk, whose principal components are known (Antognini & Sohl-Dickstein 2018: the centred
    walk's PC k explains a share proportional to 1 / k^2, so PC1 holds 6 / pi^2 ~ 0.61 of the
    variance for a long walk). Each method runs in a fresh process so its peak resident memory is
    its own; a d x d covariance would be 10^10 floats (80 GB in float64).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
GRID, HALF_WIDTH = 41, 1.0
SNAPSHOTS, DIM = 2000, 100_000


def mlp_target(dtype: str = "float32"):
    import landscapes

    return landscapes.make("mlp", dataset="digits", hidden_sizes=(32,), device="cpu", dtype=dtype)


def loop(loss_at, target, theta, vectors, c) -> np.ndarray:
    """The grid one point at a time: ``loss_at(point [d]) -> float`` at every (c[i], c[j])."""
    out = np.empty((len(c), len(c)))
    kw = {"dtype": target.dtype}
    t, v = torch.as_tensor(theta, **kw), torch.as_tensor(vectors, **kw)
    with torch.no_grad():
        for i, a in enumerate(c):
            for j, b in enumerate(c):
                out[i, j] = loss_at(t + a * v[0] + b * v[1])
    return out


def loop_target(target, theta, vectors, c) -> np.ndarray:
    return loop(lambda w: float(target.loss(w[None])[0]), target, theta, vectors, c)


def loop_module(target, theta, vectors, c) -> np.ndarray:
    """Li et al.'s loop: one nn.Module, its weights set from the flat vector at every point."""
    from torch import nn

    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10)).to(target.dtype)
    # Basin's flat layout is (W0, b0, W1, b1), the same order as the module's parameters.
    x, y = target.x, target.y.reshape(-1)

    def loss_at(w):
        nn.utils.vector_to_parameters(w, model.parameters())
        return float(nn.functional.cross_entropy(model(x), y))

    return loop(loss_at, target, theta, vectors, c)


def surface_case(repeats: int, name: str = "mlp", dtype: str = "float32") -> dict:
    import landscapes
    from landscapes import surface as S

    if name == "mlp":
        target = mlp_target(dtype)
        theta = target.initial(torch.Generator().manual_seed(0), 1)[0].double().numpy()
    else:  # a potential (each point is a few flops, so a loop is all call overhead) or a DLN
        target = landscapes.make(name, device="cpu", dtype="float32")
        theta = np.zeros(target.dim) if target.w0 is None else target.w0.double().numpy()
    vectors = S.random_directions(target, theta, seed=0).vectors
    c = S.coordinates(GRID, HALF_WIDTH)
    sides = {
        "batched": lambda: S.grid_losses(target, theta, vectors, c, c),
        "loop_target": lambda: loop_target(target, theta, vectors, c),
    }
    if name == "mlp":
        sides["loop_module"] = lambda: loop_module(target, theta, vectors, c)
    times: dict[str, list[float]] = {side: [] for side in sides}
    grids = {}
    for _ in range(repeats):  # alternating, so the machine's noise hits every side alike
        for side, fn in sides.items():
            start = time.perf_counter()
            grids[side] = fn()
            times[side].append(time.perf_counter() - start)
    ref = grids["batched"]
    return {
        "target": name,
        "dim": target.dim,
        "n": target.n,
        "chunk": S.points_per_chunk(target),
        "seconds": {k: statistics.median(v) for k, v in times.items()},
        "all_seconds": times,
        "max_rel_diff": {
            k: float(np.max(np.abs(g - ref) / np.abs(ref)))
            for k, g in grids.items()
            if k != "batched"
        },
    }


def pca_child(method: str) -> None:
    """One PCA in this (fresh) process; prints seconds, peak RSS and the leading ratios."""
    import resource

    from landscapes import surface as S

    rng = np.random.default_rng(0)
    walk = np.empty((SNAPSHOTS, DIM), dtype=np.float32)
    walk[0] = 0.0
    step = np.empty(DIM, dtype=np.float32)
    for t in range(1, SNAPSHOTS):  # row by row: never a second 800 MB array of increments
        step[:] = rng.standard_normal(DIM, dtype=np.float32)
        walk[t] = walk[t - 1] + step
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    result = S.pca(walk, k=S.SPECTRUM, method=method)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    ratio = result.explained_variance_ratio
    print(
        json.dumps(
            {
                "method": result.method,
                "seconds": seconds,
                "data_bytes": walk.nbytes,
                "rss_before": before,
                "rss_peak": peak,
                "ratio": ratio[:5].tolist(),
                "ratio_sum": float(ratio.sum()),
                "orthonormal_error": float(
                    np.abs(result.components @ result.components.T - np.eye(len(ratio))).max()
                ),
            }
        )
    )


def pca_case(methods: list[str], repeats: int) -> dict:
    out: dict[str, list[dict]] = {m: [] for m in methods}
    for _ in range(repeats):
        for method in methods:
            proc = subprocess.run(
                [sys.executable, "-m", "bench.surface", "--pca-child", method],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=True,
            )
            out[method].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return out


def walk_ratio(k: int, steps: int = SNAPSHOTS) -> float:
    """PC k's share of the variance of a centred random walk of ``steps`` points as d -> inf:
    the increments are i.i.d. across coordinates, so the (steps x steps) Gram matrix of the walk
    tends to d * min(s, t); its centred eigenvalues are the PCA's."""
    t = np.arange(steps, dtype=np.float64)
    centre = np.eye(steps) - 1.0 / steps
    lam = np.linalg.eigvalsh(centre @ np.minimum.outer(t, t) @ centre)[::-1]
    return float(lam[k - 1] / lam.sum())


def case_in_child(repeats: int, name: str, dtype: str = "float32") -> dict:
    """``surface_case`` in a fresh process: what ran before in the same process changed the
    timings (after the MLP's float64 torch path, the banana's batched grid took 2.8 ms instead
    of 0.6; with the DLN's first, the MLP's per-point loop took 0.33 s instead of 0.23)."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.surface", "--case-child", str(repeats), name, dtype],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(repeats: int, quick: bool) -> dict:
    repeats = 1 if quick else repeats
    surface = case_in_child(repeats, "mlp")
    # float64, the surfaces' default (ln|L - L0| at the small zoom domains)
    surface64 = case_in_child(repeats, "mlp", "float64")
    potential = case_in_child(repeats, "banana")
    # The default DLN (n = 100,000): its loss comes from the data's second moments
    linear = case_in_child(repeats, "dln")
    pca = pca_case(
        ["randomized"] if quick else ["randomized", "exact"], 1 if quick else max(1, repeats // 2)
    )
    limit = [walk_ratio(k) for k in range(1, 6)]
    return {
        "surface": surface,
        "surface64": surface64,
        "potential": potential,
        "linear": linear,
        "pca": pca,
        "walk_ratio": limit,
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["--pca-child"]:
        torch.set_num_threads(torch.get_num_threads())
        pca_child(sys.argv[2])
    elif sys.argv[1:2] == ["--case-child"]:
        print(json.dumps(surface_case(int(sys.argv[2]), sys.argv[3], sys.argv[4])))
