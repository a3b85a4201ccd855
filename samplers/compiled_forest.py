"""NUTS's forest (``samplers.forest``) with its iteration compiled ahead of time.

Eager, a forest's leaf is ~60 tensor ops and its settle ~80, each paying microseconds of
dispatch on a few hundred numbers. Here one iteration settles every waiting chain and then takes
a leaf for every running one, as a single compiled call with no host sync; the host looks every
``CHECK_EVERY`` iterations whether all chains have taken their steps. A chain never waits for
the others to settle, so a block costs its busiest chain's leaves. Each chain's draws follow its
own noise rows whatever the schedule, so the records are the eager forest's up to float rounding
(inductor's exp and log differ from ATen's in the last bit; a later U-turn or pick can then go
the other way, as between any two builds of a chaotic map).

The package is kept on disk by ``samplers.cache`` like a ``Chunk``'s, under the same key (the
kernel and target by content, the shapes, the block length, the code), so a later process loads
it in milliseconds. The carry (what an iteration replaces: found by running one iteration) goes
in and out stacked by dtype and shape, a few tensors rather than ~40: the runner's cost is about
0.4 us a tensor.
"""

from __future__ import annotations

import copy
import os
from dataclasses import fields, replace
from pathlib import Path

import torch
from torch import Tensor

from .cache import find, refuse, refused, remove, save, workspace
from .compiled import Chunk, Runner, _held, _padded, export_package, swapped
from .forest import FOREST_STEPS, Forest

CHECK_EVERY = 8  # iterations between the host's looks at whether every chain is done
# inductor vectorises a [C, d] op along d: at d = 2 or 3 its masked tail loads cost ~2x the
# scalar loop (a 128-chain banana iteration: 98 us as built here, ~220 us vectorised)
OPTIONS = {"cpp.simdlen": 1, "cpp_wrapper": True}


class Layout:
    """Where a forest's tensors go: the carry stacked into a few tensors (``groups``: names
    by dtype and shape), the other tensors (``constants``) and the start state's (``start``)
    as they are. Built from a forest by running one iteration on a copy."""

    def __init__(self, forest: Forest):
        tensors = _tensors(forest)
        trial = copy.copy(forest)
        trial._write = lambda *written: None
        trial.iterate()
        after = _tensors(trial)
        carry = [n for n in tensors if after[n] is not tensors[n]]
        self.constants = [n for n in tensors if n not in carry]
        self.start = [f.name for f in fields(forest.start) if _is_tensor(forest.start, f.name)]
        groups: dict[tuple, list[str]] = {}
        for name in carry:
            groups.setdefault((after[name].dtype, tuple(after[name].shape)), []).append(name)
        self.groups = list(groups.values())
        self.active = next(
            (g, row.index("active")) for g, row in enumerate(self.groups) if "active" in row
        )

    def signature(self) -> list:
        return [self.groups, self.constants, self.start]

    def pack(self, forest: Forest) -> list[Tensor]:
        return [torch.stack([getattr(forest, n) for n in names]) for names in self.groups]

    def unpack(self, forest: Forest, packs: list[Tensor]) -> None:
        for names, packed in zip(self.groups, packs, strict=True):
            for name, value in zip(names, packed.unbind(0), strict=True):
                setattr(forest, name, value)

    def fixed(self, forest: Forest) -> list[Tensor]:
        """The constants' and the start's tensors, in the package's order."""
        start = forest.start
        return [
            *(getattr(forest, n) for n in self.constants),
            *(getattr(start, n) for n in self.start),
        ]

    def put(
        self, forest: Forest, packs: list[Tensor], constants: list[Tensor], start: list[Tensor]
    ):
        self.unpack(forest, packs)
        for name, value in zip(self.constants, constants, strict=True):
            setattr(forest, name, value)
        forest.start = replace(forest.start, **dict(zip(self.start, start, strict=True)))


class _Iteration(torch.nn.Module):
    """One iteration as the module torch.export traces: settle the waiting chains, then a leaf,
    on a copy of ``forest`` given every tensor as an input; returns the carry and the records
    the settle wrote (each chain's slot, row and diverged flag)."""

    def __init__(self, forest: Forest, layout: Layout):
        super().__init__()
        self.forest, self.layout = forest, layout
        self.slots = _held(forest.kernel, forest.target)

    def forward(self, packs, constants, start, held):
        forest = copy.copy(self.forest)
        self.layout.put(forest, packs, constants, start)
        written: list[Tensor] = []
        forest._write = lambda *w: written.extend(w)
        with swapped(self.slots, held):
            forest.iterate()
        return (*self.layout.pack(forest), *written)


