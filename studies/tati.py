"""A recorded run as TATi's three CSV tables (as TATi's software writes them; docs/methods/tati.md),
so that a TATi user's analysis scripts read Basin's output: ``python -m jobs export ID --format tati
--out DIR`` writes ``run.csv``, ``trajectory.csv`` and ``averages.csv`` into DIR, with TATi's column
names.

Headless: pure functions over the Store's arrays and the run's spec (no Streamlit).

Units. Basin samples exp(-U / T) with U = nbeta L (+ localization and prior terms), T the
kernel's ``temperature`` (1 for kernels without one); TATi samples exp(-beta L). So TATi's
inverse temperature is **beta = nbeta / T**, and every column is in TATi's units:

- ``loss`` is L as the store recorded it (``Info.loss``): the minibatch loss for minibatch runs,
  as TATi's, and for most kernels the loss at the step's starting point (at the recorded
  position for baoab and the Metropolis kernels), while ``virial``, ``accuracy`` and the
  trajectory's coordinates are at the recorded position, the one after the step.
- ``virial`` is |1/2 theta . grad L| at the row's position, grad L on the full data, from the
  target rebuilt from the stored spec (in float64 on the CPU). Its canonical mean is N / (2 beta)
  (Heber et al. 2020, App. A) where the target is exp(-beta L); with localization or a prior the
  theorem holds for U / nbeta, not L, and this column (of L alone, as TATi's) differs from it.
- ``kinetic_energy``: TATi's momentum p_T ~ N(0, 1/beta) drives L; a splitting kernel's p ~ N(0, T)
  drives U, and p = sqrt(nbeta) p_T (time rescaled by sqrt(nbeta)), so K_TATi = kinetic / nbeta,
  with mean N / (2 beta) as in TATi. SGHMC and SGNHT move w by p, a velocity times
  sqrt(step_size), so there K_TATi = kinetic / (step_size nbeta). ``total_energy`` = loss +
  kinetic_energy and ``scaled_momentum`` = |p_T| = sqrt(2 kinetic_energy), as TATi's.
- ``scaled_gradient`` = epsilon |grad L| with TATi's step width epsilon: sqrt(nbeta) step_size
  for the splitting kernels (baoab, gla1, gla2, splitting, eqn), sqrt(nbeta step_size) for SGHMC
  and SGNHT, nbeta step_size / 2 for SGLD and ULA (Delta w = -(eps/2) grad U + sqrt(eps) eta is
  TATi's SGLD with epsilon = nbeta eps / 2 and beta = nbeta); at the row's position.

Rows: one per walker (``id``: Basin's chain index) and written step, ordered by step then id as
TATi writes them. ``step`` is Basin's step index (0-based, the store's and the npz export's);
``epoch`` the passes over the training data completed before it, floor(step b / n) with b the
points a step reads (= step on the full batch and on potentials, where TATi's column holds its
step counter too); both integers, as TATi's readers cast them. Every stored record is written,
burn-in included (TATi writes every step); ``every_nth`` = N (in steps) writes the rows with
step % N == 0. The store keeps every ``thin``-th step only, so N must be a multiple of thin; 1,
the default, writes every stored record.

Averages follow TATi: they start at the first record with step >= burn_in and are sums over the
records since then divided by their count; at thin 1 that is TATi's sum / (step + 1 - burn_in),
with thinning it averages the kept steps only. Before the burn-in ends they are NaN.
``average_virials`` = |1/2 sum theta . grad L| / count (TATi takes the absolute value of the summed
virial, not the sum of absolute values); ``ensemble_average_loss`` = sum L e^{-beta L} / sum
e^{-beta L} over the same records (in log space: e^{-beta L} underflows at Basin's nbeta);
``average_rejection_rate`` (Metropolis kernels: those that record ``accepted``) = the running
mean of 1 - accepted. A diverged chain's rows are NaN from its divergence on.

Columns Basin cannot know are kept, so that scripts indexing them work, and written as ``nan``
(which pandas, numpy.loadtxt and genfromtxt all read as NaN; an empty field breaks loadtxt):
``accuracy`` on potentials and on regression networks other than a single output with +-1
targets (two clusters: sign agreement; classification: argmax agreement, on the training data);
``scaled_noise`` always (a step's noise is not stored); ``average_inertia`` always (TATi's
inertia theta . p needs the momentum vector, of which Basin records only the kinetic energy);
the momentum columns of kernels other than those named above; ``time_per_nth_step`` where the
run has no summary (else the run's mean sampling time per step times the rows' step gap).

Column sets follow TATi's per-sampler headers: the momentum columns (``total_energy``,
``kinetic_energy``, ``scaled_momentum``; ``average_kinetic_energy``, ``average_inertia``) where the
kernel records a momentum's ``kinetic`` energy (baoab, gla1, gla2, splitting, eqn, sghmc, sgnht),
SGLD's columns elsewhere (HMC and NUTS record no momentum in Basin).

The trajectory's ``weight0..``/``bias0..`` split the flat position by the target's ``layout``:
1-D tensors named ``...bias`` are biases, every other tensor (a horseshoe prior's scales
included, so that weights + biases are all d coordinates) is weights, in layout order; a
potential's coordinates are all weights. It needs the full positions: a run recorded with
``record.positions`` "projection" or "none" is refused (a SpecError naming the field). So is a
run with damaged records (``CorruptRecords``), where the npz export leaves them out: running
averages that silently skipped them would be wrong for every row after the gap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from runs.build import build
from runs.spec import RunSpec, SpecError

RUN_FILE, TRAJECTORY_FILE, AVERAGES_FILE = "run.csv", "trajectory.csv", "averages.csv"
FILES = (RUN_FILE, TRAJECTORY_FILE, AVERAGES_FILE)
INTEGER_COLUMNS = ("id", "step", "epoch")
FLOAT_FORMAT = "%.9g"  # round-trips the stored float32 values
POSITIONS_PER_PASS = 1 << 22  # positions x data points in one gradient pass


@dataclass(frozen=True)
class Table:
    """One CSV table: its header and its rows ([rows, columns], float64)."""

    header: tuple[str, ...]
    rows: np.ndarray

    def column(self, name: str) -> np.ndarray:
        return self.rows[:, self.header.index(name)]


@dataclass(frozen=True)
class Units:
    """TATi's beta and step width for a run, and the factor that turns Basin's recorded
    ``kinetic`` into TATi's kinetic energy (None where the kernel's has no known mapping)."""

    beta: float
    nbeta: float
    temperature: float
    step: float | None
    kinetic: float | None


def units(kernel, target) -> Units:
    """TATi's units for ``kernel`` on ``target`` (the module docstring derives them)."""
    from samplers.sghmc import SGHMC
    from samplers.sgld import SGLD
    from samplers.sgnht import SGNHT
    from samplers.splitting import Splitting

    nbeta = float(kernel.nbeta_for(target))
    temperature = float(getattr(kernel, "temperature", 1.0))
    h = float(kernel.step_size)
    step = kinetic = None
    if isinstance(kernel, Splitting):  # eqn too
        step, kinetic = math.sqrt(nbeta) * h, 1.0 / nbeta
    elif isinstance(kernel, (SGHMC, SGNHT)):
        step, kinetic = math.sqrt(nbeta * h), 1.0 / (h * nbeta)
    elif isinstance(kernel, SGLD):  # ula too
        step = nbeta * h / 2
    return Units(nbeta / temperature, nbeta, temperature, step, kinetic)


