"""Many kernel steps in one compiled call, with their noise drawn up front.

Eager PyTorch pays a few microseconds of dispatch per operation, which dominates a step on a
2-D potential, and a compiled call has a fixed cost of tens of microseconds. So ``chunk`` steps
run as one ``scan`` compiled with ``torch.compile``: one step's graph, looped in C++ (on CUDA,
the compiled step captured in a CUDA graph: ``GraphedChunk``). A compiled graph cannot take a
``torch.Generator``, so one eager step is run with a ``Recorder`` to learn which draws a step
makes, ``chunk`` steps' worth of each draw is made up front, and each step of the scan reads its
row through a ``Replay`` in the same order.

On a CPU, a chunk too small to share its operations between threads runs on one thread, and the
next chunk's noise is drawn meanwhile on another core (``Ahead``); where its chains carry enough
work, they run instead as groups, each group a call of the same compiled chunk on its own thread
(``Compiled.call``), and the noise is drawn between chunks on all threads.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import shutil
import types
import weakref
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import replace

import torch
from torch import Tensor
from torch._higher_order_ops.scan import scan
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map, tree_map_only

from . import normals
from .base import Info, Kernel, State, draw, trace


class Recorder:
    """A generator stand-in that draws for real and remembers each draw's kind and shape."""

    def __init__(self, generator: torch.Generator):
        self.generator = generator
        self.plan: list[tuple] = []

    def draw(self, kind: str, shape, dtype: torch.dtype, high=None) -> Tensor:
        self.plan.append((kind, tuple(shape), dtype, high))
        return draw(self.generator, kind, shape, dtype, high)

    def shapes(self, steps: int, groups: int = 1) -> list[tuple[int, ...]]:
        """The shapes ``prepare`` draws: ``steps`` of each recorded draw on a new dim 0, and for
        a chunk run as ``groups`` groups of chains (``Compiled.call``) each per-chain draw as
        [groups, steps, C / groups, ...], so that a group's rows are one contiguous block (a
        strided slice made the compiled scan ~20x slower)."""
        return [
            (steps, *shape)
            if groups == 1 or kind == "integers"  # minibatch indices: shared by the chains
            else (groups, steps, shape[0] // groups, *shape[1:])
            for kind, shape, _, _ in self.plan
        ]

    def prepare(
        self,
        steps: int,
        into: list[Tensor] | None = None,
        threads: int | None = None,
        groups: int = 1,
    ) -> list[Tensor]:
        """``steps`` steps' worth of each draw the recorded step made (``shapes``); filled into
        ``into`` (same shapes) when given: the same numbers, no new memory."""
        into = into or [None] * len(self.plan)
        drawn = []
        for (kind, plain, dtype, high), shape, out in zip(
            self.plan, self.shapes(steps, groups), into, strict=True
        ):
            if out is None:
                out = torch.empty(shape, dtype=dtype, device=self.generator.device)
            # [groups, steps, ...] drawn as [groups * steps, ...]: a large draw is still cut
            # into parts for the threads
            flat = out.flatten(0, 1) if len(shape) > len(plain) + 1 else out
            fill(self.generator, kind, flat.shape, dtype, high, flat, threads)
            drawn.append(out)
        return drawn


# A CPU draw runs on one thread: torch's generator (mt19937) took ~2.4 ns a normal on a 2-core
# VM, 43 us of a digits-MLP step's 94 at 8 chains and 0.40 s of a 4096-chain banana run's 0.97;
# Basin's float32 normals (samplers/normals.py) take ~0.55 ns. So a large CPU draw is cut by
# steps into PARTS parts, each drawn by its own generator seeded from the run's, and the parts
# are shared among the intra-op threads: ~2x faster on 2 cores once libgomp's threads stop
# spinning soon after a chunk (jobs/__init__.py). The numbers depend on the seed and the shape
# only, not on how many threads drew them.
PARALLEL_DRAW = 1 << 17  # elements; below it, handing a part to a thread costs what it saves
# Basin's normals are ~5x faster a draw, so a part pays from 5-8x more of them (measured on a
# 2-core Xeon, one call against parts on 2 threads: 2^19 279 / 352 us, 2^20 551 / 506 us, 2^22
# 2.2 / 1.4 ms)
PARALLEL_NORMALS = 1 << 20
PARTS = 8
_pool: ThreadPoolExecutor | None = None


def _workers() -> ThreadPoolExecutor:
    """The threads that draw noise: a large draw's parts, and the next chunk's draw ahead."""
    global _pool
    _pool = _pool or ThreadPoolExecutor(PARTS - 1, thread_name_prefix="draws")
    return _pool


def fill(generator, kind: str, shape, dtype: torch.dtype, high=None, out=None, threads=None):
    """``draw`` of ``shape`` (steps first), in parallel parts when it is large and on the CPU."""
    fast = kind == "normal" and normals.serves(generator, dtype)
    least = PARALLEL_NORMALS if fast else PARALLEL_DRAW
    if generator.device.type != "cpu" or shape[0] < PARTS or math.prod(shape) < least:
        return draw(generator, kind, shape, dtype, high, out=out)
    out = torch.empty(shape, dtype=dtype) if out is None else out
    seeds = torch.randint(1 << 62, (PARTS,), generator=generator).tolist()
    parts = list(zip(seeds, torch.tensor_split(out, PARTS), strict=True))

    def draw_parts(share: list) -> None:
        for seed, piece in share:
            draw(torch.Generator().manual_seed(seed), kind, piece.shape, dtype, high, out=piece)

    threads = max(1, min(threads or torch.get_num_threads(), PARTS))
    shares = [parts[i::threads] for i in range(threads)]
    pending = [_workers().submit(draw_parts, share) for share in shares[1:]]
    draw_parts(shares[0])
    for job in pending:
        job.result()
    return out


class Replay:
    """Hands out one step's pre-drawn noise, draw by draw, in the order the step asks."""

    def __init__(self, noise: list[Tensor]):
        self.noise, self.slot = noise, 0

    def draw(self, kind: str, shape, dtype: torch.dtype, high=None) -> Tensor:
        value = self.noise[self.slot]
        self.slot += 1
        return value


def step_body(kernel: Kernel, target, keys: list[str], positions: bool = False):
    """One kernel step as a function of tensors: ``(carry, xs, center, basis, center_losses) ->
    (carry, ys)``, carry = (position, diverged, *aux values in ``keys`` order), xs = (*one step's
    draws, live), ys = {"info": (loss, accepted, diverged[, position]), **scalars}."""

    def one_step(carry, xs, center, basis, center_losses):
        *draws, live = xs
        # step=1: fused chunks always follow a first eager step; a constant keeps one graph
        aux = dict(zip(keys, carry[2:], strict=True))
        state = State(carry[0], center, carry[1], 1, aux, center_losses)
        replay = Replay(draws)
        index, batch = kernel._indexed_batch(target, replay)
        new, loss, acc = kernel.update(state, target, batch, replay)
        paired = kernel._paired(state, target, batch, index)
        state, info = kernel._contain(state, new, loss, acc, hold=~live, extra=paired)
        out = (state.position, state.diverged, *(state.aux[k] for k in keys))
        # scan refuses outputs that alias each other or an input: copy those (tiny tensors)
        out = tuple(v.clone() if any(v is c for c in carry) else v for v in out)
        ys = {"info": (info.loss, info.accepted, info.diverged.clone()), **info.scalars}
        if positions:
            ys["info"] += (out[0].clone() if basis is None else out[0] @ basis,)
        return out, ys

    return one_step


def _unpack(carry, ys: dict, keys: list[str], positions: bool):
    """A chunk's result from its final carry and its stacked ys (see ``chunk_steps``)."""
    position, diverged, *values = carry
    ys = dict(ys)
    stacked = ys.pop("info")
    traced = stacked[3] if positions else None
    return position, diverged, dict(zip(keys, values, strict=True)), Info(*stacked[:3], traced, ys)


def chunk_steps(kernel: Kernel, target, positions: bool = False):
    """The uncompiled chunk (also used by tests): one kernel step per row of the pre-drawn noise.

    A ``scan`` over the steps, so the compiled graph holds one step whatever the chunk length:
    compile time does not grow with it, and inductor runs the loop in C++ (unrolling steps in
    the body was measured: no faster, since each step allocates its own intermediates).
    ``active[i]`` false makes step i a no-op, so one compiled length serves any step count.
    Returns the final position, diverged flags and aux, and each step's Info stacked [steps, C]
    (with each step's position, [steps, C, d], when ``positions``, or its projection on the
    columns of ``basis`` when one is given: [steps, C, k], far less to write out than d).
    """

    def run(
        position: Tensor,
        center: Tensor,
        diverged: Tensor,
        aux: dict[str, Tensor],
        noise: list[Tensor],
        active: Tensor,
        basis: Tensor | None = None,
        center_losses: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, dict[str, Tensor], Info]:
        keys = list(aux)
        one_step = step_body(kernel, target, keys, positions)
        carry, ys = scan(
            lambda carry, xs: one_step(carry, xs, center, basis, center_losses),
            (position, diverged, *aux.values()),
            [*noise, active],
        )
        return _unpack(carry, ys, keys, positions)

    return run


class GraphedChunk:
    """On CUDA, ``chunk_steps``'s function run as a CUDA graph of the compiled step.

    Inductor runs a compiled ``scan`` as a Python ``while`` loop on a condition tensor, which on
    CUDA is read back to the host, a synchronisation, every step: ~50 us a step on an H100
    whatever the chain count, 5-20x slower than BlackJAX's XLA loop (bench/RESULTS.md, 11:53 on
    2026-11-24). Here the step alone is compiled (fused into a few kernels), and a chunk's calls
    of it are captured once per chunk length in a CUDA graph, which launches them all at once.
    A call copies its arguments into the graph's own inputs, replays it, and returns copies of
    its outputs, which the next replay overwrites."""

    def __init__(self, kernel: Kernel, target, positions: bool, options: dict | None):
        self.kernel, self.target, self.positions = kernel, target, positions
        self.options = options
        self.step = None  # compiled once: every chunk length captures calls of the same step
        self.graphs: dict[tuple, tuple] = {}

    def __call__(
        self, position, center, diverged, aux, noise, active, basis=None, center_losses=None
    ):
        args = [position, center, diverged, aux, noise, active, basis, center_losses]
        key = (active.shape[0], tuple(aux), basis is None, center_losses is None)
        with torch.cuda.device(position.device):  # capture and replay on the chains' GPU
            if key not in self.graphs:
                self.graphs[key] = self._capture(args)
            graph, inputs, outputs = self.graphs[key]
            for mine, given in zip(tree_leaves(inputs), tree_leaves(args), strict=True):
                if mine is not None:  # basis and center_losses may be None
                    mine.copy_(given)
            graph.replay()
            carry, stacked = tree_map(torch.clone, outputs)
        return _unpack(carry, stacked, list(aux), self.positions)

    def _capture(self, args: list) -> tuple:
        inputs = tree_map_only(Tensor, torch.clone, args)
        position, center, diverged, aux, noise, active, basis, center_losses = inputs
        if self.step is None:
            body = step_body(self.kernel, self.target, list(aux), self.positions)
            self.step = torch.compile(body, dynamic=False, options=self.options)
        step = self.step

        def chunk():
            carry, ys = (position, diverged, *aux.values()), []
            for i in range(active.shape[0]):
                xs = [*(n[i] for n in noise), active[i]]
                carry, y = step(carry, xs, center, basis, center_losses)
                ys.append(y)
            return carry, tree_map(lambda *steps: torch.stack(steps), *ys)

        # compile and warm up on a side stream, outside the capture (the CUDA graph rules)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            chunk()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs = chunk()
        return graph, inputs, outputs


class LengthChunks:
    """On CPU, ``chunk_steps``'s function compiled for each chunk length under a code object of
    that length's own (``length_code``), shared by every run in the process.

    dynamo keeps a code object's compiled versions in one list and tries their guards in turn
    at each call. With one code object for every length, a process running chunks of two
    lengths (the bare MLP's blocks of 128 steps beside a jobs run's blocks cut at its PCA
    snapshots) compiled each length a second time, ~2 s each, whenever the machine was busy:
    in 5 of 5 such processes, against none of 5 with a code object per length (the reading
    after the 2026-11-26 00:33 jobs run in bench/RESULTS.md). TORCH_LOGS=recompiles gave the
    reason "Unexpected recompilation: runtime guards failed even though they passed during
    recompilation-reason analysis", a guard failure dynamo could not name."""

    def __init__(self, run, options: dict | None):
        self.run, self.options = run, options
        self.compiled: dict[int, object] = {}

    def __call__(
        self, position, center, diverged, aux, noise, active, basis=None, center_losses=None
    ):
        length = active.shape[0]
        if length not in self.compiled:
            fn, code = self.run, length_code(self.run.__code__, length)
            run = types.FunctionType(code, fn.__globals__, None, fn.__defaults__, fn.__closure__)
            self.compiled[length] = torch.compile(run, dynamic=False, options=self.options)
        return self.compiled[length](
            position, center, diverged, aux, noise, active, basis, center_losses
        )


@functools.cache
def length_code(code: types.CodeType, length: int) -> types.CodeType:
    """``code`` under a name of ``length``'s own: one per process, shared by every run, so that
    its compiled versions serve the next run of the same kernel and target."""
    return code.replace(co_name=f"{code.co_name}_{length}")


def with_compiler_settings(compiled):
    """``compiled`` called with the compiler settings it needs, since a call may compile it.
    torch keeps them in context variables, one set per thread: set once at import, they were
    missing in any other thread, where the compile then failed (DataDependentOutputException).
    (``config.patch`` around each call cost ~65 us; reading the two settings ~1 us.)"""
    config = torch._dynamo.config

    def call(*args):
        # Inductor lowers ``scan`` to a while loop that indexes its buffers with the loop
        # counter's value, a data-dependent scalar that dynamo must be allowed to capture.
        if not config.capture_scalar_outputs:
            config.capture_scalar_outputs = True
        # The compiled chunks of a length share a code object (``length_code``), and dynamo
        # counts recompilations per code object: one per (kernel, target, shape) a process runs.
        if config.recompile_limit < RECOMPILE_LIMIT:
            config.recompile_limit = RECOMPILE_LIMIT
        return compiled(*args)

    return call


RECOMPILE_LIMIT = 256

# On CPU at C = 64, allocating a step's intermediate tensors takes longer than its arithmetic.
# Inductor's C++ wrapper allocates ~3x faster than its Python one (it lengthens the first
# compile, cached on disk afterwards).
COMPILE_OPTIONS = {"cpu": {"cpp_wrapper": True}}
# Inductor vectorises the innermost dimension, here the d parameters of a position. Where d is
# below a vector's width, each operation runs masked 8- or 16-lane vectors for d lanes of work:
# scalar loops are faster there (measured at d = 2: HMC 2x at 64 and at 4096 chains).
SCALAR_BELOW = 16
# A compiled loop over few elements finishes before a second thread has woken up: when a step's
# loops (over chains x parameters, or chains x the data rows a step reads) are shorter than this,
# one thread. Measured: HMC on the banana at 64 chains ~1.1x faster and the 1-chain digits MLP
# (batch 32) ~1.2x; at 4096 chains two threads make HMC 1.75x faster, and a 10-chain polynomial
# on 1000 points (full batch, d = 2) ran 1.8x slower on one.
THREADED_FROM = 4096
# A network's step is also a few small matrix products per chain, chains x rows x parameters
# multiply-adds, and below this many they gain little from a second thread while the step's
# noise (~2.4 ns a normal, one per parameter and chain) is most of it: the digits MLP (batch 32)
# ran 8 to 64 chains 1.05-1.25x faster on one thread with the next chunk's noise drawn on the
# other core (``run_fused``) than on two; a 100K-class DLN (batch 500) is far above it.
THREADED_MACS = 1 << 21


def single_threaded(device: torch.device, chains: int, kernel: Kernel, target) -> bool:
    """Whether a CPU chunk runs on one thread, leaving the other cores to draw the next
    chunk's noise. A function of shapes only: the thread count can change a reduction's
    rounding, so a spec takes the same path on every run."""
    if device.type != "cpu":
        return False
    if target.n is None:  # a potential: loops over chains x parameters
        return chains * target.dim < THREADED_FROM
    rows = step_rows(kernel, target)
    return chains * rows < THREADED_FROM and chains * rows * target.dim < THREADED_MACS


def step_rows(kernel: Kernel, target) -> int:
    """The data rows a step of a network's chain reads: its minibatch, or all the data."""
    return kernel.params["batch_size"] if kernel._uses_batches(target) else target.n


# A single-threaded chunk's chains are cut into this many equal groups, each a call of the same
# compiled chunk on its own thread, when a group's step still multiplies GROUP_MACS or more: a
# step is too short to share one matrix product between threads, but halves of the chains run
# side by side. Measured on a 2-core Xeon, the digits MLP (batch 32): 8 chains 68-76 us a step
# as one group, ~50-56 as two; at 2 chains (77K multiply-adds a group) no gain, and the 64-chain
# banana (a few microseconds a step) twice as slow, its noise no longer drawn ahead. The count
# follows the shapes only, never the cores, so a spec computes the same groups everywhere.
GROUPS = 2
GROUP_MACS = 1 << 17


def chain_groups(device: torch.device, chains: int, kernel: Kernel, target) -> int:
    """How many groups of chains a chunk runs as (``Compiled.call``)."""
    if (
        device.type != "cpu"
        or chains % GROUPS
        or not single_threaded(device, chains, kernel, target)
    ):
        return 1
    rows = 1 if target.n is None else step_rows(kernel, target)
    return GROUPS if chains // GROUPS * rows * target.dim >= GROUP_MACS else 1


def compile_options(device: torch.device, target, single: bool) -> dict | None:
    options = dict(COMPILE_OPTIONS.get(device.type, {}))
    if device.type == "cpu" and target.dim < SCALAR_BELOW:
        options["cpp.simdlen"] = 1
    if single:
        options["cpp.threads"] = 1
    return options or None


@contextlib.contextmanager
def one_thread():
    """torch's intra-op threads (MKL's matrix products too) set to one for the block. The count
    is the calling thread's own (OpenMP's and MKL's are per thread), so runs in other threads
    keep theirs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


# Pre-drawn noise of one chunk is held at most this large: it bounds the chunk on large models.
NOISE_BYTES = 32 * 2**20
MAX_CHUNK = 256  # steps per compiled call: enough to make the call's fixed cost negligible


class Compiled:
    """The compiled chunk of a kernel on a target, and the draws one step makes (learned from
    the first eager step). One compiled graph per chunk length (``LengthChunks``)."""

    def __init__(
        self, kernel: Kernel, target, device: torch.device, chains: int, positions: bool = False
    ):
        self.target = weakref.ref(target)  # the cache lives on the kernel; ids are reused
        self.single = single_threaded(device, chains, kernel, target)
        self.groups = chain_groups(device, chains, kernel, target)
        # a chunk on one thread in one group leaves a core idle for the next chunk's draws
        self.ahead = self.single and self.groups == 1
        self.warm: set[tuple] = set()  # call shapes compiled: each compiles on one thread
        options = compile_options(device, target, self.single)
        if device.type == "cuda":
            chunk = GraphedChunk(kernel, target, positions, options)
        else:
            chunk = LengthChunks(chunk_steps(kernel, target, positions), options)
        self.chunk = with_compiler_settings(chunk)
        self.device = device
        self.plan: list[tuple] | None = None
        self._active: dict[tuple[int, int], Tensor] = {}
        self._noise: list[list[Tensor] | None] = [None, None]

    def noise(self, recorder: Recorder, chunk: int, slot: int = 0, threads=None) -> list[Tensor]:
        """A chunk's draws, filled into the buffers ``slot`` held for an earlier chunk of the
        same length: a fresh buffer of tens of MB is fresh pages, and first-touching them cost
        more than the draws (a 100K-class DLN: ~0.8 ms a step on this 2-core VM). Two slots:
        one chunk runs on the draws in one while the next chunk's are drawn into the other."""
        held = self._noise[slot]
        shapes = recorder.shapes(chunk, self.groups)
        same = held is not None and [tuple(t.shape) for t in held] == shapes
        self._noise[slot] = recorder.prepare(chunk, held if same else None, threads, self.groups)
        return self._noise[slot]

    def call(self, position, center, diverged, aux, noise, active, basis, center_losses):
        """One chunk: the compiled call on all chains, or on each group of chains at once (one
        thread each) with their results joined. Chains never interact within a step, so a
        group is the same chunk on its rows of every per-chain tensor: position, centre,
        flags, aux, and each normal or uniform draw (minibatch indices are shared)."""
        args = (position, center, diverged, aux, noise, active, basis, center_losses)
        if self.groups == 1:
            with one_thread() if self.single else contextlib.nullcontext():
                return self.chunk(*args)
        parts = split_chains(args, self.plan, self.groups)

        def run(part):
            with one_thread():
                return self.chunk(*part)

        key = tuple(None if t is None else tuple(t.shape) for t in (active, basis, center_losses))
        if key in self.warm and torch.get_num_threads() > 1:
            pending = [_workers().submit(run, part) for part in parts[1:]]
            try:
                results = [run(parts[0])]
            finally:  # no group left running on buffers the caller goes on to reuse
                wait(pending)
            results += [job.result() for job in pending]
        else:  # a new shape compiles, and dynamo compiles on one thread at a time
            results = [run(part) for part in parts]
            self.warm.add(key)
        return join_chains(results)

    def length(self) -> int:
        """The default chunk: MAX_CHUNK steps, fewer where their noise would pass NOISE_BYTES."""
        per_step = sum(math.prod(shape) * dtype.itemsize for _, shape, dtype, _ in self.plan)
        return max(1, min(MAX_CHUNK, NOISE_BYTES // max(1, per_step)))

    def active(self, chunk: int, n: int) -> Tensor:
        """The mask of a chunk of ``chunk`` steps whose first ``n`` are real (built once)."""
        key = (chunk, n)
        if key not in self._active:
            self._active[key] = torch.arange(chunk, device=self.device) < n
        return self._active[key]


def split_chains(args: tuple, plan: list[tuple], groups: int) -> list[tuple]:
    """``Compiled.call``'s arguments for each of ``groups`` equal groups of chains (views)."""
    position, center, diverged, aux, noise, active, basis, center_losses = args

    def cut(t: Tensor, dim: int = 0) -> tuple[Tensor, ...]:
        return torch.tensor_split(t, groups, dim)

    # per-chain draws come laid out [groups, steps, C / groups, ...] (``Recorder.shapes``)
    per_chain = [kind != "integers" for kind, *_ in plan]
    noise = [
        t.unbind() if mine else (t,) * groups for t, mine in zip(noise, per_chain, strict=True)
    ]
    aux = {k: cut(v) for k, v in aux.items()}
    return [
        (
            cut(position)[g],
            cut(center)[g],
            cut(diverged)[g],
            {k: v[g] for k, v in aux.items()},
            [t[g] for t in noise],
            active,
            basis,
            center_losses,
        )
        for g in range(groups)
    ]


def join_chains(results: list[tuple]) -> tuple:
    """The groups' chunk results as one: states along the chains (dim 0), records along dim 1."""
    positions, flags, auxes, infos = zip(*results, strict=True)
    aux = {k: torch.cat([a[k] for a in auxes]) for k in auxes[0]}

    def steps(name: str) -> Tensor | None:
        values = [getattr(info, name) for info in infos]
        return None if values[0] is None else torch.cat(values, 1)

    scalars = {k: torch.cat([info.scalars[k] for info in infos], 1) for k in infos[0].scalars}
    info = Info(steps("loss"), steps("accepted"), steps("diverged"), steps("position"), scalars)
    return torch.cat(positions), torch.cat(flags), aux, info


def compiled_entry(kernel: Kernel, target, state: State, positions: bool = False) -> Compiled:
    """The ``Compiled`` for (target, shape, dtype, device, positions), cached on the kernel."""
    cache = kernel.__dict__.setdefault("_compiled", {})
    device = state.position.device
    key = (id(target), state.position.shape, state.position.dtype, str(device), positions)
    entry = cache.get(key)
    if entry is None or entry.target() is not target:
        chains = state.position.shape[0]
        entry = cache[key] = Compiled(kernel, target, device, chains, positions)
    return entry


# False: each chunk draws its noise in turn, as before the draw ahead (tests compare the two).
PREFETCH = True


class Ahead:
    """The next call's noise, drawn while its caller handles this call's steps.

    A caller that runs a run in blocks of one chunk or so (jobs.run) passes the same Ahead to
    each ``kernel.run`` call: the last chunk of a call then has the next call's first chunk of
    noise drawn on another core, as chunks within a call do. When the next call needs other
    draws (another chunk length or shape, an eager first step), the generator is set back to
    the state it had before the draw ahead, so the numbers are those of calls without it.
    Nothing else may draw from the generator while a draw is pending; ``close`` waits for it
    and sets the generator back."""

    def __init__(self):
        self.pending: tuple | None = None

    def start(self, entry: Compiled, recorder: Recorder, chunk: int, slot: int) -> None:
        saved = recorder.generator.get_state()
        future = _workers().submit(entry.noise, recorder, chunk, slot, 1)
        self.pending = (entry, chunk, slot, recorder.generator, saved, future)

    def take(self, entry: Compiled, chunk: int, generator) -> tuple[list[Tensor], int] | None:
        """The noise drawn ahead and its slot, if it is the draw this call would make now."""
        if self.pending is None:
            return None
        mine, length, slot, drawn_from, saved, future = self.pending
        self.pending = None
        noise = future.result()
        if mine is entry and length == chunk and drawn_from is generator:
            return noise, slot
        drawn_from.set_state(saved)
        return None

    def close(self) -> None:
        self.take(None, 0, None)


def run_fused(
    kernel: Kernel,
    state: State,
    target,
    generator: torch.Generator,
    steps: int,
    chunk: int | None = None,
    positions: bool | Tensor = False,
    ahead: Ahead | None = None,
) -> tuple[State, list[Info]]:
    """``steps`` steps in compiled chunks of ``chunk`` steps; the last one padded with no-ops.

    A chain's first step runs eagerly (kernels may start differently; chunks assume step >= 1).
    The draws a step makes are learned once per compiled entry from a dry step on a throwaway
    generator, so the run's own random stream is consumed the same way whether the chunk was
    compiled in this call or reused from an earlier run: a seed gives the same run either way."""
    if steps == 0:
        return state, []
    basis = positions if isinstance(positions, Tensor) else None
    entry = compiled_entry(kernel, target, state, basis is not None or bool(positions))
    infos = []
    if state.step == 0:
        if ahead is not None:  # the eager step draws first
            ahead.close()
        state, info = kernel.step(state, target, generator)
        info.position = trace(state.position, positions)
        infos.append(info)
        steps -= 1
        if steps == 0:  # no chunk to draw for
            return state, infos
    if entry.plan is None:
        dry = Recorder(torch.Generator(device=state.position.device).manual_seed(0))
        kernel.step(state, target, dry)
        entry.plan = dry.plan
    recorder = Recorder(generator)
    recorder.plan = entry.plan
    # A short run takes the smallest power of two that covers it: padding wastes < 2x, and
    # only a handful of lengths are ever compiled.
    chunk = chunk or min(entry.length(), 1 << max(0, steps - 1).bit_length())
    # A single-threaded chunk leaves a core idle: the next chunk's noise is drawn there
    # meanwhile, into the other slot. The generator gives the same numbers in the same order
    # (the chunk draws nothing), so the run is the one drawn chunk by chunk.
    prefetch = PREFETCH and entry.ahead
    taken = ahead.take(entry, chunk, generator) if ahead is not None else None
    noise, slot = taken or (entry.noise(recorder, chunk), 0)
    for start in range(0, steps, chunk):
        n = min(chunk, steps - start)
        last, following = start + chunk >= steps, 1 - slot if prefetch else 0
        pending = None
        if prefetch and not last:
            pending = _workers().submit(entry.noise, recorder, chunk, following, 1)
        elif prefetch and ahead is not None:  # the next call's first chunk, as it would draw
            ahead.start(entry, recorder, chunk, following)
        try:
            position, diverged, aux, info = entry.call(
                state.position,
                state.center,
                state.diverged,
                state.aux,
                noise,
                entry.active(chunk, n),
                basis,
                state.center_losses,
            )
        finally:  # never leave a draw running into buffers after a failed chunk
            drawn = pending.result() if pending else None
        if not last:
            noise, slot = drawn or entry.noise(recorder, chunk, following), following
        state = replace(state, position=position, diverged=diverged, aux=aux, step=state.step + n)
        traced = None if info.position is None else info.position[:n]
        scalars = {k: v[:n] for k, v in info.scalars.items()}
        infos.append(Info(info.loss[:n], info.accepted[:n], info.diverged[:n], traced, scalars))
    return state, infos


# Whether compiling a run pays: the compile costs seconds once per process (per kernel, target,
# shape and hyperparameters, which are constants of the graph), and then saves on every step
# the eager step's per-operation dispatch and its unfused passes over the chains' parameters.
# Measured on a 2-core CPU: a compile from inductor's disk cache ~5 s (8-11 s uncached); eager
# ~3 us per operation (banana SGLD, 64 chains: 74 operations, 227 us a step eager, 4 us
# compiled) and ~5 ns per chain x parameter (a 100K-class DLN: 16.5 ms eager, 13 compiled).
COMPILE_SECONDS = 5.0
OP_SECONDS = 3e-6
ELEMENT_SECONDS = 5e-9


class _OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


@functools.cache
def compile_problem(device_type: str) -> str | None:
    """Why torch.compile cannot build code for ``device_type`` on this machine, or None when it
    can. Inductor compiles C++ for the CPU and Triton builds a C launcher for CUDA; an image
    without a compiler (python:3.11-slim) then runs every step eagerly instead of failing its
    runs with inductor's InvalidCxxCompiler. Checked once per process, as inductor does."""
    if device_type == "cuda":  # Triton's own search: $CC, else gcc, else clang
        if os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang"):
            return None
        return "Triton finds no C compiler (set CC, or install gcc)"
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler
    except ImportError:  # another torch: leave it to torch.compile
        return None
    try:
        get_cpp_compiler()  # inductor's search of $CXX / g++, each tried with --version
    except Exception as exc:  # InvalidCxxCompiler, or the search's own failure
        return f"torch.compile finds no working C++ compiler ({type(exc).__name__}: {exc})"
    return None


def fusable_here(kernel: Kernel, device: torch.device) -> bool:
    """Whether ``kernel`` can run as compiled chunks on ``device`` on this machine."""
    return kernel.fusable and compile_problem(device.type) is None


def worth_compiling(kernel: Kernel, state: State, target, steps: int) -> bool:
    """Whether ``steps`` steps from ``state`` should run fused: the time the compiled chunk
    saves over the run's eager steps, estimated from the operations one eager step dispatches
    (counted on a throwaway step) and the chains x parameters it updates, against the compile.
    A function of the kernel, target, shape and step count only, never of a clock: the same
    spec takes the same path, so a seed gives the same run on any machine of a device type.
    Short runs start at once instead of after the compile (a 5,000-step normal-crossing LLC
    estimate: ~0.6 s eager, ~5.6 s with a cached compile), long runs get the fused speed."""
    if not fusable_here(kernel, state.position.device):
        return False
    counter = _OpCounter()
    with torch.no_grad(), counter:
        kernel.step(state, target, torch.Generator(device=state.position.device).manual_seed(0))
    chains, dim = state.position.shape
    saving = counter.ops * OP_SECONDS + chains * dim * ELEMENT_SECONDS
    return steps * saving >= COMPILE_SECONDS
