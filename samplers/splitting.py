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
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from landscapes import ParamError

from .base import Draw, Kernel, State

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


@dataclass
class SplittingState(State):
    p: Tensor  # [C, d] momentum
    grad: Tensor  # [C, d] grad U at the position (the next B reuses it when fresh)
    loss: Tensor  # [C] L there


class Splitting(Kernel):
    """The letter-string integrator; ``scheme`` fixed by the registry entry or given."""

    name, minibatch = "splitting", True
    batch_size: int | None = None
    friction: float = 1.0
    temperature: float = 1.0
    scheme: str = "BAOAB"

    def __init__(self, **params):
        super().__init__(**params)
        self.scheme = check_scheme(self.scheme)
        self.fraction = {c: 1.0 / self.scheme.count(c) for c in "ABO"}
        # Is the gradient cached at the end of a step at the final position? (a B after the last A)
        self.fresh_at_end = "B" in self.scheme[self.scheme.rindex("A") :]

    def noise(self, chains, dim):  # one N(0, I) per O in the scheme
        return {f"xi{i}": Draw("normal", (chains, dim)) for i in range(self.scheme.count("O"))}

    def start(self, state, target, generator):
        batch = None
        if self.uses_batches(target):  # the first gradient on a batch of its own
            shape = (state.position.shape[0], self.batch_size)  # a batch per chain
            index = torch.randint(target.n, shape, generator=generator, device=generator.device)
            batch = target.batch(index)
        e = self.energy(state.position, state, target, batch)
        w = state.position
        p = torch.randn(w.shape, generator=generator, device=w.device, dtype=w.dtype)
        return SplittingState(
            **vars(state), p=math.sqrt(self.temperature) * p, grad=e.grad, loss=e.loss
        )

    def observe(self, state):
        return {"kinetic": 0.5 * (state.p * state.p).sum(-1)}

    def langevin_step(self, state):  # fully damped (p fresh), B/2 A moves w as ULA of step h^2
        return self.step_size**2

    def update(self, state, target, batch, noise):
        w, p, grad, loss = state.position, state.p, state.grad, state.loss
        fresh, o = self.fresh_at_end, 0
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
                p = a * p + math.sqrt(T * (1 - a * a)) * noise[f"xi{o}"]
                o += 1
        new = replace(state, position=w, p=p, grad=grad, loss=loss)
        return new, loss, torch.ones_like(loss)