def check_every_nth(every_nth: int, thin: int) -> int:
    """``every_nth`` checked against the run's ``thin`` (``--every-nth`` on the CLI): 1, or a
    multiple of thin; returns the step gap between written rows."""
    if every_nth == 1:
        return thin
    if every_nth < 1 or every_nth % thin:
        allowed = f"1 (every stored record) or a multiple of {thin}, e.g. {thin}, {2 * thin}"
        raise SpecError(
            "--every-nth",
            f"must be {allowed}: the store keeps every {thin}-th step of this run (its thin), "
            f"got {every_nth}",
        )
    return every_nth


def parameter_columns(target) -> tuple[np.ndarray, np.ndarray]:
    """Indices into the flat position of the weights and of the biases (module docstring)."""
    weights, biases, offset = [], [], 0
    for name, shape in target.layout.items():
        size = math.prod(shape)
        part = range(offset, offset + size)
        bias = (
            target.n is not None
            and len(shape) == 1
            and name.split(".")[-1] == "bias"
            and not name.startswith("prior.")
        )
        (biases if bias else weights).extend(part)
        offset += size
    return np.asarray(weights, dtype=np.int64), np.asarray(biases, dtype=np.int64)


def check_positions(spec: RunSpec, dim: int, records: dict | None = None) -> None:
    """A SpecError naming ``record.positions`` unless the run kept every coordinate (and
    ``records``, when given, hold them)."""
    kept = spec.record.positions
    if kept == "auto":
        kept = "all" if dim <= 64 else "projection"
    position = None if records is None else records.get("position")
    held = records is None or (position is not None and position.shape[-1] == dim)
    if kept != "all" or not held:
        what = {
            "projection": f"a random projection of its d = {dim} coordinates",
            "none": "no positions",
        }.get(kept, "no full positions")
        raise SpecError(
            "record.positions",
            f"the run recorded {what} (record.positions {spec.record.positions!r}); TATi's "
            "trajectory and virial need every coordinate: run it again with record.positions "
            "'all'",
        )


