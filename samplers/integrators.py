"""The pieces kernels share: the overdamped Langevin step and the Metropolis-Hastings accept.

``overdamped`` is the Euler-Maruyama step w <- w - (eps/2) grad + sqrt(eps) eta that SGLD, ULA,
the preconditioned SGLDs and MALA's proposal take. ``MHKernel`` is the base of the MH kernels on
the full data (MALA, HMC, random-walk and adaptive Metropolis, reprior-LMC, NUTS): each caches U
and grad U at the current position in its state. A proposal whose energy is NaN/Inf is simply
rejected (the chain stays valid), so MH kernels only flag chains that start non-finite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from .base import Draw, Energy, Kernel, State


def overdamped(w: Tensor, drift: Tensor, eps: float | Tensor, xi: Tensor) -> Tensor:
    """w - (eps/2) drift + sqrt(eps) xi; ``eps`` a float or a per-coordinate step ([C, d])."""
    root = eps.sqrt() if isinstance(eps, Tensor) else math.sqrt(eps)
    return w - 0.5 * eps * drift + root * xi


def all_accepted(state: State) -> Tensor:
    """[C] ones: the acceptance a kernel without an MH test reports."""
    return state.position.new_ones(state.position.shape[0])


@dataclass
class MHState(State):
    U: Tensor  # [C] the energy at the position
    grad: Tensor  # [C, d] its gradient
    loss: Tensor  # [C] the loss L there (U itself on a potential)


class MHKernel(Kernel):
    minibatch = False
    traces = True  # ``update(..., trace=dict)`` reports the proposal (and HMC's path)

    def noise(self, chains, dim):
        return {"xi": Draw("normal", (chains, dim)), "u": Draw("uniform", (chains,))}

    def start(self, state, target, generator):
        e = self.energy(state.position, state, target, None)
        return MHState(**vars(state), U=e.value, grad=e.grad, loss=e.loss)

    @staticmethod
    def settle(
        state: MHState, proposal: Tensor, e: Energy, log_ratio: Tensor, u: Tensor
    ) -> tuple[MHState, Tensor, Tensor]:
        """Accept with probability min(1, exp(log_ratio)) (NaN ratios are rejected)."""
        return MHKernel.move(state, proposal, e, torch.log(u) < log_ratio)

    @staticmethod
    def move(
        state: MHState, proposal: Tensor, e: Energy, ok: Tensor
    ) -> tuple[MHState, Tensor, Tensor]:
        """Chains where ``ok`` move to ``proposal`` (whose energy is ``e``); the rest stay."""
        new = replace(
            state,
            position=torch.where(ok[:, None], proposal, state.position),
            U=torch.where(ok, e.value, state.U),
            grad=torch.where(ok[:, None], e.grad, state.grad),
            loss=torch.where(ok, e.loss, state.loss),
        )
        return new, new.loss, ok.to(proposal.dtype)


def log_q(to: Tensor, frm: Tensor, grad_frm: Tensor, eps: float | Tensor) -> Tensor:
    """log density (up to a constant) of the Langevin proposal frm -> to; ``eps`` a float or a
    per-coordinate step ([C, d], the same both ways: its normalising constants cancel)."""
    r = to - frm + 0.5 * eps * grad_frm
    return -(r * r / (2 * eps)).sum(-1)


def mala_log_ratio(
    w: Tensor, proposal: Tensor, u: Tensor, u_new: Tensor, grad: Tensor, grad_new: Tensor, eps
) -> Tensor:
    """log of MALA's acceptance ratio for the Langevin move w -> proposal of step ``eps``."""
    return u - u_new + log_q(w, proposal, grad_new, eps) - log_q(proposal, w, grad, eps)
