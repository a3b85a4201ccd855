"""A block of kernel steps as one compiled call: the same step, the same draws, less dispatch.

Eager PyTorch pays microseconds of dispatch per operation, which dominates a step on a small
target. A ``Chunk`` runs one block of the run's ``Noise`` (``samplers.base``) through the
kernel's own ``step``: on a CPU as a ``scan`` over the block's rows (one graph of one step,
looped in C++), compiled ahead of time into a package file that ``samplers.cache`` keeps on disk
for every later process (``torch.compile`` where the export fails); on CUDA as the
``torch.compile``d step called once per row (its kernels queue without a host sync). It reads
the rows the eager loop would read, so both paths give the same trajectory up to float
rounding. A block's part (a run's tail, a job's first block) runs through the same chunk, its
rows padded to the block and the padding's steps masked out (``usable`` says when that beats
stepping eagerly).

A compile takes seconds (a minute with a cold cache on a small machine); loading a package
takes milliseconds. ``start`` loads or compiles in a background thread, so a run steps eagerly
meanwhile and switches when ``ready``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
import warnings
import weakref
from dataclasses import fields, replace
from pathlib import Path

import torch
from torch import Tensor

from .cache import code, find, fingerprint, refuse, refused, remove, save, workspace
from .cache import key as cache_key
from .state import Info, State


# -- torch's private API, used here only -------------------------------------------------------
def _scan(*args):
    """torch has no public scan: without one, a block is a Python loop of compiled calls, each
    paying the call overhead (~10x a small target's compiled step). Imported when traced, in the
    compile's thread: torch's compiler takes seconds to import."""
    from torch._higher_order_ops.scan import scan

    return scan(*args)


# Inductor lowers ``scan`` to a loop that indexes its buffers with the loop counter, a
# data-dependent scalar dynamo must be allowed to capture; and every chunk shares this module's
# code objects, so dynamo's per-code-object recompile limit must allow one entry per chunk. Both
# settings are thread-local: they are set around each compiled call, never process-wide.
_SETTINGS = {"capture_scalar_outputs": True, "recompile_limit": 256}


def _settings():
    return torch._dynamo.config.patch(**_SETTINGS)


# A CPU chunk is compiled ahead of time into a package file (torch.export, then AOTInductor),
# kept on disk by ``samplers.cache``: a later process loads it in milliseconds, where
# torch.compile traced and compiled again in every process (~10 s with inductor's warm cache).
def export_package(
    module: torch.nn.Module, args: tuple, path: str, options: dict | None = None
) -> None:
    """Trace ``module`` on ``args`` (strict) and compile it ahead of time into ``path``;
    ``options``: inductor's settings for this compile alone."""
    with _settings():
        program = torch.export.export(module, args, strict=True)
    torch._inductor.aoti_compile_and_package(program, package_path=path, inductor_configs=options)


class Runner:
    """A package file loaded: AOTInductor's runner. ``run`` takes the flat list of inputs (it
    consumes the list) and returns the flat outputs; ``__call__`` rebuilds their structure."""

    def __init__(self, path: str):
        self.runner = torch._C._aoti.AOTIModelPackageLoader(path, "model", False, 1, -1)
        self.run = self.runner.boxed_run
        self.out_spec = torch.utils._pytree.treespec_loads(self.runner.get_call_spec()[1])

    def __call__(self, flat: list[Tensor]):
        return torch.utils._pytree.tree_unflatten(self.run(flat), self.out_spec)


class _Package:
    """A chunk's package loaded, called with the chunk's arguments."""

    def __init__(self, path: str, noise_keys: list[str], held: list[Tensor]):
        self.runner = Runner(path)
        self.noise_keys, self.held = noise_keys, held

    def __call__(self, carry: tuple, noise: dict[str, Tensor], live: Tensor):
        noise_rows = [noise[k] for k in self.noise_keys]
        return self.runner([*carry, *noise_rows, live, *self.held])


# -- the public side ---------------------------------------------------------------------------
# cpp_wrapper: the call into the compiled loop from C++ rather than Python, which on a 64-chain
# 2-D target is most of a block's time (bench/RESULTS.md).
OPTIONS = {"cpu": {"cpp_wrapper": True}, "cuda": {}}


def compile_problem(device_type: str) -> str | None:
    """Why torch.compile cannot build code for ``device_type`` here, or None when it can:
    inductor compiles C++ for the CPU and Triton a C launcher for CUDA, so without a compiler
    (e.g. the python:3.11-slim image) every step runs eagerly instead of failing the run."""
    if device_type == "cuda":  # Triton's search: $CC, else gcc, else clang
        names = [os.environ.get("CC"), "gcc", "clang"]
    else:  # inductor's: $CXX, else the platform's default
        names = [os.environ.get("CXX") or ("clang++" if sys.platform == "darwin" else "g++")]
    if any(name and shutil.which(name) for name in names):
        return None
    return "torch.compile finds no C/C++ compiler (set CXX or CC, or install g++)"


class Chunk:
    """``length`` steps of ``kernel`` from states shaped like ``state``, compiled."""

    def __init__(
        self, kernel, target, state: State, length: int, positions: bool, loop: bool | None = None
    ):
        self.kernel, self.target, self.length, self.positions = kernel, target, length, positions
        self.template = state
        self.names = [f.name for f in fields(state) if isinstance(getattr(state, f.name), Tensor)]
        self.device = state.position.device.type
        self.loop = self.device != "cpu" if loop is None else loop
        self.compiled = None  # built in ``start``'s thread: importing the compiler takes seconds
        self._key: str | None = None
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def _build(self) -> None:
        options = OPTIONS.get(self.device, {})
        if not self.loop and self.load():
            return
        exportable = getattr(self.target, "exportable", True)
        if not self.loop and exportable and not refused(self.key()):  # ahead of time, cached
            try:
                self._package()
                return
            except Exception as exc:  # an op torch.export cannot trace: torch.compile instead
                refuse(self.key(), repr(exc))  # later processes compile in-process at once
        if self.loop:  # the compiled step, once per row
            self.step = torch.compile(self._step, dynamic=False, options=options)
            self.compiled = self._loop
        else:  # the compiled scan over the rows
            self.compiled = torch.compile(self._scan, dynamic=False, options=options)

    # -- the package on disk (CPU) -----------------------------------------------------------
    def key(self) -> str:
        """The cache entry's name: everything the compiled code depends on (samplers.cache)."""
        if self._key is None:
            noise = self._example_noise()
            self._key = cache_key(
                kernel=fingerprint(self.kernel),
                target=fingerprint(self.target),
                state=fingerprint(type(self.template)),
                shapes=[(n, *_shape(getattr(self.template, n))) for n in self.names],
                noise=[(k, *_shape(v)) for k, v in noise.items()],
                length=self.length,
                positions=self.positions,
                device=str(self.template.position.device),
                code=code(),
            )
        return self._key

    def load(self) -> bool:
        """Load this chunk's package from the cache, if there is a sound one; True if loaded."""
        if self.compiled is not None:
            return True
        if self.loop or not getattr(self.target, "exportable", True):
            return False  # nothing on disk for it: no key to hash (a big model's weights)
        found = find(self.key())
        if found is None:
            return False
        try:
            held = self._held()
            if found[1].get("held") != len(held):
                raise ValueError("the package takes other tensors than this kernel holds")
            self.compiled = _Package(str(found[0]), found[1]["noise"], held)
        except Exception:  # unloadable (a package of another build): rebuilt, never trusted
            remove(self.key())
            return False
        return True

    def _package(self) -> None:
        """Export the scan, compile it ahead of time, file it in the cache and load it."""
        module = _Scan(self)
        carry = _unalias(tuple(getattr(self.template, n) for n in self.names))
        noise = self._example_noise()
        live = torch.ones(self.length, dtype=torch.bool, device=self.template.position.device)
        held = self._held()
        with workspace() as tmp:
            built = os.path.join(tmp, "chunk.pt2")
            export_package(module, (carry, noise, live, held), built)
            meta = {"noise": list(noise), "held": len(held), "kernel": self.kernel.name}
            path = save(self.key(), Path(built), meta)
        self.compiled = _Package(str(path), list(noise), held)

    def _held(self) -> list[Tensor]:
        """The tensors the kernel and the target hold, in ``_held``'s order: the package's
        last inputs (read at each call, so an in-place update, as w0's losses get, is seen)."""
        return _unique([place[key] for place, key in _held(self.kernel, self.target)])

    # -- one step as a function of tensors ----------------------------------------------------
    def _step(self, carry: tuple, noise: dict[str, Tensor], live: Tensor | None = None):
        """The kernel's step; where ``live`` is False (a padding row of a scan) the carry
        stays."""
        state = replace(self.template, **dict(zip(self.names, carry, strict=True)))
        new, info = self.kernel.step(state, self.target, noise)
        out = []
        for old, value in zip(carry, (getattr(new, n) for n in self.names), strict=True):
            if live is not None and value is not old:  # an unchanged part needs no mask
                value = torch.where(live, value, old)
            # scan refuses outputs that alias an input or each other: copy those (small)
            aliased = any(value is v for v in (*carry, *out))
            out.append(value.clone() if aliased else value)
        ys = {"loss": info.loss, "accepted": info.accepted, "diverged": info.diverged.clone()}
        ys.update(info.scalars)
        if self.positions:
            ys["position"] = out[self.names.index("position")].clone()
        return tuple(out), ys

    def _scan(self, carry: tuple, noise: dict[str, Tensor], live: Tensor):
        keys = list(noise)
        return _scan(
            lambda c, xs: self._step(c, dict(zip(keys, xs[:-1], strict=True)), xs[-1]),
            carry,
            [*(noise[k] for k in keys), live],
        )

    def _loop(self, carry: tuple, noise: dict[str, Tensor], rows: int):
        ys = []
        for t in range(rows):  # a call per row given: no padding
            carry, y = self.step(carry, {k: v[t] for k, v in noise.items()})
            ys.append(y)
        return carry, {k: torch.stack([y[k] for y in ys]) for k in ys[0]}

    # -- calls ---------------------------------------------------------------------------------
    def usable(self, rows: int) -> bool:
        """Whether ``rows`` steps (at most ``length``) run here rather than eagerly: a whole
        block, or a part of at least a quarter of one (a compiled step costs several times
        less than an eager one, so a part's padded steps cost less than its eager ones; a
        single step stays eager: the first record of a job comes at once)."""
        return 4 * rows >= self.length

    def __call__(self, state: State, noise: dict[str, Tensor]) -> tuple[State, Info]:
        """One block: ``noise`` holds at most ``length`` rows of each draw (fewer are padded
        with zeros, and the padding's steps leave the state as it was)."""
        if self.compiled is None:  # called before ``start``: build it here
            self._build()
        rows = next(iter(noise.values())).shape[0]
        if not 0 < rows <= self.length:
            raise ValueError(f"a chunk of {self.length} steps got {rows} rows of draws")
        carry = _unalias(tuple(getattr(state, n) for n in self.names))
        if self.loop:
            live = rows
        else:
            live = torch.arange(self.length, device=state.position.device) < rows
            if rows < self.length:
                noise = {k: _padded(v, self.length) for k, v in noise.items()}
        if isinstance(self.compiled, _Package):  # no dynamo: importing it takes seconds
            carry, ys = self.compiled(carry, noise, live)
        else:
            with _settings():
                carry, ys = self.compiled(carry, noise, live)
        state = replace(state, **dict(zip(self.names, carry, strict=True)))
        ys = {k: v[:rows] for k, v in ys.items()}
        loss, accepted, diverged = ys.pop("loss"), ys.pop("accepted"), ys.pop("diverged")
        return state, Info(loss, accepted, diverged, ys.pop("position", None), ys)

    def start(self) -> Chunk:
        """Compile in a background thread (a call on zero draws, its results dropped): the
        run's generator is not touched, and the caller steps eagerly until ``ready``."""
        if self.thread is None and not self.load():
            zeros = {k: torch.zeros_like(v) for k, v in self._example_noise().items()}
            example = replace(self.template)

            def warm():
                try:
                    self(example, zeros)
                except Exception as exc:  # reported once by ``ready``; the run goes on eagerly
                    self.error = exc

            self.thread = threading.Thread(target=warm, name="basin-compile", daemon=True)
            self.thread.start()
        return self

    @property
    def ready(self) -> bool:
        if self.error is not None or self.compiled is None:
            return False
        return self.thread is None or not self.thread.is_alive()

    @property
    def failed(self) -> bool:
        return self.error is not None

    def wait(self) -> bool:
        """Block until the compile ends; True when it succeeded."""
        thread = self.start().thread
        if thread is not None:
            thread.join()
        return self.error is None

    def _example_noise(self) -> dict[str, Tensor]:
        chains, dim = self.template.position.shape
        device, dtype = self.template.position.device, self.template.position.dtype
        draws = self.kernel.draws(self.target, chains, dim)
        return {
            k: torch.zeros(
                (self.length, *d.shape),
                device=device,
                dtype=torch.int64 if d.kind == "integers" else dtype,
            )
            for k, d in draws.items()
        }


class _Scan(torch.nn.Module):
    """The chunk's scan as the module torch.export traces. The tensors the kernel and the target
    hold (data, weights, w0's losses) are its inputs, swapped in where they live while it
    traces: scan cannot trace a step that reads tensors from outside its arguments."""

    def __init__(self, chunk: Chunk):
        super().__init__()
        self.chunk = chunk
        self.slots = _held(chunk.kernel, chunk.target)  # found here: the trace only swaps

    def forward(self, carry: tuple, noise: dict[str, Tensor], live: Tensor, held: list[Tensor]):
        with swapped(self.slots, held):
            return self.chunk._scan(carry, noise, live)


@contextlib.contextmanager
def swapped(slots: list[tuple], held: list[Tensor]):
    """The tensors at ``slots`` (``_held``) replaced by ``held`` (one per distinct tensor, in
    ``_unique``'s order) while a trace runs, then put back."""
    kept = [place[key] for place, key in slots]
    swap = {id(t): h for t, h in zip(_unique(kept), held, strict=True)}
    try:
        for (place, key), tensor in zip(slots, kept, strict=True):
            place[key] = swap[id(tensor)]
        yield
    finally:
        for (place, key), tensor in zip(slots, kept, strict=True):
            place[key] = tensor


def _held(*roots) -> list[tuple]:
    """(container, key) of every tensor ``roots`` hold in their attributes, dicts and lists,
    recursively, in a fixed order (a tensor in a tuple stays where it is: a constant)."""
    slots, seen = [], set()

    def walk(x) -> None:
        if id(x) in seen or isinstance(x, (Tensor, type)) or x is None:
            return
        seen.add(id(x))
        place = x if isinstance(x, (dict, list)) else getattr(x, "__dict__", None)
        if place is None:
            return
        for key in list(place) if isinstance(place, dict) else range(len(place)):
            if key in ("_chunks", "_paired"):  # a kernel's caches (samplers.cache.fingerprint)
                continue
            value = place[key]
            if isinstance(value, Tensor):
                slots.append((place, key))
            elif isinstance(value, (dict, list)) or hasattr(value, "__dict__"):
                walk(value)

    for root in roots:
        walk(root)
    return slots


def _unique(tensors: list[Tensor]) -> list[Tensor]:
    out, seen = [], set()
    for t in tensors:
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def _shape(value: Tensor) -> tuple:
    return (str(value.dtype), *value.shape)


def _padded(rows: Tensor, length: int) -> Tensor:
    """``rows`` with zero rows after them up to ``length`` (valid draws of every kind)."""
    return torch.cat([rows, rows.new_zeros((length - rows.shape[0], *rows.shape[1:]))])


def _unalias(values: tuple) -> tuple:
    """``values`` with any tensor repeated (an MH state's U and L on a potential) copied."""
    out = []
    for v in values:
        out.append(v.clone() if any(v is o for o in out) else v)
    return tuple(out)


_warned: set[str] = set()


def chunk_for(
    kernel,
    target,
    state: State,
    length: int,
    positions: bool,
    wait: bool = False,
    cached: bool = False,
):
    """The kernel's compiled ``Chunk`` for this target, state shape and block length (one per
    kernel object, reused by its later runs), started compiling; None where nothing compiles
    (with one warning a process) or the kernel or the target is not compilable. ``cached``:
    only a chunk ready now (compiled earlier in this process, or on disk), else None."""
    if not getattr(kernel, "compilable", True) or not getattr(target, "compilable", True):
        return None
    problem = compile_problem(state.position.device.type)
    if problem is not None:
        if problem not in _warned:
            _warned.add(problem)
            warnings.warn(f"steps run eagerly: {problem}", stacklevel=3)
        return None
    cache = kernel.__dict__.setdefault("_chunks", {})
    key = (
        id(target),
        type(state),
        tuple(state.position.shape),
        state.position.dtype,
        str(state.position.device),
        length,
        positions,
    )
    entry = cache.get(key)
    if entry is None or entry[0]() is not target:  # ids are reused once a target is freed
        made = kernel.make_chunk(target, state, length, positions)
        entry = cache[key] = (weakref.ref(target), made)
    if entry[1] is None:  # the kernel compiles nothing for this device
        return None
    if cached:
        chunk = entry[1]
        return chunk if chunk.ready or (chunk.thread is None and chunk.load()) else None
    chunk = entry[1].start()
    if wait and not chunk.wait():
        warnings.warn(f"steps run eagerly: the compile failed ({chunk.error!r})", stacklevel=3)
        return None
    return chunk
