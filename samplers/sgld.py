"""SGLD (Hitchcock & Hoogland 2025, Alg. 1) and ULA: one update, on a minibatch or on the full data.

Notation as in the paper: eps = step_size, g = minibatch mean loss gradient (raw: no nbeta, no
prior), grad U = nbeta g + localization (w - w0) + prior, eta = the step's N(0, I) draw (``xi``).
ULA shares this file because it is SGLD's update with ``minibatch`` off, nothing else.
"""

from __future__ import annotations

from dataclasses import replace

from .base import Kernel
from .integrators import all_accepted, overdamped
from .spec import MH, P000, SG, aligned, kernel_spec

STEP_EQUATION = (
    r"w_{t+1} = w_t - \tfrac{\varepsilon}{2}\,\nabla U(w_t) + \sqrt{\varepsilon}\,\eta_t"
)
GRAD_U = r"\nabla U(w_t) = n\beta\, g_t + \gamma\,(w_t - w_0)"


class SGLD(Kernel):
    """Delta w = -(eps/2) grad U(w) + sqrt(eps) eta                          (Alg. 1)."""

    SPEC = kernel_spec(
        "sgld",
        "sgmcmc",
        P000 + ", Alg. 1",
        SG,
        equation=aligned(STEP_EQUATION, GRAD_U),
        text="Stochastic gradient Langevin dynamics (Welling & Teh 2011), Alg. 1 of the local "
        "posterior sampling benchmark (Hitchcock & Hoogland): an Euler-Maruyama step of the "
        "overdamped Langevin SDE whose drift is half the force and whose noise has variance "
        "eps, with the loss gradient taken on a minibatch (batch_size) when the target has "
        "data. There is no Metropolis correction, so a large step size biases the samples "
        "(too wide, or divergent), and minibatch gradient noise adds heat on top.",
    )
    minibatch = True

    def update(self, state, target, batch, noise):
        e = self.energy(state.position, state, target, batch)
        w = overdamped(state.position, e.grad, self.step_size, noise["xi"])
        return replace(state, position=w), e.loss, all_accepted(state)


class ULA(SGLD):
    """Unadjusted Langevin: SGLD's update on the full data."""

    SPEC = kernel_spec(
        "ula",
        "mcmc",
        P000,
        MH,
        equation=aligned(
            STEP_EQUATION, r"\nabla U(w_t) = n\beta\,\nabla L(w_t) + \gamma\,(w_t - w_0)"
        ),
        text="The unadjusted Langevin algorithm (Parisi 1981; eq. 2.3 of the local posterior "
        "sampling benchmark, Hitchcock & Hoogland): SGLD's update with the full-data gradient. "
        "It samples exp(-U) only as the step size goes to zero; at a finite step its "
        "stationary law is slightly off, which MALA's accept/reject step removes.",
    )
    minibatch = False
