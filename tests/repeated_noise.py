"""A noise stream that repeats a C-chain stream's draws for copies x C chains: one batched run
whose groups of chains each read what a separate run from the same seed would (the LLC and DLN
accuracy tests run two step sizes as one run this way)."""

from __future__ import annotations

import torch

from samplers.base import Noise


class Repeated:
    """The noise stream of ``copies`` x C chains that reads a C-chain stream's draws (``noise``)
    once per copy: chain c + i C gets chain c's draws, as ``copies`` runs from the same seed
    would (what ``Kernel.run`` reads of a stream: ``length``, ``left``, ``take``)."""

    def __init__(self, noise: Noise, chains: int, copies: int):
        assert all(d.shape[0] == chains for d in noise.draws.values()), noise.draws
        self.noise, self.copies = noise, copies

    length = property(lambda self: self.noise.length)
    left = property(lambda self: self.noise.left)

    def take(self, steps: int) -> dict[str, torch.Tensor]:
        rows = self.noise.take(steps).items()  # [steps, C, ...] each
        return {k: torch.cat([v] * self.copies, 1) for k, v in rows}
