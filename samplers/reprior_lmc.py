"""Underdamped Langevin Monte Carlo as Hron et al. (2022, Sec. 4.1.3) ran it."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from .integrators import MHKernel, MHState
from .spec import LOC, NBETA, P002, Param, aligned, kernel_spec


@dataclass
class LMCState(MHState):
    momentum: Tensor  # [C, d]
    log_step: Tensor  # [C] log eps, adapted per chain during the warm-up
    count: Tensor  # [C] steps taken
    accept_prob: Tensor  # [C] the last step's min(1, exp(log a))


class RepriorLMC(MHKernel):
    """Underdamped Langevin Monte Carlo (Hron et al. 2022, Sec. 4: HMC with one leapfrog step
    and a partial momentum refresh), each step:
    m <- sqrt(1 - beta) m + sqrt(beta) xi;  m <- m - (eps/2) grad U(w);  w' = w + eps m;
    m' = m - (eps/2) grad U(w');  accept (w', m') with min(1, exp(U(w) - U(w') + |m|^2/2 -
    |m'|^2/2)), else keep w and flip the momentum, m <- -m. ``mh=False`` skips the test (the
    paper's runs: every finite proposal is accepted) and records the acceptance probability
    instead, the quantity the paper keeps above 0.98. For the first ``warmup`` steps each
    chain adapts log eps by Robbins-Monro toward ``target_accept`` (log eps += (t + 1)^-0.6
    (a_t - target)), then keeps it: those steps belong in the burn-in."""

    SPEC = kernel_spec(
        "reprior-lmc",
        "mcmc",
        P002 + ", Sec. 4",
        [
            Param(
                "step_size",
                "float",
                0.01,
                "leapfrog step epsilon (initial, with warm-up)",
                1e-12,
                10.0,
            ),
            NBETA,
            LOC,
            Param(
                "refresh", "float", 0.1, "beta: the momentum's refresh fraction a step", 1e-6, 1.0
            ),
            Param("mh", "bool", True, "Metropolis-Hastings test (off: skip MH, as the paper ran)"),
            Param(
                "target_accept",
                "float",
                0.9,
                "acceptance probability the warm-up adapts the step toward",
                0.05,
                0.999,
            ),
            Param(
                "warmup",
                "int",
                1000,
                "steps that adapt the step size (0: keep step_size); put them in the burn-in",
                0,
                10_000_000,
                unit="steps",
            ),
        ],
        equation=aligned(
            r"m \leftarrow \sqrt{1 - \beta}\,m + \sqrt{\beta}\,\xi,\quad"
            r" \xi \sim \mathcal{N}(0, I)",
            r"m \leftarrow m - \tfrac{\varepsilon}{2}\nabla U(w),\ \ w' = w + \varepsilon\,m,"
            r"\ \ m' = m - \tfrac{\varepsilon}{2}\nabla U(w')",
            r"(w, m) \leftarrow (w', m') \text{ with probability } \min\big(1,\ "
            r"e^{\,H(w, m) - H(w', m')}\big), \text{ else } (w, -m)",
            r"\log \varepsilon \leftarrow \log \varepsilon + (t+1)^{-0.6}\,(a_t - a^\ast)"
            r" \quad (t < \text{warmup})",
        ),
        text="Underdamped Langevin Monte Carlo as Hron, Novak, Pennington & Sohl-Dickstein ran it "
        '("Wide Bayesian neural networks have a simple weight posterior", 2022, Sec. 4.1.3): '
        "Hamiltonian Monte Carlo with one leapfrog step whose momentum is only partly refreshed "
        "each step (refresh beta), so it keeps moving in one direction across many steps. A "
        "Metropolis test on the energy error keeps it exact; a rejection flips the momentum "
        "(Horowitz), which undoes that persistence, so the step should be accepted often (about "
        "0.9). With mh off every proposal is taken, as in the paper, whose acceptance probability "
        "then only measures the bias it keeps above 0.98. During the warm-up each chain adapts its "
        "step toward target_accept; afterwards the step is fixed. On ntk-fcn with parametrisation "
        "reprior it moves phi, where a wide network's posterior is nearly its N(0, I) prior, so "
        "the step can grow with the width.",
        # one leapfrog step a move: a rejection flips the momentum and undoes the persistence the
        # partial refresh buys (Hron et al. tune for >= 0.98 without MH, Sec. 4.1.3; ~0.9 with it:
        # docs/methods/wide-networks.md)
        acceptance=(0.6, 1.0),
    )
    traces = False

    def __init__(self, **params):
        super().__init__(**params)
        self.fractional_acceptance = not self.mh  # "accepted" is then the probability

    def start(self, state, target, generator):
        mh = super().start(state, target, generator)
        w = state.position
        momentum = torch.randn(w.shape, generator=generator, device=w.device, dtype=w.dtype)
        return LMCState(
            **vars(mh),
            momentum=momentum,
            log_step=w.new_full((w.shape[0],), math.log(self.step_size)),
            count=w.new_zeros(w.shape[0]),
            accept_prob=w.new_ones(w.shape[0]),
        )

    def observe(self, state):
        return {"accept_prob": state.accept_prob, "step_size": torch.exp(state.log_step)}

    def update(self, state, target, batch, noise, trace=None):
        beta, eps = self.refresh, torch.exp(state.log_step)[:, None]
        m = math.sqrt(1 - beta) * state.momentum + math.sqrt(beta) * noise["xi"]
        m_half = m - 0.5 * eps * state.grad
        proposal = state.position + eps * m_half
        e = self.energy(proposal, state, target, None)
        m_new = m_half - 0.5 * eps * e.grad
        log_a = state.U - e.value + 0.5 * ((m * m).sum(-1) - (m_new * m_new).sum(-1))
        prob = torch.nan_to_num(torch.exp(log_a.clamp(max=0.0)), nan=0.0)  # NaN/Inf: 0
        if self.mh:
            ok = torch.log(noise["u"]) < log_a
        else:
            ok = torch.isfinite(e.value) & torch.isfinite(e.grad).all(-1)
        new, loss, accepted = self.move(state, proposal, e, ok)
        adapting = state.count < self.warmup
        rate = (state.count + 1) ** -0.6
        log_step = torch.where(
            adapting, state.log_step + rate * (prob - self.target_accept), state.log_step
        )
        new = replace(
            new,
            momentum=torch.where(ok[:, None], m_new, -m),
            log_step=log_step,
            count=state.count + 1,
            accept_prob=prob,
        )
        return new, loss, accepted if self.mh else prob
