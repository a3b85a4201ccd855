"""SGHMC (Hitchcock & Hoogland 2025, Alg. 4): stochastic-gradient Langevin with a momentum and
friction.

``MomentumState`` and ``kinetic`` are shared with SGNHT, SGHMC with a thermostat (``sgnht``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from .base import Kernel, State
from .integrators import all_accepted
from .spec import P000, SG, VARIANT, Param, aligned, kernel_spec


@dataclass
class MomentumState(State):
    p: Tensor  # [C, d]
    alpha: Tensor | None = None  # [C] SGNHT's thermostat (the friction it adapts)


def kinetic(state: MomentumState) -> dict[str, Tensor]:
    return {"kinetic": 0.5 * (state.p * state.p).sum(-1)}


class SGHMC(Kernel):
    """Default ("corrected"): p <- p - eps grad U - alpha p + sqrt(2 alpha eps) eta;  w <- w + p.
    variant="paper" (Alg. 4 as printed): force eps/2 and w moved by the OLD momentum, which
    samples at twice the temperature (docs/methods/local-sampling.md). p_0 ~ N(0, eps I)."""

    SPEC = kernel_spec(
        "sghmc",
        "sgmcmc",
        P000 + ", Alg. 4",
        [
            *SG,
            Param(
                "friction",
                "float",
                0.1,
                "friction alpha (fraction of p damped per step)",
                1e-9,
                1.0,
            ),
            VARIANT,
        ],
        equation=aligned(
            r"p_{t+1} = p_t - \varepsilon\,\nabla U(w_t) - \alpha\,p_t"
            r" + \sqrt{2\alpha\varepsilon}\,\eta_t",
            r"w_{t+1} = w_t + p_{t+1},\quad p_0 \sim \mathcal{N}(0, \varepsilon I)",
        ),
        text="Stochastic gradient Hamiltonian Monte Carlo (Chen et al. 2014), Alg. 4 of the local "
        "posterior sampling benchmark (Hitchcock & Hoogland): a momentum p with friction alpha "
        "and matching noise, so the chain coasts through flat regions instead of diffusing. "
        "Default 'corrected' form shown: force eps and the position moved by the new momentum, "
        "which samples exp(-U). variant='paper' uses the printed force eps/2 and the old "
        "momentum, which samples at twice the temperature (kept for comparison).",
    )
    minibatch = True

    def start(self, state, target, generator):
        w = state.position
        p0 = torch.randn(w.shape, generator=generator, device=w.device, dtype=w.dtype)
        return MomentumState(**vars(state), p=math.sqrt(self.step_size) * p0)

    def update(self, state, target, batch, noise):
        e = self.energy(state.position, state, target, batch)
        eps, p, alpha = self.step_size, state.p, self.friction
        kick = (2 * alpha * eps) ** 0.5 * noise["xi"]
        if self.variant == "paper":
            p_new, w = p - 0.5 * eps * e.grad - alpha * p + kick, state.position + p
        else:
            p_new = p - eps * e.grad - alpha * p + kick
            w = state.position + p_new
        return replace(state, position=w, p=p_new), e.loss, all_accepted(state)

    observe = staticmethod(kinetic)
