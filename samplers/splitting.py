"""Underdamped Langevin by operator splitting (TATi: Heber et al. 2020, eqs. 9-13): one integrator
driven by a string of the letters A, B, O, e.g. "BAOAB", "ABOBA", "BAO" (GLA1), "BOBA" (GLA2).

  A(h): w <- w + h p                 B(h): p <- p - h grad U(w)
  O(h): p <- a p + sqrt(T (1 - a^2)) R,  a = exp(-friction h)

Each letter gets the step divided by how often it occurs (BAOAB = B/2 A/2 O A/2 B/2). The target
is exp(-U / T) with p ~ N(0, T I). A gradient is evaluated only when the position moved since the
last one, so BAOAB costs one gradient per step (its last kick is the next step's first).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import partial

import torch
from torch import Tensor

from landscapes import ParamError

from .base import Draw, Kernel, State
from .spec import FRICTION, P003, SG, TEMPERATURE, KernelSpec, Param, aligned, kernel_spec

SCHEMES = {"baoab": "BAOAB", "gla1": "BAO", "gla2": "BOBA"}  # (and EQN: BAOAB preconditioned)

MAPS = (
    r"A_h:\ w \leftarrow w + h\,p \qquad B_h:\ p \leftarrow p - h\,\nabla U(w) \\"
    r"O_h:\ p \leftarrow a\,p + \sqrt{T(1 - a^2)}\,R,\quad a = e^{-\gamma_f h}"
)
SPLITTING_TEXT = (
    "Underdamped Langevin dynamics with a momentum p ~ N(0, T I), integrated by operator "
    "splitting as in the TATi paper (Heber, Trstanova & Leimkuhler 2020): A drifts the "
    "position, B kicks the momentum with the force, O is the exact Ornstein-Uhlenbeck "
    "thermostat (R ~ N(0, I) fresh noise) with friction gamma_f (the `friction` parameter, "
    "not the localization gamma). "
    "Letters are applied left to right, each with the step h divided by how often it occurs, "
    "and the scheme samples exp(-U/T) up to a step-size bias whose order depends on the "
    "letter order (BAOAB: second order, nearly exact on Gaussians). No accept/reject step."
)


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

    SPEC = kernel_spec(
        "splitting",
        "splitting",
        P003,
        [
            *SG,
            FRICTION,
            TEMPERATURE,
            Param("scheme", "str", "BAOAB", "letters A (drift), B (kick), O (thermostat)"),
        ],
        doc="Langevin splitting with any scheme of the letters A, B, O (e.g. ABOBA).",
        equation=aligned(
            r"\text{scheme } X_1 X_2 \cdots X_k,\quad X_i \in \{A, B, O\}",
            r"\text{each } X_i \text{ applied with step } h / \#X_i",
            MAPS,
        ),
        text=SPLITTING_TEXT + " Type any scheme, e.g. ABOBA or OBABO, to compare orderings.",
    )
    minibatch = True

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


def _fixed(name: str, equation: str, text: str) -> KernelSpec:
    """The registry entry of the scheme ``SCHEMES[name]``: ``Splitting`` with its letters set."""
    scheme = SCHEMES[name]
    return kernel_spec(
        name,
        "splitting",
        P003,
        [*SG, FRICTION, TEMPERATURE],
        doc=f"Langevin splitting '{scheme}'. " + Splitting.__doc__,
        build=partial(Splitting, scheme=scheme),
        equation=aligned(equation, MAPS),
        text=SPLITTING_TEXT + text,
    )


SCHEME_SPECS = (
    _fixed(
        "baoab",
        r"\text{BAOAB:}\ \ B_{h/2}\,A_{h/2}\,O_h\,A_{h/2}\,B_{h/2}",
        " BAOAB (Leimkuhler & Matthews) costs one gradient per step.",
    ),
    _fixed(
        "gla1",
        r"\text{GLA1 (BAO):}\ \ B_h\,A_h\,O_h",
        " GLA1 is a first-order geometric Langevin algorithm "
        "(Bou-Rabee & Owhadi 2010) in TATi's letter order.",
    ),
    _fixed(
        "gla2",
        r"\text{GLA2 (BOBA):}\ \ B_{h/2}\,O_h\,B_{h/2}\,A_h",
        " GLA2 is an O step inside velocity Verlet (TATi's code; the paper gives no formula).",
    ),
)
