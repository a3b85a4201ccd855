"""Several kernel steps compiled into one graph, with their noise drawn up front.

Eager PyTorch pays a few microseconds of dispatch per operation, which dominates a step on a
2-D potential. ``torch.compile`` over ``chunk`` steps fuses them into a few loops, but it cannot
trace a ``torch.Generator``; so one eager step is run with a ``Recorder`` to learn which draws a
step makes, ``chunk`` steps' worth of each draw is made up front, and the compiled chunk reads
them through a ``Replay`` in the same order.
"""

from __future__ import annotations

import weakref
from dataclasses import replace

import torch
from torch import Tensor

from .base import Info, Kernel, State, draw


class Recorder:
    """A generator stand-in that draws for real and remembers each draw's kind and shape."""

    def __init__(self, generator: torch.Generator):
        self.generator = generator
        self.plan: list[tuple] = []

    def draw(self, kind: str, shape, dtype: torch.dtype, high=None) -> Tensor:
        self.plan.append((kind, tuple(shape), dtype, high))
        return draw(self.generator, kind, shape, dtype, high)

    def prepare(self, steps: int) -> list[Tensor]:
        """``steps`` steps' worth of each draw the recorded step made, stacked on a new dim 0."""
        return [
            draw(self.generator, kind, (steps, *shape), dtype, high)
            for kind, shape, dtype, high in self.plan
        ]


class Replay:
    """Hands out pre-drawn noise: draw number ``slot`` of step ``step``."""

    def __init__(self, noise: list[Tensor]):
        self.noise, self.step, self.slot = noise, 0, 0

    def draw(self, kind: str, shape, dtype: torch.dtype, high=None) -> Tensor:
        value = self.noise[self.slot][self.step]
        self.slot += 1
        return value

    def next_step(self) -> None:
        self.step, self.slot = self.step + 1, 0


def chunk_steps(kernel: Kernel, target, steps: int):
    """The uncompiled chunk: ``steps`` kernel steps on replayed noise (also used by tests).

    ``active[i]`` false makes step i a no-op, so one compiled length serves any step count.
    Returns the final position, diverged flags and aux, and each step's loss stacked [steps, C];
    plus each step's acceptance for MH kernels (other kernels accept every finite step).
    """

    def run(
        position: Tensor,
        center: Tensor,
        diverged: Tensor,
        aux: dict[str, Tensor],
        noise: list[Tensor],
        active: Tensor,
    ) -> tuple[Tensor, Tensor, dict[str, Tensor], Tensor, Tensor | None]:
        # step=1: fused chunks always follow a first eager step; a constant keeps one graph
        state = State(position, center, diverged, 1, aux)
        replay = Replay(noise)
        losses, accepted = [], []
        for i in range(steps):
            batch = kernel._batch(target, replay)
            new, loss, acc = kernel.update(state, target, batch, replay)
            state, info = kernel._contain(state, new, loss, acc, hold=~active[i])
            losses.append(info.loss)
            accepted.append(info.accepted)
            replay.next_step()
        acceptance = torch.stack(accepted) if kernel.metropolis else None
        return state.position, state.diverged, state.aux, torch.stack(losses), acceptance

    return run


# Every compiled chunk shares the code object of ``run`` above, and dynamo counts recompilations
# per code object: allow one per (kernel, target, chunk length, shape) a session may use.
torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 256)

# On CPU at C = 64, allocating a step's intermediate tensors takes longer than its arithmetic.
# Inductor's C++ wrapper allocates ~3x faster than its Python one, and memory planning pools
# the allocations (~1.3x more); both lengthen the first compile (cached on disk afterwards).
COMPILE_OPTIONS = {"cpu": {"cpp_wrapper": True, "memory_planning": True}}


class Compiled:
    """A compiled chunk and the draws one step makes (learned from the first eager step)."""

    def __init__(self, kernel: Kernel, target, chunk: int, device: torch.device):
        self.target = weakref.ref(target)  # the cache lives on the kernel; ids are reused
        options = COMPILE_OPTIONS.get(device.type)
        self.chunk = torch.compile(
            chunk_steps(kernel, target, chunk), dynamic=False, options=options
        )
        self.plan: list[tuple] | None = None


def compiled_entry(kernel: Kernel, target, state: State, chunk: int) -> Compiled:
    """The ``Compiled`` for (target, chunk, shape, dtype, device), cached on the kernel."""
    cache = kernel.__dict__.setdefault("_compiled", {})
    device = state.position.device
    key = (id(target), chunk, state.position.shape, state.position.dtype, str(device))
    entry = cache.get(key)
    if entry is None or entry.target() is not target:
        entry = cache[key] = Compiled(kernel, target, chunk, device)
    return entry


def compiled_chunk(kernel: Kernel, target, state: State, chunk: int):
    return compiled_entry(kernel, target, state, chunk).chunk


def run_fused(
    kernel: Kernel, state: State, target, generator: torch.Generator, steps: int, chunk: int
) -> tuple[State, list[Info]]:
    """``steps`` steps in compiled chunks of ``chunk``; the last one padded with no-op steps.

    A chain's first step, and the first fused run of a kernel on a target, take one eager step
    through a ``Recorder`` (chunks start at step >= 1 and need to know the draws of a step)."""
    entry = compiled_entry(kernel, target, state, chunk)
    recorder = Recorder(generator)
    infos = []
    if entry.plan is None or state.step == 0:
        state, info = kernel.step(state, target, recorder)
        infos.append(info)
        steps -= 1
        entry.plan = recorder.plan
    recorder.plan = entry.plan
    for start in range(0, steps, chunk):
        n = min(chunk, steps - start)
        active = torch.arange(chunk, device=state.position.device) < n
        position, diverged, aux, loss, accepted = entry.chunk(
            state.position, state.center, state.diverged, state.aux, recorder.prepare(chunk), active
        )
        state = replace(state, position=position, diverged=diverged, aux=aux, step=state.step + n)
        loss = loss[:n]
        # A step's chain diverged exactly where its loss is NaN (``Kernel._contain``).
        stepped = torch.isfinite(loss)
        accepted = stepped.to(loss.dtype) if accepted is None else accepted[:n]
        infos.append(Info(loss=loss, accepted=accepted, diverged=~stepped))
    return state, infos
