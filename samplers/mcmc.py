"""Metropolis-Hastings kernels on the full data: MALA, HMC, random-walk Metropolis.

Each caches U and grad U at the current position in ``aux``. A proposal whose energy is NaN/Inf
is simply rejected (the chain stays valid), so MH kernels only flag chains that start non-finite.
"""

from __future__ import annotations

import math
from dataclasses import fields, replace

import torch
from torch import Tensor

from landscapes import Target
from landscapes.base import Batch

from .base import Energy, Kernel, State, normal, uniform

ENERGY = tuple(f.name for f in fields(Energy))  # names, as a constant that torch.compile traces


class MHKernel(Kernel):
    minibatch, fusable = False, True

    def start(self, state, target, generator):
        return self._cache(self.energy(state.position, state, target, None))

    @staticmethod
    def _cache(e: Energy) -> dict[str, Tensor]:
        """U, grad U and L at the position. L is left out where it is U itself (nbeta = 1 and
        nothing added, as on a potential): a compiled chunk allocates each carried tensor anew
        every step, and at 64 chains those allocations take longer than the arithmetic."""
        cache = {"U": e.value, "grad": e.grad}
        if e.loss is not e.value:
            cache["L"] = e.loss
        return cache

    @staticmethod
    def accept(log_ratio: Tensor, generator: torch.Generator) -> Tensor:
        """Accept with probability min(1, exp(log_ratio)); NaN ratios are rejected."""
        return torch.log(uniform(generator, log_ratio)) < log_ratio

    def settle(
        self,
        state: State,
        proposal: Tensor,
        e: Energy,
        log_ratio: Tensor,
        generator: torch.Generator,
    ) -> tuple[State, Tensor, Tensor]:
        ok = self.accept(log_ratio, generator)
        new_aux = self._cache(e)
        aux = {k: _pick(ok, new_aux[k], v) for k, v in state.aux.items()}
        position = torch.where(ok[:, None], proposal, state.position)
        loss = aux.get("L", aux["U"])
        return replace(state, position=position, aux=aux), loss, ok.to(position.dtype)


def log_q(to: Tensor, frm: Tensor, grad_frm: Tensor, eps: float) -> Tensor:
    """log density (up to a constant) of the Langevin proposal frm -> to."""
    r = to - frm + 0.5 * eps * grad_frm
    return -(r * r).sum(-1) / (2 * eps)


def mala_log_ratio(
    w: Tensor, proposal: Tensor, u: Tensor, u_new: Tensor, grad: Tensor, grad_new: Tensor, eps
) -> Tensor:
    """log of MALA's acceptance ratio for the Langevin move w -> proposal of step ``eps``."""
    return u - u_new + log_q(w, proposal, grad_new, eps) - log_q(proposal, w, grad, eps)


class MALA(MHKernel):
    """w' = w - (eps/2) grad U(w) + sqrt(eps) eta, accepted with
    min(1, exp(U(w) - U(w') + log q(w | w') - log q(w' | w)))."""

    name = "mala"

    def update(self, state: State, target: Target, batch: Batch, generator: torch.Generator):
        eps, w, grad = self.step_size, state.position, state.aux["grad"]
        proposal = w - 0.5 * eps * grad + math.sqrt(eps) * normal(generator, w)
        e = self.energy(proposal, state, target, None)
        log_ratio = mala_log_ratio(w, proposal, state.aux["U"], e.value, grad, e.grad, eps)
        return self.settle(state, proposal, e, log_ratio, generator)


class RWMH(MHKernel):
    """w' = w + eps eta, accepted with min(1, exp(U(w) - U(w')))."""

    name = "rwmh"

    def update(self, state: State, target: Target, batch: Batch, generator: torch.Generator):
        proposal = state.position + self.step_size * normal(generator, state.position)
        e = self.energy(proposal, state, target, None)
        return self.settle(state, proposal, e, state.aux["U"] - e.value, generator)


class HMC(MHKernel):
    """p ~ N(0, I); ``leapfrog_steps`` velocity-Verlet steps B(eps/2) A(eps) B(eps/2); accept with
    min(1, exp(H(w, p) - H(w', p'))), H = U + |p|^2 / 2. With ``jitter`` each chain draws its
    number of steps uniformly from 1..leapfrog_steps every iteration (masked, no host sync)."""

    name = "hmc"

    def update(self, state: State, target: Target, batch: Batch, generator: torch.Generator):
        eps, n = self.step_size, self.leapfrog_steps
        w, grad = state.position, state.aux["grad"]
        p0 = p = normal(generator, w)
        count = (uniform(generator, w[:, 0]) * n).floor() + 1 if self.jitter else None
        e = None
        for i in range(n):
            p_half = p - 0.5 * eps * grad
            w_new = w + eps * p_half
            e_new = self.energy(w_new, state, target, None)
            p_new = p_half - 0.5 * eps * e_new.grad
            if count is not None and i > 0:  # finished trajectories keep their end point
                live = i < count
                w_new, p_new = _pick(live, w_new, w), _pick(live, p_new, p)
                e_new = Energy(*(_pick(live, getattr(e_new, k), getattr(e, k)) for k in ENERGY))
            w, p, e, grad = w_new, p_new, e_new, e_new.grad
        log_ratio = (state.aux["U"] + 0.5 * (p0 * p0).sum(-1)) - (e.value + 0.5 * (p * p).sum(-1))
        return self.settle(state, w, e, log_ratio, generator)


def _pick(mask: Tensor, new: Tensor, old: Tensor) -> Tensor:
    return torch.where(mask.reshape(-1, *[1] * (new.ndim - 1)), new, old)
