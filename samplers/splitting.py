"""Underdamped Langevin by operator splitting (TATi, reference 003): one integrator driven by a
string of the letters A, B, O, e.g. "BAOAB", "ABOBA", "BAO" (GLA1), "BOBA" (GLA2).

  A(h): w <- w + h p                 B(h): p <- p - h grad U(w)
  O(h): p <- a p + sqrt(T (1 - a^2)) R,  a = exp(-friction h)

Each letter gets the step divided by how often it occurs (BAOAB = B/2 A/2 O A/2 B/2). The target
is exp(-U / T) with p ~ N(0, T I). A gradient is evaluated only when the position moved since the
last one, so BAOAB costs one gradient per step (its last kick is the next step's first).
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from landscapes import ParamError, Target
from landscapes.base import Batch

from .base import Kernel, State, normal

SCHEMES = {"baoab": "BAOAB", "gla1": "BAO", "gla2": "BOBA"}


def check_scheme(scheme: str, field: str = "splitting.scheme") -> str:
    scheme = scheme.strip().upper()
    if not scheme or set(scheme) - set("ABO") or not {"A", "B", "O"} <= set(scheme):
        raise ParamError(
            field,
            f"must be a string of the letters A, B, O using each at least "
            f"once (e.g. 'BAOAB', 'ABOBA'), got {scheme!r}",
        )
    return scheme


class Splitting(Kernel):
    """The letter-string integrator; ``scheme`` fixed by the registry entry or given."""

    fusable = True

    name, minibatch = "splitting", True

    def __init__(self, **params):
        super().__init__(**params)
        self.scheme = check_scheme(self.scheme)
        self.fraction = {c: 1.0 / self.scheme.count(c) for c in "ABO"}
        # Is the gradient cached at the end of a step at the final position? (a B after the last A)
        self.fresh_at_end = "B" in self.scheme[self.scheme.rindex("A") :]

    def start(self, state, target, generator):
        e = self.energy(state.position, state, target, self._batch(target, generator))
        p = math.sqrt(self.temperature) * normal(generator, state.position)
        return {"p": p, "grad": e.grad, "L": e.loss}

    def observe(self, state):
        p = state.aux["p"]
        return {"kinetic": 0.5 * (p * p).sum(-1)}

    def update(self, state: State, target: Target, batch: Batch, generator: torch.Generator):
        w, p, grad, loss = state.position, state.aux["p"], state.aux["grad"], state.aux["L"]
        # start() evaluated the gradient here, but on a batch of its own: a step reports the loss
        # of its own batch (a paired LLC step subtracts w0's on the same batch)
        fresh = self.fresh_at_end or (state.step == 0 and batch is None)
        h, T = self.step_size, self.temperature
        for letter in self.scheme:
            dt = h * self.fraction[letter]
            if letter == "A":
                w, fresh = w + dt * p, False
            elif letter == "B":
                if not fresh:
                    e = self.energy(w, state, target, batch)
                    grad, loss, fresh = e.grad, e.loss, True
                p = p - dt * grad
            else:
                a = math.exp(-self.friction * dt)
                p = a * p + math.sqrt(T * (1 - a * a)) * normal(generator, p)
        aux = {"p": p, "grad": grad, "L": loss}
        ones = torch.ones_like(loss)
        return replace(state, position=w, aux=aux), loss, ones
