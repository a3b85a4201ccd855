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

from .base import Info, Kernel, State


class Recorder:
    """A generator stand-in that draws for real and remembers each draw's kind and shape."""

    def __init__(self, generator: torch.Generator):
        self.generator, self.device = generator, generator.device
        self.plan: list[tuple[str, torch.Size, torch.dtype]] = []

    def draw(self, kind: str, like: Tensor) -> Tensor:
        self.plan.append((kind, like.shape, like.dtype))
        fn = torch.randn if kind == "normal" else torch.rand
        return fn(like.shape, generator=self.generator, device=like.device, dtype=like.dtype)

    def prepare(self, steps: int) -> list[Tensor]:
        fns = {"normal": torch.randn, "uniform": torch.rand}
        return [
            fns[kind]((steps, *shape), generator=self.generator, device=self.device, dtype=dtype)
            for kind, shape, dtype in self.plan
        ]


class Replay:
    """Hands out pre-drawn noise: draw number ``slot`` of step ``step``."""

    def __init__(self, noise: list[Tensor]):
        self.noise, self.step, self.slot = noise, 0, 0

    def draw(self, kind: str, like: Tensor) -> Tensor:
        value = self.noise[self.slot][self.step]
        self.slot += 1
        return value

    def next_step(self) -> None:
        self.step, self.slot = self.step + 1, 0


def chunk_steps(kernel: Kernel, target, steps: int):
    """The uncompiled chunk: ``steps`` kernel steps on replayed noise (also used by tests)."""

    def run(
        position: Tensor,
        center: Tensor,
        diverged: Tensor,
        aux: dict[str, Tensor],
        noise: list[Tensor],
    ) -> tuple[Tensor, Tensor, dict[str, Tensor], Tensor, Tensor]:
        # step=1: fused chunks always follow a first eager step; a constant keeps one graph
        state = State(position, center, diverged, 1, aux)
        replay = Replay(noise)
        losses, accepted = [], []
        for _ in range(steps):
            new, loss, acc = kernel.update(state, target, None, replay)
            state, info = kernel._contain(state, new, loss, acc)
            losses.append(info.loss)
            accepted.append(info.accepted)
            replay.next_step()
        return state.position, state.diverged, state.aux, torch.stack(losses), torch.stack(accepted)

    return run


# Every compiled chunk shares the code object of ``run`` above, and dynamo counts recompilations
# per code object: allow one per (kernel, target, chunk length, shape) a session may use.
torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 256)


def run_fused(
    kernel: Kernel, state: State, target, recorder: Recorder, steps: int, chunk: int
) -> tuple[State, list[Info], int]:
    """Run whole chunks compiled; return the state, their Infos and the steps left over."""
    # Compiled chunks close over the kernel and the target, so they live on the kernel, keyed
    # by the target's identity and checked through a weak reference (ids are reused).
    cache = kernel.__dict__.setdefault("_compiled", {})
    key = (
        id(target),
        chunk,
        state.position.shape,
        state.position.dtype,
        str(state.position.device),
    )
    ref, compiled = cache.get(key, (None, None))
    if ref is None or ref() is not target:
        compiled = torch.compile(chunk_steps(kernel, target, chunk), dynamic=False)
        cache[key] = (weakref.ref(target), compiled)
    infos = []
    for _ in range(steps // chunk):
        position, diverged, aux, loss, accepted = compiled(
            state.position, state.center, state.diverged, state.aux, recorder.prepare(chunk)
        )
        state = replace(
            state, position=position, diverged=diverged, aux=aux, step=state.step + chunk
        )
        infos.append(Info(loss=loss, accepted=accepted, diverged=diverged.expand(chunk, -1)))
    return state, infos, steps % chunk
