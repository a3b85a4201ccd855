"""MALA: the Metropolis-adjusted Langevin algorithm, on the full data."""

from __future__ import annotations

from .integrators import MHKernel, mala_log_ratio, overdamped
from .spec import MH, aligned, kernel_spec


class MALA(MHKernel):
    """w' = w - (eps/2) grad U(w) + sqrt(eps) eta, accepted with
    min(1, exp(U(w) - U(w') + log q(w | w') - log q(w' | w)))."""

    SPEC = kernel_spec(
        "mala",
        "mcmc",
        "Roberts & Tweedie (1996); an optional check beside the local-sampling benchmark",
        MH,
        equation=aligned(
            r"w' = w_t - \tfrac{\varepsilon}{2}\,\nabla U(w_t) + \sqrt{\varepsilon}\,\eta_t",
            r"w_{t+1} = w' \text{ with probability } A, \text{ else } w_t",
            r"A = \min\big(1,\ e^{\,U(w_t) - U(w') + \log q(w_t \mid w') - \log q(w' \mid w_t)}"
            r"\big)",
            r"\log q(b \mid a) = -\lVert b - a + \tfrac{\varepsilon}{2}\nabla U(a) \rVert^2"
            r" / (2\varepsilon)",
        ),
        text="The Metropolis-adjusted Langevin algorithm (Roberts & Tweedie 1996), one of the "
        "optional checks beside the local posterior sampling benchmark of Hitchcock & Hoogland "
        "(devinterp reports its acceptance; docs/methods/local-sampling.md): a ULA step used as a "
        "proposal and accepted or rejected by Metropolis-Hastings, so the chain samples exp(-U) "
        "exactly at any step size; too large a step shows as a low acceptance rate instead of a "
        "biased answer. Full-data gradients.",
        acceptance=(0.3, 0.97),  # optimum 0.574 (Roberts & Rosenthal 1998)
    )

    def update(self, state, target, batch, noise, trace=None):
        eps, w, grad = self.step_size, state.position, state.grad
        proposal = overdamped(w, grad, eps, noise["xi"])
        if trace is not None:
            trace["proposal"] = proposal
        e = self.energy(proposal, state, target, None)
        log_ratio = mala_log_ratio(w, proposal, state.U, e.value, grad, e.grad, eps)
        return self.settle(state, proposal, e, log_ratio, noise["u"])
