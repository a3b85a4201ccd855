"""The run loop: one RunSpec, stepped on its device, recorded into the Store as it goes.

Four pieces: ``plan`` (which steps each block holds: a pure function of the spec), a ``Recorder``
(thinning, projection, snapshots, running statistics, flushes), the flush clock every run kind
shares (``runs.pace``) and a short loop (``Sampling``). A vi run's epochs run on the same clock
(``runs.vi``). Blocks follow the run's noise blocks (``samplers.base.Noise``): a whole noise
block runs as one compiled call once the compile, started in the background, is ready; anything
else runs eagerly. Both read the same draws, so a seed gives the same run to float rounding
whichever ran.

A run that finds records of its own in the store (an interrupted run resumed) replays: it runs
from step 0 again with the same seed, so the same draws, and writes only what the store lacks.
Checkpointing every state (momenta, preconditioners, generators, observers' sums) would skip
the replay's time but tie the store to each kernel's state; a replay needs nothing stored.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator

import numpy as np
import torch

from runs import nested, verdict, vi
from runs.budget import Estimate, estimate
from runs.build import build
from runs.observe import OBSERVERS
from runs.pace import Pace, append_unstored
from runs.spec import RunSpec
from runs.store import Progress, Store
from samplers import diagnostics, llc
from samplers.integrators import MHKernel

ANIMATED_CHAINS = 8  # chains traced for the animation (a teacher's view: up to 8)
# records reach the store whenever this much is held (and every runs.pace.FLUSH_SECONDS)
FLUSH_BYTES = 32 << 20
# "auto" compiles a run whose eager remainder would take longer than this: a compile takes
# seconds (warm cache) to a minute (cold) and slows the eager steps while it runs, so a shorter
# run ends sooner without one (bench/RESULTS.md)
COMPILE_AFTER_SECONDS = 20.0
# Eager steps between two looks at the flush clock: a compile in the background holds the GIL
# for long stretches, and eager steps, releasing it at every operation, slow down meanwhile.
EAGER_PIECE = 16


def plan(steps: int, length: int, flush_every: int = 0) -> Iterator[tuple[int, int]]:
    """(first step, steps) of each block: within one noise block of ``length`` steps, the first
    block a single step (the first records within a second), cut at multiples of
    ``flush_every`` when set. Depends on the spec alone."""
    first = 0
    while first < steps:
        end = min(steps, (first // length + 1) * length, 1 if first == 0 else steps)
        if flush_every:
            end = min(end, (first // flush_every + 1) * flush_every)
        yield first, end - first
        first = end


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
    prepare: bool = False,
) -> dict:
    """Run ``spec`` into ``store`` under ``run_id``; returns the summary (status completed, or
    cancelled when ``should_stop`` said so between blocks or epochs): a sampling run's steps, or
    a vi run's fit (``runs.vi.fit_run``) on the same clock. Errors propagate to the caller.
    ``prepare`` (a warm worker, which stays): an "auto" run that ran eagerly then compiles its
    kernel in the background and files it (``samplers.cache``), so the next run of the kernel
    on the target, in this process or any later one, starts compiled."""
    started = time.perf_counter()
    if spec.kind == "vi":  # a variational fit: its epochs on the same clock, the same store
        pace = Pace(store, run_id, spec.vi.epochs, "fit", should_stop, on_progress)
        return vi.fit_run(spec, store, run_id, pace, started)
    if spec.kind == "nested":  # nested sampling: its iterations on the same clock and store
        pace = Pace(store, run_id, spec.nested.max_iter, "sample", should_stop, on_progress)
        return nested.nested_run(spec, store, run_id, pace, started)
    pace = Pace(store, run_id, spec.steps, "sample", should_stop, on_progress)
    run = Sampling(spec, store, run_id, pace, started)
    sampling = pace.begin()
    stopped = run.sample()
    run.flush()
    sampling = time.perf_counter() - sampling  # the steps, their records and flushes
    pace.report(run.done, sampling)
    summary = run.summary(stopped, started, sampling)
    if prepare and spec.compile == "auto" and run.chunk is None:
        run.chunk = run._compile()  # in the background: the next such run starts compiled
    return summary


class Sampling:
    """A sampling run under way: its target and kernel built, its chains started (an observer
    may move the start: an LLC's w0), its observers and recorder; ``sample`` steps it block by
    block, ``summary`` says what it found."""

    def __init__(self, spec: RunSpec, store: Store, run_id: str, pace: Pace, started: float):
        self.spec, self.store, self.run_id, self.pace = spec, store, run_id, pace
        target, kernel, device = build(spec)
        self.target = target
        self.est = estimate(spec)
        generator = torch.Generator(device=device).manual_seed(spec.seed)
        start = kernel.initial(target, generator, spec.chains)  # the target's, or the kernel's
        if spec.start is not None:
            given = torch.tensor(spec.start, dtype=start.dtype, device=device).expand_as(start)
            start = target.from_original(given).clone()  # the user gave theta
        self.observers = {
            name: OBSERVERS[name](spec, target, kernel, store, run_id) for name in spec.observables
        }

        def report_training(p: dict) -> bool:
            elapsed = time.perf_counter() - started
            pace.report(p["steps_done"], elapsed, total=p["steps_total"], phase="train")
            return pace.stop()

        for observer in self.observers.values():  # each may move the start an earlier one chose
            start = observer.start(spec.chains, device, report_training, start)
        if "llc" in spec.observables and spec.llc.baseline == "full":
            kernel = llc.Paired.of(kernel, target, start[0])  # batch losses paired with w0's
        self.kernel = kernel
        self.state = kernel.init(start, target, generator)
        self.noise = kernel.noise_for(self.state, target, generator)
        self.initial_loss = target.full_loss(self.state.position)  # in chunks: memory bounded
        self.recorder = self._recorder(device)
        # an observer may need every step's position (the virial) where the run records none
        self.positions = self.est.positions != "none" or any(
            o.needs_positions for o in self.observers.values()
        )
        self.chunk, self.compiled, self.done = None, False, 0
        if spec.compile == "always":
            self.chunk = self._compile(wait=True)
        elif spec.compile == "auto":  # compiled in an earlier process (or run): used from the start
            self.chunk = self._compile(cached=True)

    def _recorder(self, device: torch.device) -> Recorder:
        basis = None
        if self.est.positions == "projection":
            basis = projection(self.spec, self.est.dim, device, self.state.position.dtype)
            self.store.put_array(self.run_id, "projection", basis.cpu().numpy())
        mh = isinstance(self.kernel, MHKernel)
        recorder = Recorder(self.spec, self.est, self.store, self.run_id, mh, basis)
        recorder.fractional = self.kernel.fractional_acceptance
        return recorder

    def _compile(self, wait: bool = False, cached: bool = False):
        from samplers.compiled import chunk_for  # torch's compiler: loaded when a run compiles

        args = (self.kernel, self.target, self.state, self.noise.length, self.positions)
        return chunk_for(*args, wait=wait, cached=cached)

    def sample(self) -> bool:
        """Every block of the plan, compiled where a compiled chunk is ready, else eager; True
        when a cancel stopped it."""
        spec, recorder = self.spec, self.recorder
        for first, n in plan(spec.steps, self.noise.length, spec.flush_every):
            traced = first < recorder.trace_steps  # the animation's steps: eager, every proposal
            chunk = self.chunk
            whole = chunk is not None and chunk.ready and chunk.usable(n) and not traced
            tic = time.perf_counter()
            if self._block(first, n, whole, traced):
                return True
            self.compiled |= whole
            slow = (spec.steps - first - n) * (
                time.perf_counter() - tic
            ) / n > COMPILE_AFTER_SECONDS
            if self.chunk is None and spec.compile == "auto" and first > 0 and slow:
                self.chunk = self._compile()
        return False

    def _block(self, first: int, n: int, whole: bool, traced: bool) -> bool:
        """The block's steps, recorded; True when a cancel stopped it. Eager blocks go in
        pieces: a compile in the background slows them (see EAGER_PIECE)."""
        target, piece = self.target, n if whole else EAGER_PIECE
        for start in range(first, first + n, piece):
            if self.pace.stop():
                return True
            draws = self.noise.take(min(piece, first + n - start))
            if whole:
                self.state, info = self.chunk(self.state, draws)
            else:
                before = self.state.position
                self.state, info = self.kernel.eager(
                    self.state, target, draws, self.positions, traced
                )
            info = in_original(target, info)
            if traced and not whole:
                self.recorder.keep_trace(start, target.original(before), info)
            self.record(start, info)
        return False

    def record(self, first: int, info) -> None:
        """Keep a piece's records; flush and report when due."""
        spec, recorder = self.spec, self.recorder
        for observer in self.observers.values():  # per-step arrays an observer records
            info.scalars.update(observer.annotate(first, info))
        recorder.keep(first, info)
        for observer in self.observers.values():
            observer.block(first, info)
        self.done = first + info.loss.shape[0]
        due = self.done % spec.flush_every == 0 if spec.flush_every else first == 0
        traced = recorder.traced == recorder.trace_steps > recorder.trace_written  # the whole trace
        if due or self.pace.late() or traced or recorder.kept_bytes >= FLUSH_BYTES:
            self.flush()
            self.pace.flushed(self.done, report=due)

    def flush(self) -> None:
        """The records kept so far, and each observer's row of live signals, to the store."""
        self.recorder.flush()
        for observer in self.observers.values():
            observer.flush(self.done, self.state, write=not self.recorder.replaying)

    def summary(self, stopped: bool, started: float, sampling: float) -> dict:
        """What ``python -m jobs run --json`` prints and the Store keeps, with the verdict."""
        spec, target, kernel, state = self.spec, self.target, self.kernel, self.state
        summary = self.recorder.summary(
            status="cancelled" if stopped else "completed",
            done=self.done,
            kernel=kernel,
            initial_loss=self.initial_loss,
            diverged=state.diverged.cpu().numpy(),  # a chain may diverge after its last record
        )
        summary["seconds"] = seconds = time.perf_counter() - started
        summary["steps_per_second"] = self.done / seconds if seconds > 0 else 0.0
        summary["sampling_seconds"] = sampling
        summary["compiled"] = self.compiled  # whether any block ran as a compiled chunk
        adaptation = getattr(kernel, "adaptation", None)  # step_size auto: what it settled on
        if adaptation is not None and (adapted := adaptation(state)) is not None:
            summary["adapted"] = adapted
        if hasattr(target, "loss_doc"):  # a network's loss in words: which regression convention
            summary["loss_function"] = target.loss_doc()
            if hasattr(target, "describe_modes"):  # a user's model: eval mode, buffers fixed
                summary["modes"] = target.describe_modes()
        if self.observers:  # the records after the burn-in, the only ones an estimate uses
            burn = math.ceil(spec.burn_in / spec.thin)
            loss = self.store.read(self.run_id, since=burn, names=["loss", "center_loss"])
            for name, observer in self.observers.items():
                summary["observables"][name] = observer.summary(loss)
        summary["verdict"] = verdict.judge(
            spec.model_dump(mode="json"), summary, **self.recorder.evidence(target, kernel, state)
        )
        return summary


def in_original(target, info):
    """``info`` with its positions (and proposals, paths) in the model's own parameters: theta
    where the target samples a reparametrisation (``Target.original``), so the records, the
    observers and every chart see theta, never phi."""
    if info.position is None or not target.reparametrised:
        return info
    for name in ("position", "proposal", "path"):
        if getattr(info, name) is not None:
            setattr(info, name, target.original(getattr(info, name)))
    return info


class Recorder:
    """Keeps every ``thin``-th step's records, appends them to the Store at each ``flush``, and
    keeps the running statistics the summary needs, so nothing is read back at the end.

    ``accepted`` is recorded for Metropolis kernels only: elsewhere it is 1 - diverged."""

    def __init__(self, spec: RunSpec, est: Estimate, store: Store, run_id: str, mh: bool, basis):
        self.spec, self.est, self.store, self.run_id = spec, est, store, run_id
        self.mh, self.basis = mh, basis
        self.fractional = False  # ``accepted`` a probability (NUTS), kept as a float
        self.pending: list[dict[str, torch.Tensor]] = []
        self.pending_rows = 0  # records in ``pending``
        self.kept_bytes = 0
        self.records = 0  # records appended so far
        self.snapshots: list[tuple[int, torch.Tensor]] = []
        self.saved = 0  # snapshots appended
        # what an interrupted run already stored: a resumed run replays up to there unwritten
        self.stored = {s: store.records(run_id, s) for s in ("records", "snapshots")}
        # full positions for the PCA of a projected model: at most record.snapshots of them
        wanted = spec.record.snapshots if est.positions == "projection" else 0
        self.snapshot_stride = math.ceil(est.records / wanted) * spec.thin if wanted else 0
        self.burn = math.ceil(spec.burn_in / spec.thin)  # records in the burn-in
        self.sums: dict[str, torch.Tensor] = {}  # per chain, over the records after burn-in
        self.kept_after_burn = 0
        draws = max(est.records - self.burn, 1)
        self.diagnosed = diagnostics.diagnosed_chains(spec.chains, draws)
        self.first_draws: list[torch.Tensor] = []  # [n, k, d] of the first chains (ESS, R-hat)
        # the animation's steps: position [T + 1, k, d], proposal, accepted and path per step
        self.trace_steps = min(spec.record.animate, spec.steps) if est.positions == "all" else 0
        self.trace: dict[str, list[np.ndarray]] = {}
        self.traced = 0  # steps traced so far
        self.trace_written = 0  # of them, in the store

    def keep(self, first_step: int, info) -> None:
        thin, steps, position = self.spec.thin, info.loss.shape[0], info.position
        if self.snapshot_stride:  # a projected run: the full position every stride-th step
            for row in range(-first_step % self.snapshot_stride, steps, self.snapshot_stride):
                self.snapshots.append((first_step + row, position[row].clone()))
        offset = -first_step % thin  # the block's first step with index % thin == 0
        if offset >= steps:
            return
        rows = torch.arange(offset, steps, thin, device=info.loss.device)

        def take(value: torch.Tensor) -> torch.Tensor:
            return value if thin == 1 else value.index_select(0, rows)

        kept = {"step": rows + first_step, "loss": take(info.loss), "diverged": take(info.diverged)}
        if self.mh:  # a flag as bool, a quarter of the bytes; NUTS's accept_stat as it is
            accepted = take(info.accepted)
            kept["accepted"] = accepted if self.fractional else accepted > 0.5
        if position is not None and self.est.positions == "none":  # an observer's alone
            position = None
        if position is not None:
            position = take(position)
            kept["position"] = position if self.basis is None else position @ self.basis
        kept.update({name: take(value) for name, value in info.scalars.items()})
        self._accumulate(kept, position if self.basis is None else None)
        self.pending.append(kept)
        self.pending_rows += len(rows)
        self.kept_bytes += sum(v.numel() * v.element_size() for v in kept.values())

    def _accumulate(self, kept: dict[str, torch.Tensor], position: torch.Tensor | None) -> None:
        """Per-chain sums of what the summary averages, over the records after the burn-in."""
        skip = max(0, self.burn - (self.records + self.pending_rows))
        # per-chain scalars ([T, C]); an observer's per-step vectors are recorded, not averaged
        after = {
            k: v[skip:]
            for k, v in kept.items()
            if k not in ("step", "diverged", "position") and v.ndim == 2
        }
        if position is not None:
            x = position[skip:].double()
            after["position"], after["position_sq"] = x, x * x
            k = self.diagnosed
            # a copy: a view (.cpu() of a CPU tensor is one) kept the block's every chain alive,
            # and a run's RAM grew with its records (574 MB of store: 836 MB resident)
            self.first_draws.append(position[skip:, :k].to("cpu", copy=True))
        for name, value in after.items():
            total = value.double().sum(0)
            self.sums[name] = self.sums[name] + total if name in self.sums else total
        self.kept_after_burn += len(kept["loss"]) - min(skip, len(kept["loss"]))

    def keep_trace(self, first_step: int, before: torch.Tensor, info) -> None:
        """Keep the traced steps of a piece (those below ``trace_steps``) for the first
        ANIMATED_CHAINS chains: every proposal, accepted or not, and an integrator's path."""
        k, rows = ANIMATED_CHAINS, min(info.loss.shape[0], self.trace_steps - first_step)
        if rows <= 0:
            return
        position = info.position[:rows, :k]
        accepted = info.accepted[:rows, :k]
        if self.fractional:  # NUTS: "accepted" in the player means the chain moved
            previous = torch.cat([before[None, :k], position[:-1]])
            accepted = (position != previous).any(-1).to(accepted.dtype)
        parts = {"proposal": info.proposal[:rows, :k], "accepted": accepted, "position": position}
        if info.path is not None:
            parts["path"] = info.path[:rows, :k]
        if not self.trace:
            self.trace["position"] = [before[None, :k].cpu().numpy()]
        for name, value in parts.items():
            self.trace.setdefault(name, []).append(value.cpu().float().numpy())
        self.traced = first_step + rows

    def _flush_trace(self) -> None:
        """The trace so far, as side arrays replaced whole (small: ~1 MB at 1000 steps)."""
        if self.traced > self.trace_written:
            for name, parts in self.trace.items():
                self.store.put_array(self.run_id, f"trace.{name}", np.concatenate(parts))
            self.trace_written = self.traced

    def flush(self) -> None:
        self._flush_trace()
        if self.pending:
            parts = {
                name: [p[name].cpu().numpy() for p in self.pending] for name in self.pending[0]
            }
            self.records = self._append("records", self.records, parts)
            self.pending, self.pending_rows, self.kept_bytes = [], 0, 0
        if self.snapshots:
            step = np.asarray([s for s, _ in self.snapshots])
            position = torch.stack([p for _, p in self.snapshots]).cpu().numpy()
            parts = {"step": [step], "position": [position]}
            self.saved = self._append("snapshots", self.saved, parts)
            self.snapshots = []

    def _append(self, series: str, start: int, parts: dict[str, list[np.ndarray]]) -> int:
        """Append the chunk's rows the store does not hold yet; returns the new end."""
        return append_unstored(self.store, self.run_id, series, start, parts, self.stored[series])

    def evidence(self, target, kernel, state) -> dict:
        """What ``verdict.judge`` reads besides the summary: per-chain acceptance and spread
        over the records after burn-in, the diagnosed chains' draws, every chain's last
        position, and exact draws of the density sampled where the target has a sampler."""
        good = ~state.diverged.cpu().numpy()
        n, out = self.kept_after_burn, {"coupled": getattr(kernel, "particles", False)}
        if n and "accepted" in self.sums:
            out["chain_acceptance"] = (self.sums["accepted"].cpu().numpy() / n)[good]
        if n and "position" in self.sums:
            mean = self.sums["position"].cpu().numpy()[good] / n
            square = self.sums["position_sq"].cpu().numpy()[good] / n
            out["chain_sd"] = np.sqrt(np.maximum(square - mean**2, 0.0))
        if self.first_draws and self.est.positions == "all":
            some = torch.cat(self.first_draws).numpy()  # [draws, k, d]
            out["draws"] = np.moveaxis(some[:, good[: some.shape[1]]], 0, 1)
            out["final"] = target.original(state.position).cpu().numpy()[good]
            out["bounds"] = target.bounds
            params = self.spec.sampler.params
            if target.exact_sample is not None and verdict.targets_exact(params):
                g = torch.Generator(device=state.position.device).manual_seed(verdict.EXACT_SEED)
                out["exact"] = target.exact_sample(g, verdict.EXACT_DRAWS).cpu().double().numpy()
        return out

    @property
    def replaying(self) -> bool:
        """Whether the records written so far are all ones the store held before the run."""
        return self.records + self.pending_rows < self.stored["records"]

    def summary(self, status: str, done: int, kernel, initial_loss, diverged: np.ndarray) -> dict:
        """What ``python -m jobs run --json`` prints and the Store keeps. ``diverged``: the
        chains diverged by the run's end, left out of every average."""
        spec, good, n = self.spec, ~diverged, self.kept_after_burn

        def mean(name: str) -> float | None:
            if name not in self.sums or not n or not good.any():
                return None
            return float(self.sums[name].cpu().numpy()[good].sum() / (n * good.sum()))

        scalars = set(self.sums) - {"loss", "accepted", "position", "position_sq"}
        summary = {
            "run_id": self.run_id,
            "status": status,
            "target": spec.target.name,
            "sampler": spec.sampler.name,
            "chains": spec.chains,
            "steps": done,
            "diverged_chains": int(diverged.sum()),
            "dim": self.est.dim,
            "loss": {"init": float(initial_loss.mean()), "mean": mean("loss")},
            "acceptance": mean("accepted") if isinstance(kernel, MHKernel) else None,
            "scalars": {name: mean(name) for name in sorted(scalars)},
            "coordinates": None,
            "observables": {},
            # what the run's numbers cannot be trusted for, whatever they look like
            "warnings": [{"code": c, "message": m} for c, m in kernel.caveats.items()],
        }
        if diverged.all():  # a run that "completed" with nothing to show says so
            message = "every chain diverged (NaN or Inf): lower the step size"
            summary["warnings"].append({"code": "all_diverged", "message": message})
        elif summary["acceptance"] == 0:
            message = "no proposal was accepted, the chains never moved: lower the step size"
            summary["warnings"].append({"code": "no_acceptance", "message": message})
        if "position" in self.sums and n >= 4 and good.any():
            count = n * good.sum()
            total = self.sums["position"].cpu().numpy()[good].sum(0)
            square = self.sums["position_sq"].cpu().numpy()[good].sum(0)
            mean_ = total / count
            var = (square - count * mean_**2) / max(count - 1, 1)
            some = torch.cat(self.first_draws).numpy()  # [draws, k, d]
            some = np.moveaxis(some[:, good[: some.shape[1]]], 0, 1).astype(np.float64)
            ess, rhat = diagnostics.ess_bulk_rhat(some)
            summary["coordinates"] = {
                "mean": mean_.tolist(),
                "var": var.tolist(),
                "ess_bulk": np.atleast_1d(ess).tolist(),
                "rhat": np.atleast_1d(rhat).tolist(),
                "diagnostic_chains": len(some),
            }
        return summary