class ForestChunk(Chunk):
    """A block of NUTS steps as a forest whose iteration is one compiled call (CPU only)."""

    def __init__(self, kernel, target, state, length: int, positions: bool):
        # the package does not depend on ``positions`` (the records hold every position)
        super().__init__(kernel, target, state, length, False, loop=False)
        self.wants_positions = positions
        self.layout: Layout | None = None

    def _forest(self, state, noise: dict[str, Tensor], steps: int | None = None) -> Forest:
        return Forest(self.kernel, state, self.target, noise, steps=steps, dense=True)

    def _layout(self) -> Layout:
        if self.layout is None:
            self.layout = Layout(self._forest(self.template, self._example_noise()))
        return self.layout

    def _build(self) -> None:
        if self.load():
            return
        if refused(self.key()):  # an earlier process's export failed: not tried again
            raise RuntimeError("the forest's export failed in an earlier process")
        try:
            self._package()
        except Exception as exc:  # the chunk's error: the run goes on eagerly
            refuse(self.key(), repr(exc))
            raise

    def load(self) -> bool:
        if self.compiled is not None:
            return True
        found = find(self.key())
        if found is None:
            return False
        try:
            if found[1].get("layout") != self._layout().signature():
                raise ValueError("the package was built for another layout")
            self.compiled = Runner(str(found[0]))
        except Exception:  # unloadable: rebuilt, never trusted
            remove(self.key())
            return False
        return True

    def _package(self) -> None:
        layout = self._layout()
        forest = self._forest(self.template, self._example_noise())
        args = (layout.pack(forest), *_split(layout.fixed(forest), layout), self._held())
        with workspace() as tmp:
            built = os.path.join(tmp, "forest.pt2")
            export_package(_Iteration(forest, layout), args, built, OPTIONS)
            meta = {"layout": layout.signature(), "kernel": self.kernel.name, "forest": True}
            path = save(self.key(), Path(built), meta)
        self.compiled = Runner(str(path))

    def usable(self, rows: int) -> bool:
        """A block of at least FOREST_STEPS steps (fewer go in lockstep: ``NUTS.eager``)."""
        return rows >= FOREST_STEPS

    def __call__(self, state, noise: dict[str, Tensor]):
        if self.compiled is None:
            self._build()
        rows = next(iter(noise.values())).shape[0]
        if not 0 < rows <= self.length:
            raise ValueError(f"a chunk of {self.length} steps got {rows} rows of draws")
        kernel = self.kernel
        if kernel.auto and int(state.count.max()) < kernel.check_warmup():  # lockstep adapts
            return kernel.eager(state, self.target, noise, self.wants_positions)
        noise = {k: _padded(v, self.length) for k, v in noise.items()}
        forest = self._forest(state, noise, steps=rows)
        self.grow(forest)
        return forest.state(), forest.info(self.wants_positions)

    def grow(self, forest: Forest) -> None:
        """Iterations until every chain has taken its steps, then the records written."""
        layout, run = self._layout(), self.compiled.run
        packs, fixed = layout.pack(forest), [*layout.fixed(forest), *self._held()]
        count, (group, row) = len(packs), layout.active
        written = []
        while True:
            for _ in range(CHECK_EVERY):
                out = run([*packs, *fixed])
                packs = out[:count]
                written.append(out[count:])
            if not bool(packs[group][row].any()):
                break
        layout.unpack(forest, packs)
        slot, record, diverged = (torch.stack(x) for x in zip(*written, strict=True))
        chain = forest.chain.expand_as(slot)
        forest.record.index_put_((slot, chain), record)  # a slot is written once but the
        forest.record_diverged.index_put_((slot, chain), diverged)  # spare row, never read


def _split(fixed: list[Tensor], layout: Layout) -> tuple[list[Tensor], list[Tensor]]:
    n = len(layout.constants)
    return fixed[:n], fixed[n:]


def _is_tensor(obj, name: str) -> bool:
    return isinstance(getattr(obj, name), Tensor)


def _tensors(forest: Forest) -> dict[str, Tensor]:
    """The forest's tensors by name (its records apart: the settle writes them through
    ``_write``, and the host files what the compiled iteration returns)."""
    skip = ("record", "record_diverged")
    return {k: v for k, v in vars(forest).items() if isinstance(v, Tensor) and k not in skip}
