"""Metropolis-Hastings kernels on the full data: MALA, HMC, random-walk and adaptive Metropolis.

Each caches U and grad U at the current position in its state. A proposal whose energy is NaN/Inf
is simply rejected (the chain stays valid), so MH kernels only flag chains that start non-finite.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from .base import Draw, Energy, Kernel, State


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


class MALA(MHKernel):
    """w' = w - (eps/2) grad U(w) + sqrt(eps) eta, accepted with
    min(1, exp(U(w) - U(w') + log q(w | w') - log q(w' | w)))."""

    name = "mala"

    def update(self, state, target, batch, noise, trace=None):
        eps, w, grad = self.step_size, state.position, state.grad
        proposal = w - 0.5 * eps * grad + math.sqrt(eps) * noise["xi"]
        if trace is not None:
            trace["proposal"] = proposal
        e = self.energy(proposal, state, target, None)
        log_ratio = mala_log_ratio(w, proposal, state.U, e.value, grad, e.grad, eps)
        return self.settle(state, proposal, e, log_ratio, noise["u"])


class RWMH(MHKernel):
    """w' = w + eps eta, accepted with min(1, exp(U(w) - U(w')))."""

    name = "rwmh"

    def update(self, state, target, batch, noise, trace=None):
        proposal = state.position + self.step_size * noise["xi"]
        if trace is not None:
            trace["proposal"] = proposal
        e = self.energy(proposal, state, target, None)
        return self.settle(state, proposal, e, state.U - e.value, noise["u"])


class HMC(MHKernel):
    """p ~ N(0, I); ``leapfrog_steps`` velocity-Verlet steps B(eps/2) A(eps) B(eps/2); accept with
    min(1, exp(H(w, p) - H(w', p'))), H = U + |p|^2 / 2. With ``jitter`` (the default) each chain
    draws its number of steps uniformly from 1..leapfrog_steps every iteration (masked, no host
    sync): a fixed length resonates when a mode's phase (omega L eps; the leapfrog's is
    L arccos(1 - (eps omega)^2 / 2)) is near a multiple of pi: the trajectory ends near its start
    or its mirror image, so that mode barely mixes and a far start stays far. ``jitter=False`` is
    the fixed-length textbook HMC."""

    name = "hmc"
    leapfrog_steps: int = 10
    jitter: bool = True

    def noise(self, chains, dim):
        draws = super().noise(chains, dim)  # xi: the momentum
        if self.jitter:
            draws["count"] = Draw("uniform", (chains,))
        return draws

    def update(self, state, target, batch, noise, trace=None):
        eps, n = self.step_size, self.leapfrog_steps
        w, grad, e = state.position, state.grad, None
        path = [w]
        p0 = p = noise["xi"]
        count = (noise["count"] * n).floor() + 1 if self.jitter else None
        for i in range(n):
            p_half = p - 0.5 * eps * grad
            w_new = w + eps * p_half
            e_new = self.energy(w_new, state, target, None)
            p_new = p_half - 0.5 * eps * e_new.grad
            if count is not None and i > 0:  # finished trajectories keep their end point
                live = i < count
                w_new, p_new = _pick(live, w_new, w), _pick(live, p_new, p)
                e_new = Energy(
                    *(
                        _pick(live, a, b)
                        for a, b in zip(vars(e_new).values(), vars(e).values(), strict=True)
                    )
                )
            w, p, e, grad = w_new, p_new, e_new, e_new.grad
            path.append(w)
        if trace is not None:  # a jittered trajectory's points past its end repeat the end
            trace["proposal"], trace["path"] = w, torch.stack(path, 1)
        log_ratio = (state.U + 0.5 * (p0 * p0).sum(-1)) - (e.value + 0.5 * (p * p).sum(-1))
        return self.settle(state, w, e, log_ratio, noise["u"])


def _pick(mask: Tensor, new: Tensor | None, old: Tensor | None) -> Tensor | None:
    if new is None:  # a grad L the kernel did not ask for
        return None
    return torch.where(mask.reshape(-1, *[1] * (new.ndim - 1)), new, old)


@dataclass
class AdaptiveState(MHState):
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

    name = "adaptive-mh"
    adapt_start: int = 100
    epsilon: float = 1e-6

    def start(self, state, target, generator):
        mh = super().start(state, target, generator)
        w = state.position
        chains, dim = w.shape
        return AdaptiveState(
            **vars(mh),
            mean=w.clone(),
            cov=w.new_zeros(chains, dim, dim),
            count=w.new_ones(chains),
        )

    def proposal_factor(self, state: AdaptiveState) -> Tensor:
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

    name = "reprior-lmc"
    traces = False
    refresh: float = 0.1
    mh: bool = True
    target_accept: float = 0.9
    warmup: int = 1000

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
