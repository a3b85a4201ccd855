"""MALA: the Metropolis-adjusted Langevin algorithm, on the full data."""

from __future__ import annotations

from .integrators import MHKernel, mala_log_ratio, overdamped
from .spec import LOC, NBETA, aligned, kernel_spec
from .warmup import Adaptive, adapting_params


class MALA(Adaptive, MHKernel):
    """w' = w - (eps/2) grad U(w) + sqrt(eps) eta, accepted with
    min(1, exp(U(w) - U(w') + log q(w | w') - log q(w' | w))). With ``step_size: auto`` the
    burn-in adapts eps and a diagonal mass matrix M (samplers.warmup): the move is the
    preconditioned w' = w - (eps/2) M^-1 grad U + sqrt(eps) M^-1/2 eta, a per-coordinate step
    eps M^-1."""

    SPEC = kernel_spec(
        "mala",
        "mcmc",
        "Roberts & Tweedie (1996); an optional check beside the local-sampling benchmark",
        (
            # Roberts & Rosenthal (1998): 0.574 is the optimal acceptance in high dimension
            *adapting_params(1e-3, 0.574, "Roberts & Rosenthal 1998", dense=False),
            NBETA,
            LOC,
        ),
        equation=aligned(
            r"w' = w_t - \tfrac{\varepsilon}{2}\,\nabla U(w_t) + \sqrt{\varepsilon}\,\eta_t",
            r"w_{t+1} = w' \text{ with probability } A, \text{ else } w_t",
            r"A = \min\big(1,\ e^{\,U(w_t) - U(w') + \log q(w_t \mid w') - \log q(w' \mid w_t)}"
            r"\big)",
            r"\log q(b \mid a) = -\lVert b - a + \tfrac{\varepsilon}{2}\nabla U(a) \rVert^2"
            r" / (2\varepsilon)",
            r"\text{step\_size auto: } \varepsilon \to \varepsilon M^{-1} \text{ per coordinate},",
            r"\quad M^{-1} \text{ and } \varepsilon \text{ set in the burn-in}",
        ),
        text="The Metropolis-adjusted Langevin algorithm (Roberts & Tweedie 1996), one of the "
        "optional checks beside the local posterior sampling benchmark of Hitchcock & Hoogland "
        "(devinterp reports its acceptance; docs/methods/local-sampling.md): a ULA step used as a "
        "proposal and accepted or rejected by Metropolis-Hastings, so the chain samples exp(-U) "
        "exactly at any step size; too large a step shows as a low acceptance rate instead of a "
        "biased answer. Full-data gradients. With step_size auto the burn-in tunes the step "
        "toward an acceptance of 0.574 and a diagonal preconditioner to the target's scales "
        "(Stan's warm-up, pooled over the chains, or each chain alone with adapt chain); both "
        "stay fixed after it.",
        acceptance=(0.3, 0.97),  # optimum 0.574 (Roberts & Rosenthal 1998)
    )

    leapfrog_squared = True  # one leapfrog of step h with a fresh momentum is MALA's eps = h^2

    def start(self, state, target, generator):
        state = super().start(state, target, generator)
        return self.adapting_start(state, target, generator) if self.auto else state

    def update(self, state, target, batch, noise, trace=None):
        (eps, inv_mass), w, grad = self.stepping(state), state.position, state.grad
        if inv_mass is not None:  # the metric: a step per coordinate, eps M^-1 ([C, d])
            eps = eps * inv_mass
        proposal = overdamped(w, grad, eps, noise["xi"])
        if trace is not None:
            trace["proposal"] = proposal
        e = self.energy(proposal, state, target, None)
        log_ratio = mala_log_ratio(w, proposal, state.U, e.value, grad, e.grad, eps)
        new, loss, accepted = self.settle(state, proposal, e, log_ratio, noise["u"])
        if self.auto:
            new = self.adapted(state, new, log_ratio.clamp(max=0.0).exp())
        return new, loss, accepted
