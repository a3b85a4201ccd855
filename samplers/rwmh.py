"""Random-walk Metropolis (Metropolis et al. 1953)."""

from __future__ import annotations

from .integrators import MHKernel
from .spec import MH, aligned, kernel_spec


class RWMH(MHKernel):
    """w' = w + eps eta, accepted with min(1, exp(U(w) - U(w')))."""

    SPEC = kernel_spec(
        "rwmh",
        "mcmc",
        "Metropolis et al. (1953)",
        MH,
        equation=aligned(
            r"w' = w_t + \varepsilon\,\eta_t",
            r"w_{t+1} = w' \text{ with probability } A, \text{ else } w_t",
            r"A = \min\big(1,\ e^{\,U(w_t) - U(w')}\big)",
        ),
        text="Random-walk Metropolis (Metropolis et al. 1953): a Gaussian proposal of scale eps "
        "around the current point, accepted with the ratio of target densities. It needs no "
        "gradient and is exact at any step, but explores by diffusion: in d dimensions the step "
        "must shrink like d^(-1/2) to keep a useful acceptance (about 0.23 is the classic "
        "optimum in high dimension).",
        acceptance=(0.1, 0.8),  # optimum 0.234-0.44 (Roberts, Gelman & Gilks 1997)
    )

    def update(self, state, target, batch, noise, trace=None):
        proposal = state.position + self.step_size * noise["xi"]
        if trace is not None:
            trace["proposal"] = proposal
        e = self.energy(proposal, state, target, None)
        return self.settle(state, proposal, e, state.U - e.value, noise["u"])
