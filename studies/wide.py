"""What the Wide networks page computes besides the sweep (``studies.reprior``): posterior slices
through a run's draw in theta and in phi (Hron et al. 2022, Fig. 5) and the KL study from prior
draws (docs/methods/wide-networks.md). Headless: the page, the benchmark and the tests call these.
"""

from __future__ import annotations

import numpy as np
import torch

import landscapes
from landscapes.base import shown
from landscapes.surface import coordinates
from runs.spec import SpecError, parse_spec
from runs.store import Store
from studies.reprior import check_depth


def _targets(params: dict) -> tuple:
    """(theta target, phi target) of an ntk-fcn run's parameters, float64 on the CPU."""
    base = {k: v for k, v in params.items() if k != "parametrisation"}
    return tuple(
        landscapes.make("ntk-fcn", dtype="float64", device="cpu", parametrisation=p, **base)
        for p in ("standard", "reprior")
    )


def _last_draw(store: Store, run_id: str) -> np.ndarray:
    """theta of the run's first chain at its last kept full position (snapshots or records)."""
    for series, names in (("snapshots", None), ("records", ["position"])):
        end = store.records(run_id, series)
        if not end:
            continue
        last = store.read(run_id, since=end - 1, names=names, series=series)
        if "position" in last and last["position"].shape[-1] > 1:
            return last["position"][-1, 0].astype(np.float64)
    raise SpecError("run", f"{run_id} kept no full positions to slice through (record.positions)")


PLANE_NUMBERS = 1 << 22  # parameters of the plane's points held at once (32 MB in float64)


def _value(target, centre: torch.Tensor, steps: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """-log posterior (up to the evidence) at centre + steps @ vectors ([P, k] @ [k, d]) in the
    target's coordinates, PLANE_NUMBERS parameters at a time: a plane through a 265,729-
    parameter network at grid 41 would otherwise be 3.6 GB at once."""
    rows = max(1, PLANE_NUMBERS // target.dim)
    vectors = torch.from_numpy(vectors)
    out = []
    with torch.no_grad():
        for s in range(0, len(steps), rows):
            points = centre + torch.from_numpy(steps[s : s + rows]) @ vectors
            loss = target.loss(points)
            out.append((target.nbeta * loss + target.prior_energy(points)).numpy())
    return np.concatenate(out)


def slices(
    store: Store, run_id: str, grid: int = 41, half_width: float = 1.0, seed: int = 0
) -> dict:
    """-log p on the plane through the run's last draw theta* (first chain) spanned by two
    random orthonormal directions u, v, in theta (theta* + a u + b v) and in phi (phi* + a u +
    b v, phi* = T^-1(theta*)), each minus its value at the centre; and the 1-D slices along
    u. In theta a wide network's posterior is a narrow, curved valley set by the data; in phi
    it is close to the prior N(0, I): the slice is a round bowl of curvature ~1."""
    record = store.get(run_id)
    spec = parse_spec(record.spec)
    if spec.target.name != "ntk-fcn":
        raise SpecError("run", f"{run_id} samples {spec.target.name}, not an ntk-fcn network")
    in_theta, in_phi = _targets(spec.target.params)
    theta = torch.from_numpy(_last_draw(store, run_id))[None]
    phi = in_phi.from_original(theta)
    rng = np.random.default_rng(seed)
    u, v = np.linalg.qr(rng.standard_normal((in_theta.dim, 2)))[0].T
    axis = coordinates(grid, half_width)
    a, b = np.meshgrid(axis, axis, indexing="ij")
    plane, vectors = np.stack([a.ravel(), b.ravel()], 1), np.stack([u, v])
    out = {"a": axis, "b": axis, "half_width": half_width, "grid": grid, "seed": seed}
    for name, target, centre in (("theta", in_theta, theta), ("phi", in_phi, phi)):
        at_centre = _value(target, centre, np.zeros((1, 2)), vectors)[0]
        out[name] = (_value(target, centre, plane, vectors) - at_centre).reshape(grid, grid)
        line = _value(target, centre, np.stack([axis, 0 * axis], 1), vectors)
        out[f"line_{name}"] = line - at_centre
    out["width"] = spec.target.params["width"]
    out["parametrisation"] = spec.target.params["parametrisation"]
    return out


# Prior draws of the KL study: each costs an n x n Cholesky factorisation and the estimate's
# error falls only as 1/sqrt(draws), so 10^9 draws (hours, 16 GB of per-draw terms) buy nothing
# 10^5 do not; 1000 is the check of docs/methods/wide-networks.md. Two at least: a spread.
KL_DRAWS = (2, 100_000)
SEED_MAX = 2**31 - 1  # a RunSpec's seed bound (torch's generator takes at most 64 bits)


def check_kl(draws: int, seed: int, depth: int, prefix: str = "") -> None:
    """A SpecError naming ``prefix + "draws"`` (or "seed", "depth") when it is out of range."""
    check_depth(depth, f"{prefix}depth")
    low, high = KL_DRAWS
    if not low <= draws <= high:
        raise SpecError(
            f"{prefix}draws",
            f"must be an integer in [{low}, {high}], got {shown(draws)}: each prior draw is an "
            "n x n Cholesky factorisation and the KL's error falls only as 1/sqrt(draws)",
        )
    if not 0 <= seed <= SEED_MAX:
        raise SpecError(
            f"{prefix}seed", f"must be an integer in [0, {SEED_MAX}], got {shown(seed)}"
        )


def kl_table(
    widths: tuple[int, ...],
    depth: int = 1,
    n: int = 32,
    draws: int = 1000,
    data: str = "synthetic",
    seed: int = 0,
) -> list[dict]:
    """KL(q || p) in phi and in theta at each width (``NTKFCN.prior_kl``), from ``draws`` prior
    draws with a fixed seed: docs/methods/wide-networks.md reports 289, 52, 22, 7.7, 1.9 (phi) over
    widths 8..2048 at n = 32, depth 1, and ~3000 in theta at every width."""
    check_kl(draws, seed, depth)
    rows = []
    for width in widths:
        target = landscapes.make(
            "ntk-fcn", width=width, depth=depth, n=n, data=data, dtype="float64", device="cpu"
        )
        kl = target.prior_kl(draws, torch.Generator().manual_seed(seed))
        rows.append({"width": width, "depth": depth, "n": n, **kl})
    return rows


def kl_seconds(width: int, depth: int = 1, n: int = 32, draws: int = 1000, data: str = "synthetic"):
    """About how long ``kl_table`` takes at ``width`` on one thread of a 2-core CPU, from its
    costs per prior draw (measured here): the hidden layers' normals and features (~ H (2.7e-8
    + 1e-10 n) s, H the hidden parameters), the kernel (5e-11 n^2 width s) and its Cholesky
    (1e-10 n^3 s). For a page that computes it while the user waits."""
    facts = landscapes.facts("ntk-fcn", {"width": width, "depth": depth, "n": n, "data": data})
    sizes = facts["widths"]
    hidden = facts["dim"] - (sizes[-2] + 1) * sizes[-1]
    per_draw = hidden * (2.7e-8 + 1e-10 * n) + 5e-11 * n * n * width + 1e-10 * n**3
    return 0.05 + draws * per_draw