def _loss_and_grad(target, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The full-data loss and its gradient, over the data in chunks (memory bounded)."""
    from landscapes.base import DATA_CHUNK

    n = target.n
    if n is None or n <= DATA_CHUNK:
        return target.loss_and_grad(w)
    loss, grad = w.new_zeros(w.shape[0]), torch.zeros_like(w)
    for start in range(0, n, DATA_CHUNK):
        index = torch.arange(start, min(start + DATA_CHUNK, n), device=w.device)
        part, g = target.loss_and_grad(w, target.batch(index))
        loss, grad = loss + part * len(index), grad + g * len(index)
    return loss / n, grad / n


def _block(target) -> int:
    from landscapes.base import DATA_CHUNK

    points = min(target.n or 1, DATA_CHUNK)
    return max(1, min(4096, POSITIONS_PER_PASS // points))


def virials(target, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """theta . grad L and |grad L| at each position of ``w`` [P, d] (full data, signed)."""
    virial, norm = np.empty(len(w)), np.empty(len(w))
    step = _block(target)
    for s in range(0, len(w), step):
        x = torch.as_tensor(w[s : s + step], dtype=target.dtype, device=target.device)
        _, g = _loss_and_grad(target, x)
        virial[s : s + step] = (x * g).sum(-1).cpu().numpy()
        norm[s : s + step] = torch.linalg.vector_norm(g, dim=-1).cpu().numpy()
    return virial, norm


def accuracy(target, w: np.ndarray) -> np.ndarray:
    """The training accuracy at each position of ``w`` [P, d]: argmax agreement for a
    classification network, sign agreement for a single output with +-1 targets; NaN else."""
    from landscapes.base import DATA_CHUNK
    from landscapes.networks import Network

    out = np.full(len(w), np.nan)
    if not isinstance(target, Network):
        return out
    y = target.y
    signs = target.task != "classification"
    if signs and not (y.ndim == 2 and y.shape[1] == 1 and bool((y.abs() == 1).all())):
        return out
    step = _block(target)
    for s in range(0, len(w), step):
        x = torch.as_tensor(w[s : s + step], dtype=target.dtype, device=target.device)
        right = x.new_zeros(x.shape[0])
        with torch.no_grad():
            for d in range(0, target.n, DATA_CHUNK):
                pred = target.predict(x, target.x[d : d + DATA_CHUNK])  # [P, B, out]
                truth = y[d : d + DATA_CHUNK]
                hit = torch.sign(pred[..., 0]) == truth[:, 0] if signs else pred.argmax(-1) == truth
                right += hit.to(x.dtype).sum(-1)
        out[s : s + step] = (right / target.n).cpu().numpy()
    return out


def running_mean(values: np.ndarray) -> np.ndarray:
    """Cumulative means along axis 0 ([R, C])."""
    count = np.arange(1, len(values) + 1).reshape(-1, *[1] * (values.ndim - 1))
    return np.cumsum(values, axis=0) / count


def ensemble_average(loss: np.ndarray, beta: float) -> np.ndarray:
    """Running sum L e^{-beta L} / sum e^{-beta L} along axis 0, in log space (L of either sign:
    its positive and negative parts apart), so that no weight underflows to 0 / 0."""
    a = -beta * loss
    with np.errstate(divide="ignore", invalid="ignore"):
        log_d = np.logaddexp.accumulate(a, axis=0)
        pos = np.logaddexp.accumulate(a + np.log(np.maximum(loss, 0.0)), axis=0)
        neg = np.logaddexp.accumulate(a + np.log(np.maximum(-loss, 0.0)), axis=0)
        return np.exp(pos - log_d) - np.exp(neg - log_d)


def _averages(head, loss, kinetic, virial, records, diverged, burn: int, beta: float) -> dict:
    """The averages table's columns: running averages from the first record after the burn-in
    (NaN before it); the kinetic energy's and inertia's only with a momentum (``kinetic``)."""
    nan = np.full(loss.shape, np.nan)
    after = slice(burn, len(loss))
    averages = {**head, "loss": loss, "ensemble_average_loss": nan.copy()}
    averages["ensemble_average_loss"][after] = ensemble_average(loss[after], beta)
    if kinetic is not None:
        averages["average_kinetic_energy"] = nan.copy()
        averages["average_kinetic_energy"][after] = running_mean(kinetic[after])
    averages["average_virials"] = nan.copy()
    averages["average_virials"][after] = np.abs(0.5 * running_mean(virial[after]))
    if kinetic is not None:
        averages["average_inertia"] = nan
    if "accepted" in records:
        rejected = 1.0 - records["accepted"].astype(np.float64)
        rejected[diverged] = np.nan
        averages["average_rejection_rate"] = nan.copy()
        averages["average_rejection_rate"][after] = running_mean(rejected[after])
    return averages


def tables(
    spec: RunSpec,
    records: dict[str, np.ndarray],
    every_nth: int = 1,
    seconds_per_step: float | None = None,
) -> dict[str, Table]:
    """TATi's run, trajectory and averages tables (keyed by file name) of a run's records
    (``Store.read``: step [R], loss [R, C], position [R, C, d], ... step-major) and its spec."""
    gap = check_every_nth(every_nth, spec.thin)
    step = np.asarray(records["step"], dtype=np.int64)
    if not len(step):
        raise SpecError("id", "the run has no records to export")
    cpu = spec.model_copy(update={"device": "cpu", "dtype": "float64"})
    target, kernel, _ = build(cpu)
    target = target.original_target()  # the records hold theta: evaluate them as theta
    u = units(kernel, target)
    check_positions(spec, target.dim, records)
    position = records["position"]
    loss = records["loss"].astype(np.float64)
    diverged = records["diverged"].astype(bool)
    R, C = loss.shape
    rows = np.arange(R) if every_nth == 1 else np.flatnonzero(step % every_nth == 0)
    burn = int(np.searchsorted(step, spec.burn_in))  # the first record at step >= burn_in

    flat = position.reshape(R * C, -1).astype(np.float64)
    virial, grad_norm = (a.reshape(R, C) for a in virials(target, flat))
    virial[diverged] = grad_norm[diverged] = np.nan
    acc = accuracy(target, position[rows].reshape(len(rows) * C, -1).astype(np.float64))
    acc = np.where(diverged[rows].reshape(-1), np.nan, acc)

    nan = np.full((R, C), np.nan)
    momentum = "kinetic" in records
    kinetic = nan
    if momentum and u.kinetic is not None:
        kinetic = records["kinetic"].astype(np.float64) * u.kinetic
    scaled_gradient = nan if u.step is None else u.step * grad_norm
    batch = getattr(kernel, "batch_size", None) if kernel.uses_batches(target) else None
    epoch = step if batch is None else step * batch // target.n
    seconds = np.nan if seconds_per_step is None else seconds_per_step * gap

    def per_row(value) -> np.ndarray:  # a [R] or scalar value as [R, C]
        return np.broadcast_to(np.asarray(value, dtype=np.float64).reshape(-1, 1), (R, C))

    ids = np.broadcast_to(np.arange(C, dtype=np.float64), (R, C))
    head = {"id": ids, "step": per_row(step), "epoch": per_row(epoch)}
    run = {**head, "accuracy": None, "loss": loss, "time_per_nth_step": per_row(seconds)}
    if momentum:
        run["total_energy"] = loss + kinetic
        run["kinetic_energy"] = kinetic
        with np.errstate(invalid="ignore"):
            run["scaled_momentum"] = np.sqrt(2 * kinetic)
    run.update(scaled_gradient=scaled_gradient, virial=np.abs(0.5 * virial), scaled_noise=nan)
    kinetic = kinetic if momentum else None
    averages = _averages(head, loss, kinetic, virial, records, diverged, burn, u.beta)

    weights, biases = parameter_columns(target)
    trajectory = {"id": ids, "step": head["step"], "loss": loss}  # TATi's: no epoch
    order = np.concatenate([weights, biases])
    header = [f"weight{i}" for i in range(len(weights))] + [f"bias{i}" for i in range(len(biases))]

    def table(columns: dict, extra: np.ndarray | None = None, names=()) -> Table:
        # accuracy (None) is computed for the written rows only
        parts = [
            acc.reshape(len(rows), C) if value is None else np.asarray(value)[rows]
            for value in columns.values()
        ]
        body = np.stack(parts, -1)  # [rows, C, columns]
        if extra is not None:
            body = np.concatenate([body, extra], -1)
        return Table((*columns, *names), body.reshape(len(rows) * C, -1))

    coords = position[rows][..., order].astype(np.float64)
    return {
        RUN_FILE: table(run),
        TRAJECTORY_FILE: table(trajectory, coords, header),
        AVERAGES_FILE: table(averages),
    }


def write_table(table: Table, path: Path) -> None:
    """``table`` as CSV at ``path``: integers for id, step and epoch, 9 significant digits
    else, ``nan`` where a value is unknown."""
    fmt = ["%d" if name in INTEGER_COLUMNS else FLOAT_FORMAT for name in table.header]
    with open(path, "w", newline="") as f:
        header = ",".join(table.header)
        np.savetxt(f, table.rows, fmt=fmt, delimiter=",", header=header, comments="")


def export(store, run_id: str, folder: str | Path, every_nth: int = 1) -> list[Path]:
    """Write the run's three TATi tables into ``folder`` (created if missing), each to a
    temporary file renamed onto its name, so an interrupted export leaves no half file.
    Damaged records are refused (CorruptRecords): the running averages would skip them."""
    from runs.build import check_files
    from runs.spec import parse_spec, target_facts
    from runs.store_export import replace_file

    record = store.get(run_id)
    try:
        spec = parse_spec(record.spec)
    except SpecError as exc:
        raise SpecError("id", f"run {run_id} has an invalid stored spec ({exc})") from None
    check_every_nth(every_nth, spec.thin)  # before reading anything
    try:
        check_files(spec)
    except SpecError as exc:  # a model's factory gone: npz and netcdf need none
        raise SpecError(
            exc.field,
            f"{exc.message.partition(';')[0]}: TATi's tables need the model's gradient at "
            "every draw (the virial); --format npz or netcdf export the records without it",
        ) from None
    check_positions(spec, target_facts(spec).dim)
    if store.records(run_id) == 0:
        kept = "no records yet" if record.status in ("queued", "running") else "no records"
        raise SpecError("id", f"run {run_id} has {kept} (status {record.status})")
    summary = record.summary or {}
    seconds, steps = summary.get("sampling_seconds"), summary.get("steps")
    per_step = seconds / steps if seconds is not None and steps else None
    out = tables(spec, store.read(run_id), every_nth, per_step)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return [replace_file(folder / name, lambda p, t=out[name]: write_table(t, p)) for name in FILES]
