"""The run loop: one RunSpec, stepped on its device, recorded into the Store as it goes.

Steps run in blocks of a fixed length (``kernel.run``, compiled when the kernel fuses); the records
of a block stay on the device until a flush, which happens every ``flush_every`` steps when the
spec sets it, else every ~0.5 s or FLUSH_BYTES of records, so the loop never waits on the host
between flushes. A flush's records are written behind the loop, on a thread, while the next blocks
run. Block lengths depend on the spec alone, never on timing: a seed and a device give the same run.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import torch

from samplers import diagnostics
from samplers.base import trace
from samplers.mcmc import MHKernel

from .spec import Estimate, RunSpec, build, estimate
from .store import Progress, Store

FLUSH_SECONDS = 0.5
# Records kept before a flush, at most: 4096 chains of a 2-D potential recording every step make
# ~1 GB/s, so half a second's worth would hold ~0.5 GB, and as much again while it is written.
FLUSH_BYTES = 32 << 20
# Appends queued behind the loop before a flush waits: with one, the loop waited 17-37 ms a run
# for the writer (the banana's 4096 chains recording every step: ~30 flushes of 32 MB, each
# ~16 ms of writing against ~21 ms of steps).
WRITES_BEHIND = 2
BLOCK_ELEMENTS = 2**22  # chain x parameter x step elements per block: bounds memory and latency
MAX_BLOCK = 256  # the fused path's chunk: one compiled length serves every block of a run
# The first block is one step, flushed at once, so whoever watches sees the first records in well
# under a second instead of after the fused path's compile (seconds, when not cached). It costs
# nothing: a chain's first step runs eagerly in any case (``samplers.fused``).
FIRST_BLOCK = 1
RECORDED = {"step", "loss", "accepted", "diverged", "position"}  # the rest: kernel scalars


def block_steps(spec: RunSpec, dim: int) -> int:
    """Steps per ``kernel.run`` call: ``flush_every`` when set, else the largest power of two
    <= 256 whose positions ([steps, C, d]) stay within BLOCK_ELEMENTS, so that a cancel or a
    flush never waits long on a large model."""
    if spec.flush_every:
        return spec.flush_every
    fit = max(1, BLOCK_ELEMENTS // (spec.chains * dim))
    return min(MAX_BLOCK, 1 << (fit.bit_length() - 1))


def compiled(spec: RunSpec, kernel, state, target) -> bool:
    """Whether the run's steps go through compiled chunks (``spec.compile``)."""
    from samplers.fused import fusable_here, worth_compiling  # torch's compiler: when running

    if spec.compile == "auto":
        return worth_compiling(kernel, state, target, spec.steps)
    # "always" where it can: without a compiler the steps run eagerly, as ``kernel.run`` would
    return spec.compile == "always" and fusable_here(kernel, state.position.device)


