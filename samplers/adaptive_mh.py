"""Adaptive Metropolis (Haario, Saksman & Tamminen 2001), each chain learning its own proposal."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from .integrators import MHKernel, MHState
from .spec import LOC, NBETA, Param, aligned, kernel_spec


@dataclass
class AdaptiveMHState(MHState):
    mean: Tensor  # [C, d] the mean of the chain's points so far, x_0..x_{t-1}
    cov: Tensor  # [C, d, d] their sample covariance (divided by t - 1; 0 while t = 1)
    count: Tensor  # [C] t: how many points the chain has visited (1 at the start)


class AdaptiveMH(MHKernel):
    """Adaptive Metropolis (Haario, Saksman & Tamminen 2001), per chain: propose
    w' = w + L_t eta, L_t L_t^T = C_t, accepted with min(1, exp(U(w) - U(w'))), where
    C_t = eps^2 I while t <= t0 (``adapt_start``) and C_t = s_d Cov(x_0..x_{t-1}) + s_d epsilon I
    after, s_d = 2.4^2 / d; the chain's mean and covariance follow it by Welford's recursion.
    The chain is not Markov (C_t reads its past): the paper proves that its averages converge
    to the target's, as the adaptation's changes shrink like 1/t, not that each step keeps the
    target. Chains started at exact draws drift off them for a while once they adapt, because a
    proposal learnt from a short history depends on where the chain is (on the banana and the
    funnel, KS D 0.06-0.09 at 2000 chains after 100 adapted steps; tests/test_new_kernels.py)."""

    SPEC = kernel_spec(
        "adaptive-mh",
        "mcmc",
        "Haario, Saksman & Tamminen (2001), Bernoulli 7",
        [
            Param(
                "step_size",
                "float",
                0.1,
                "initial proposal scale: C_0 = step_size^2 I until adapt_start",
                1e-12,
                10.0,
            ),
            NBETA,
            LOC,
            Param(
                "adapt_start",
                "int",
                100,
                "t0: steps with the initial proposal before the chain's covariance is used",
                1,
                10_000_000,
            ),
            Param(
                "epsilon",
                "float",
                1e-6,
                "epsilon of the s_d epsilon I added to the adapted covariance (> 0)",
                1e-12,
                1e6,
            ),
        ],
        equation=aligned(
            r"w' = w_t + L_t\,\eta_t,\quad L_t L_t^\top = C_t",
            r"C_t = \begin{cases} \varepsilon^2 I & t \le t_0 \\"
            r" s_d\,\mathrm{Cov}(w_0, \dots, w_{t-1}) + s_d\,\epsilon\,I & t > t_0"
            r" \end{cases},\quad s_d = 2.4^2 / d",
            r"w_{t+1} = w' \text{ with probability } \min\big(1,\ e^{\,U(w_t) - U(w')}\big),"
            r" \text{ else } w_t",
        ),
        text="Adaptive Metropolis (Haario, Saksman & Tamminen 2001): random-walk Metropolis whose "
        "Gaussian proposal learns its shape from the chain's own history. For the first "
        "t0 = adapt_start steps it proposes with eps^2 I; after that, with the covariance of "
        "every point the chain has visited, scaled by s_d = 2.4^2 / d (the optimal random-walk "
        "scale for a Gaussian target) plus a small s_d epsilon I that keeps it nonsingular. "
        "Each chain keeps its own running mean and covariance, updated at every step by "
        "Welford's recursion, and takes a Cholesky factor of its C_t. The chain is no longer "
        "Markov, yet because the adaptation's changes shrink like 1/t its averages still "
        "converge to the target's (the paper's theorem); on a correlated target it ends up "
        "proposing along the correlation, where plain random-walk Metropolis crawls.",
        acceptance=(0.1, 0.8),  # a random walk: RWMH's band
    )

    def start(self, state, target, generator):
        mh = super().start(state, target, generator)
        w = state.position
        chains, dim = w.shape
        return AdaptiveMHState(
            **vars(mh),
            mean=w.clone(),
            cov=w.new_zeros(chains, dim, dim),
            count=w.new_ones(chains),
        )

    def proposal_factor(self, state: AdaptiveMHState) -> Tensor:
        """[C, d, d] lower Cholesky factors of each chain's C_t (batched). A C_t that rounding
        left not positive definite falls back to the square root of its diagonal."""
        t, dim = state.count, state.position.shape[1]
        eye = torch.eye(dim, dtype=state.cov.dtype, device=state.cov.device)
        s_d = 2.4**2 / dim
        cov = torch.where(
            (t > self.adapt_start)[:, None, None],
            s_d * state.cov + (s_d * self.epsilon) * eye,
            self.step_size**2 * eye,
        )
        factor, failed = torch.linalg.cholesky_ex(cov)
        diagonal = torch.diag_embed(torch.diagonal(cov, dim1=-2, dim2=-1).clamp_min(0).sqrt())
        return torch.where((failed != 0)[:, None, None], diagonal, factor)

    def update(self, state, target, batch, noise, trace=None):
        factor = self.proposal_factor(state)
        proposal = state.position + (factor @ noise["xi"][..., None])[..., 0]
        if trace is not None:
            trace["proposal"] = proposal
        e = self.energy(proposal, state, target, None)
        new, loss, accepted = self.settle(state, proposal, e, state.U - e.value, noise["u"])
        # Welford: x_t joins the chain's t points. With delta = x_t - mean_t, the mean moves by
        # delta / (t + 1) and M2 = (t - 1) cov by delta (x_t - mean_{t+1})^T = t/(t+1) delta delta^T
        t, x = state.count[:, None, None], new.position
        delta = x - state.mean
        mean = state.mean + delta / (t[:, 0] + 1)
        cov = (t - 1) / t * state.cov + delta[:, :, None] * delta[:, None, :] / (t + 1)
        return replace(new, mean=mean, cov=cov, count=state.count + 1), loss, accepted
