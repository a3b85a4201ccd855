"""A stored run's loss-landscape surface: its trajectory from the Store, the surface from
``landscapes.surface``. The CLI (``python -m jobs surface``) and the app share this one path.

The trajectory is the recorded positions when the run kept them all (d <= 64), else the thinned
full snapshots a projected run keeps for exactly this purpose. A running run works too: the
Store hands out a consistent prefix.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

import landscapes
from landscapes import ParamError, Target
from landscapes import surface as surfaces
from runs.spec import RunSpec, SpecError, parse_spec
from runs.store import Store


@dataclass
class Trajectory:
    spec: RunSpec
    positions: np.ndarray  # [chains, draws, d]
    steps: np.ndarray  # [draws]
    w0: np.ndarray | None  # an LLC run's trained point
    source: str  # "records" or "snapshots"

    @property
    def burn_in(self) -> int:
        """The first draw at or after the spec's burn-in step."""
        return int(np.searchsorted(self.steps, self.spec.burn_in))


def trajectory(store: Store, run_id: str) -> Trajectory:
    """The run's positions; a chain that diverged is all NaN, so the surface leaves it out: the
    sampler froze it at its last finite position, often astronomically far out, which would
    otherwise be the PCA's first axis and set the grid's range."""
    record = store.get(run_id)
    spec = parse_spec(record.spec)
    w0 = store.get_array(run_id, "w0")
    flags = store.read(run_id, names=["diverged"]).get("diverged")
    diverged = flags.any(axis=0) if flags is not None and len(flags) else None
    snapshots = store.read(run_id, series="snapshots")
    if snapshots:
        position, steps = snapshots["position"], snapshots["step"]
        positions = _without(diverged, np.swapaxes(position, 0, 1))
        return Trajectory(spec, positions, steps, w0, "snapshots")
    data = store.read(run_id, names=["step", "position"])
    if "position" not in data or len(data["position"]) == 0:
        yet = " yet" if record.status in ("queued", "running") else ""
        raise SpecError("run", f"{run_id} has no recorded positions{yet} (status {record.status})")
    if store.get_array(run_id, "projection") is not None:
        raise SpecError(
            "run",
            f"{run_id} recorded only a random projection of its positions and no full snapshots "
            "(record.snapshots = 0); rerun with record.snapshots > 0",
        )
    positions = _without(diverged, np.swapaxes(data["position"], 0, 1))
    return Trajectory(spec, positions, data["step"], w0, "records")


def _without(diverged: np.ndarray | None, positions: np.ndarray) -> np.ndarray:
    """``positions`` [chains, draws, d] with the diverged chains' set to NaN."""
    if diverged is None or not diverged.any():
        return positions
    positions = positions.astype(np.result_type(positions, np.float32))  # a copy to write
    positions[diverged] = np.nan
    return positions


def target_of(spec: RunSpec, device: str = "auto", dtype: str = "float64") -> Target:
    """The run's target, rebuilt in ``dtype`` (float64 by default: ln|L - L0| at the small zoom
    domains needs differences far below float32's resolution), in the model's own parameters:
    a run records theta, so a repriorised network's surface is its loss in theta."""
    try:
        target = landscapes.make(spec.target.name, device=device, dtype=dtype, **spec.target.params)
        return target.original_target()
    except ParamError as exc:
        raise SpecError(exc.field, str(exc).removeprefix(f"{exc.field}: ")) from None


MAX_RANGE = 1e6  # the grid's half-width; its 5x line reaches 5e6, far past any trajectory


def check_range(half_width: float | None, field: str = "range") -> None:
    """A half-width in (0, MAX_RANGE], or None (auto); else a SpecError on ``field``."""
    if half_width is not None and not 0 < half_width <= MAX_RANGE:
        raise SpecError(field, f"must be a number in (0, {MAX_RANGE:g}], got {half_width:g}")


def compute(
    store: Store, run_id: str, device: str = "auto", dtype: str = "float64", **options
) -> dict:
    """The surface of run ``run_id`` (``options`` as ``landscapes.surface.surface`` takes them);
    the result also names the run, the trajectory's source and the seconds it took."""
    started = time.perf_counter()
    check_range(options.get("half_width"))
    traj = trajectory(store, run_id)
    target = target_of(traj.spec, device, dtype)
    options.setdefault("burn_in", min(traj.burn_in, traj.positions.shape[1] - 1))
    try:
        out = surfaces.surface(target, traj.positions, traj.steps, w0=traj.w0, **options)
    except ParamError as exc:
        raise SpecError(exc.field, str(exc).removeprefix(f"{exc.field}: ")) from None
    out.update(run_id=run_id, source=traj.source, seconds=time.perf_counter() - started)
    return out


SUMMARY = (
    "reference_loss",
    "centre_loss",
    "grid_min",
    "grid_max",
    "lowest_loss",
    "range",
    "nonfinite",
    "diverged_chains",
    "reference",
    "direction_kind",
    "label0",
    "label1",
    "source",
    "run_id",
    "seconds",
)


def summary(out: dict) -> dict:
    """The JSON facts of a surface (arrays left to the .npz)."""
    facts = {key: _plain(out[key]) for key in SUMMARY}
    facts["directions"] = facts.pop("direction_kind")
    facts["grid"] = len(out["c0"])
    facts["components"] = [int(c) for c in out["components"]]
    facts["direction_values"] = [float(v) for v in out["direction_values"]]
    facts["explained_variance_ratio"] = [float(v) for v in out["explained_variance_ratio"]]
    facts["path_shape"] = list(out["path"].shape)
    return facts


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    return value


def save(out: dict, path) -> None:
    """Every array and fact of ``out`` in one .npz (strings as numpy strings, no pickles)."""
    with open(path, "wb") as f:  # a file object: np.savez must not append ".npz"
        np.savez(f, **{key: np.asarray(value) for key, value in out.items()})