def projection(spec: RunSpec, dim: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """A fixed random orthonormal [d, k] basis (from the seed, on its own stream)."""
    g = torch.Generator().manual_seed(spec.seed + 7919)  # not the sampler's stream
    basis, _ = torch.linalg.qr(torch.randn(dim, spec.record.projection_dim, generator=g))
    return basis.to(device=device, dtype=dtype)


def execute(
    spec: RunSpec,
    store: Store,
    run_id: str,
    should_stop: Callable[[], bool] = lambda: False,
    on_progress: Callable[[Progress], None] | None = None,
) -> dict:
    """Run ``spec`` into ``store`` under ``run_id``; returns the summary (status completed, or
    cancelled when ``should_stop`` said so between blocks). Errors propagate to the caller."""
    from .observe import OBSERVERS

    started = time.perf_counter()
    target, kernel, device = build(spec)
    est = estimate(spec)
    generator = torch.Generator(device=device).manual_seed(spec.seed)
    start = target.initial(generator, spec.chains)
    observers = {
        name: OBSERVERS[name](spec, target, kernel, store, run_id) for name in spec.observables
    }

    def report_training(p: dict) -> bool:
        elapsed = time.perf_counter() - started
        progress = _progress(p["steps_done"], p["steps_total"], elapsed, phase="train")
        store.set_progress(run_id, progress.as_dict())
        if on_progress:
            on_progress(progress)
        return should_stop()

    for observer in observers.values():
        start = observer.start(spec.chains, device, report_training)
    state = kernel.init(start, target, generator)
    initial_loss = target.loss(state.position)
    basis = None
    if est.positions == "projection":
        basis = projection(spec, est.dim, device, state.position.dtype)
        store.put_array(run_id, "projection", basis.cpu().numpy())
    records = Records(spec, est, store, run_id, isinstance(kernel, MHKernel))
    block, done, stopped = block_steps(spec, est.dim), 0, False
    record = basis if basis is not None else est.positions == "all"  # projected in the scan
    chunk = None
    fused = compiled(spec, kernel, state, target)
    from samplers.fused import Ahead, single_threaded  # torch's compiler, as in ``compiled``

    ahead = Ahead()  # a block's noise is drawn while the one before is recorded
    # Snapshots come from a block's full positions, handed out by the scan, when they fit
    # BLOCK_ELEMENTS (block_steps sizes blocks to, unless one step alone passes it): blocks then
    # keep their length. Cut at the 8-chain digits MLP's snapshots, every 25 steps, its blocks'
    # extra compiled calls and draws cost 15% of the run (bench/RESULTS.md, 2026-11-24). Where a
    # projecting chunk is single-threaded, though, cut blocks cost little (each block's draws
    # overlap the block before, ``ahead``, or where its chains run in groups take ~0.3 ms
    # between blocks), while full positions cost their writing, joining and projection: that
    # MLP's 5,000 steps took 0.32 s cut, 0.38 s with full positions; in two groups of chains,
    # 20,000 steps took 1.24-1.36 s cut, 1.52-1.66 s with full positions (2026-11-25).
    one = fused and single_threaded(state.position.device, spec.chains, kernel, target)
    fits = block * spec.chains * est.dim <= BLOCK_ELEMENTS
    inline = bool(records.snapshot_stride) and fits and not one  # snapshots: projected runs
    if inline:
        record = True
    elif records.snapshot_stride:  # blocks end at snapshots: one compiled length serves them all
        pieces = math.ceil(records.snapshot_stride / block)  # blocks between two snapshots
        block = chunk = math.ceil(records.snapshot_stride / pieces)
    last_flush = last_report = sampling = time.perf_counter()
    since = 0  # steps done at the last progress report
    with records, contextlib.closing(ahead):  # writes landed past this block, or raised
        while done < spec.steps:
            if should_stop():
                stopped = True
                break
            first = done == 0 and not spec.flush_every
            n = min(FIRST_BLOCK if first else block, spec.steps - done)
            if spec.flush_every:  # blocks cut below still flush at multiples of flush_every
                n = min(n, spec.flush_every - done % spec.flush_every)
            snapshot = None if inline else records.next_snapshot(done)
            if snapshot is not None:  # the block ends there: the snapshot is its final state
                n = min(n, snapshot + 1 - done)
            state, info = kernel.run(
                state, target, generator, n, fused, chunk, positions=record, ahead=ahead
            )
            if inline:  # the block's snapshots, then its positions projected as in the scan
                step = records.next_snapshot(done)
                while step is not None and step < done + n:
                    records.snapshot(step, info.position[step - done])
                    step = records.next_snapshot(step + 1)
                info.position = trace(info.position, basis)
            records.keep(done, info)
            if snapshot == done + n - 1:
                records.snapshot(snapshot, state.position)
            for observer in observers.values():
                observer.block(done, info)
            done += n
            due = done % spec.flush_every == 0 if spec.flush_every else first
            late = time.perf_counter() - last_flush >= FLUSH_SECONDS
            if due or late or records.kept_bytes >= FLUSH_BYTES:
                records.flush()
                for observer in observers.values():
                    observer.flush(done, state)
                last_flush = time.perf_counter()
                # progress at the spec's flushes and twice a second, not at every FLUSH_BYTES
                # (~30 flushes a second at 4096 chains of a 2-D run, each a SQLite commit)
                if due or last_flush - last_report >= FLUSH_SECONDS:
                    # the rate since the last report: counted from the start, the build, a
                    # training and a compile made a fast run's first ETAs hours long
                    progress = _progress(done, spec.steps, last_flush - last_report, since)
                    last_report, since = last_flush, done
                    store.set_progress(run_id, progress.as_dict())
                    if on_progress:
                        on_progress(progress)
        records.flush()
    for observer in observers.values():
        observer.flush(done, state)
    sampling = time.perf_counter() - sampling  # the steps, their records and flushes
    seconds = time.perf_counter() - started
    progress = _progress(done, spec.steps, sampling)
    store.set_progress(run_id, progress.as_dict())
    if on_progress:
        on_progress(progress)
    status = "cancelled" if stopped else "completed"
    final = state.diverged.cpu().numpy()  # a chain may diverge after the last thinned record
    summary = summarise(
        spec, est, store, run_id, status, seconds, done, kernel, initial_loss, final
    )
    summary["sampling_seconds"] = sampling
    summary["compiled"] = fused  # whether the steps ran as compiled chunks (spec.compile)
    if observers:
        loss = store.read(run_id, names=["loss", "center_loss"])
        for name, observer in observers.items():
            summary["observables"][name] = observer.summary(loss)
    return summary


def _progress(
    done: int, total: int, seconds: float, since: int = 0, phase: str = "sample"
) -> Progress:
    """``done`` of ``total`` steps, at the rate of the ``done - since`` steps in ``seconds``."""
    rate = (done - since) / seconds if seconds > 0 else 0.0
    eta = (total - done) / rate if rate > 0 else None
    return Progress(done, total, rate, eta, phase)


class Records:
    """Keeps every ``thin``-th step's records on the device and appends them to the Store.

    Appends run on one writer thread, in order, one at a time: a flush waits while WRITES_BEHIND
    appends are queued, so at most that many flushes' records and the pending ones are held (in
    host memory: a flush has copied them off the device). Used as a context manager, whose exit
    waits for every append and raises the first error, if any.

    ``accepted`` is kept for Metropolis kernels only: elsewhere it is 1 - diverged, and leaving
    it out saves a third of what a 2-D run writes."""

    def __init__(self, spec: RunSpec, est: Estimate, store: Store, run_id: str, mh: bool):
        self.spec, self.est, self.store, self.run_id = spec, est, store, run_id
        self.mh = mh
        self.pending: list[dict[str, torch.Tensor]] = []
        self.kept_bytes = 0  # of the pending records
        self.writer = ThreadPoolExecutor(1, thread_name_prefix=f"records-{run_id}")
        self.writing: deque[Future] = deque()  # appends queued or in flight, oldest first
        self.records = 0  # records appended so far
        self.snapshots: list[torch.Tensor] = []  # on the device until a flush
        self.snapshot_steps: list[int] = []
        self.saved = 0  # snapshots appended to the Store
        # Full positions for the PCA of large models: at most record.snapshots of them, taken
        # at block ends (the loop cuts its blocks there), so that no step's full position has
        # to leave the compiled scan.
        wanted = spec.record.snapshots if est.positions == "projection" else 0
        self.snapshot_stride = math.ceil(est.records / wanted) * spec.thin if wanted else 0

    def keep(self, first_step: int, info) -> None:
        thin = self.spec.thin
        offset = (-first_step) % thin  # the block's first step with index % thin == 0
        if offset >= info.loss.shape[0]:
            return
        rows = torch.arange(offset, info.loss.shape[0], thin, device=info.loss.device)
        step = rows + first_step

        def take(value: torch.Tensor) -> torch.Tensor:
            # every row: views, written as they are at the flush; else copies of the kept rows,
            # by index_select: the banana's 4096 chains at thin 10 kept their rows in 9-13 ms a
            # run, against 17-20 with advanced indexing (bench/RESULTS.md, 2026-11-25)
            return value if thin == 1 else value.index_select(0, rows)

        kept = {"step": step, "loss": take(info.loss), "diverged": take(info.diverged)}
        if self.mh:
            kept["accepted"] = take(info.accepted) > 0.5  # bool: a quarter of the bytes
        if info.position is not None:  # every position, or its projection on ``basis``
            kept["position"] = take(info.position)
        for name, value in info.scalars.items():  # kinetic energy, thermostat, ...
            kept[name] = take(value)
        self.pending.append(kept)
        self.kept_bytes += sum(v.numel() * v.element_size() for v in kept.values())

    def next_snapshot(self, step: int) -> int | None:
        """The first snapshot step at or after ``step`` (every ``snapshot_stride``-th step from
        step 0, so each is a recorded step), or None when no more are due."""
        if not self.snapshot_stride:
            return None
        due = -(-step // self.snapshot_stride) * self.snapshot_stride
        return due if due < self.spec.steps else None

    def snapshot(self, step: int, position: torch.Tensor) -> None:
        self.snapshots.append(position.clone())
        self.snapshot_steps.append(step)

    def flush(self) -> None:
        if not self.pending:
            return
        # Each block's records go to the Store as parts of one chunk: no concatenation.
        parts = {name: [p[name].cpu().numpy() for p in self.pending] for name in self.pending[0]}
        appends = [(self.records, parts, "records")]
        self.pending, self.kept_bytes = [], 0
        self.records += sum(len(step) for step in parts["step"])
        if self.snapshots:  # appended: only the new ones travel
            position = torch.stack(self.snapshots).cpu().numpy()
            step = np.asarray(self.snapshot_steps)
            appends.append((self.saved, {"step": step, "position": position}, "snapshots"))
            self.saved += len(step)
            self.snapshots, self.snapshot_steps = [], []
        while len(self.writing) >= WRITES_BEHIND:
            self.writing.popleft().result()
        self.writing.append(self.writer.submit(self._append, appends))

    def _append(self, appends: list[tuple[int, dict, str]]) -> None:
        for start, arrays, series in appends:
            self.store.append(self.run_id, start, arrays, series)

    def wait(self) -> None:
        """Every append queued has landed, or the first error is raised here (``__exit__``'s
        shutdown then waits for the rest before the error leaves)."""
        writing, self.writing = self.writing, deque()
        for future in writing:
            future.result()

    def __enter__(self) -> Records:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        try:
            self.wait()
        except Exception:
            if kind is None:  # else the loop's own error is the one to report
                raise
        finally:
            self.writer.submit(self.store.close)  # the writer thread's own files
            self.writer.shutdown()


def summarise(
    spec: RunSpec,
    est: Estimate,
    store: Store,
    run_id: str,
    status: str,
    seconds: float,
    done: int,
    kernel,
    initial_loss: torch.Tensor,
    diverged: np.ndarray,
) -> dict:
    """The run's summary: what ``python -m jobs run --json`` prints and the Store keeps.
    ``diverged`` [chains]: the chains diverged by the run's end."""
    data = store.read(run_id)
    burn = math.ceil(spec.burn_in / spec.thin)  # records from the burn-in
    good = ~diverged  # a diverged chain is frozen where it was: keep it out of the moments
    if good.all():  # the usual case: a slice is a view, a mask would copy every record
        good = slice(None)
    summary = {
        "run_id": run_id,
        "status": status,
        "target": spec.target.name,
        "sampler": spec.sampler.name,
        "chains": spec.chains,
        "steps": done,
        "seconds": seconds,
        "steps_per_second": done / seconds if seconds > 0 else 0.0,
        "diverged_chains": int(diverged.sum()),
        "dim": est.dim,
        "loss": {
            "init": float(initial_loss.mean()),
            "mean": _mean(data["loss"][burn:, good]) if "loss" in data else None,
        },
        "acceptance": None,
        "scalars": {  # the kernel's own per-step scalars (``observe``), averaged after the burn-in
            name: _mean(data[name][burn:, good]) for name in sorted(set(data) - RECORDED)
        },
        "coordinates": None,
        "observables": {},
    }
    if isinstance(kernel, MHKernel) and "accepted" in data:
        summary["acceptance"] = _mean(data["accepted"][burn:, good])
    position = data.get("position")
    if est.positions == "all" and position is not None and position.shape[0] - burn >= 4:
        kept = position[burn:, good]  # [draws, chains, d]
        if kept.shape[1]:
            # torch reduces float32 with float64 accumulators (Welford), on all threads and
            # without the float64 copy of every draw that numpy would make
            var, mean = torch.var_mean(torch.from_numpy(kept).reshape(-1, kept.shape[-1]), 0)
            # ESS and R-hat from the first chains (``diagnostics.diagnosed_chains``)
            k = diagnostics.diagnosed_chains(kept.shape[1], kept.shape[0])
            some = np.moveaxis(kept[:, :k], 0, 1).astype(np.float64)
            summary["coordinates"] = {
                "mean": mean.tolist(),
                "var": var.tolist(),
                "ess_bulk": np.atleast_1d(diagnostics.ess_bulk(some)).tolist(),
                "rhat": np.atleast_1d(diagnostics.rhat(some)).tolist(),
                "diagnostic_chains": len(some),
            }
    return summary


def _mean(x: np.ndarray) -> float | None:
    return float(np.mean(x)) if x.size else None
