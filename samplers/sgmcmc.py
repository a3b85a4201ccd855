"""Stochastic-gradient kernels of the local-sampling benchmark (reference 000, Algs 1-5).

Notation as in the paper: eps = step_size, g = minibatch mean loss gradient (raw: no nbeta, no
prior), grad U = nbeta g + localization (w - w0) + prior, eta = the step's N(0, I) draw (``xi``).
Typos fixed as the reference says: eps_t[i] uses v_hat[i]; bias corrections use the exponent
t + 1; v starts at 1.

RMSProp- and Adam-SGLD precondition with a metric G(w) = diag(eps_t) that changes with the chain,
and Langevin dynamics in such a metric needs the drift correction Gamma_i = sum_j dG_ij/dw_j to
sample exp(-U). The papers (and devinterp) drop it, and so do these kernels, so they are biased:
on reference 000's quadratic (E[nbeta L] = 1.4988) RMSProp-SGLD gives 1.661 at eps = 1e-6 and
1.756 at 3e-7, Adam-SGLD 1.624 at 1e-6 (tests/test_kernels.py pins these). The bias grows as the
step shrinks, the opposite of a discretisation error, so a smaller step does not remove it.
Runs with them carry the warning ``DROPPED_GAMMA``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from .base import Kernel, State

DROPPED_GAMMA = (
    "this preconditioned kernel drops the metric's divergence term (Gamma), as the papers do, so "
    "it samples a biased law even at small steps (the bias grows as the step shrinks: on the "
    "reference quadratic, E[nbeta L] = 1.66 at step 1e-6 and 1.76 at 3e-7 against 1.50); an LLC "
    "from it can be off by 10-20%: compare with sgld"
)


def _ones(state: State) -> Tensor:
    return torch.ones_like(state.position[:, 0])


class SGLD(Kernel):
    """Delta w = -(eps/2) grad U(w) + sqrt(eps) eta                          (Alg. 1)."""

    name, minibatch = "sgld", True
    batch_size: int | None = None

    def update(self, state, target, batch, noise):
        e = self.energy(state.position, state, target, batch)
        eps = self.step_size
        w = state.position - 0.5 * eps * e.grad + math.sqrt(eps) * noise["xi"]
        return replace(state, position=w), e.loss, _ones(state)


class ULA(SGLD):
    """SGLD on the full data: the unadjusted Langevin algorithm."""

    name, minibatch = "ula", False


@dataclass
class AdaptiveState(State):
    v: Tensor  # [C, d] EMA of the squared gradient
    t: Tensor  # [C, 1] steps taken: a tensor, so a compiled chunk carries the exponent
    m: Tensor | None = None  # [C, d] EMA of the gradient (Adam)


def preconditioned(eps: float, state: AdaptiveState, b: float, a: float) -> Tensor:
    """[C, d] eps / (sqrt(v_hat) + a) with the state's v (bias-corrected as a step would, from
    t = 1: before any step v is the initial 1)."""
    v_hat = state.v / (1 - b ** state.t.clamp(min=1))
    return eps / (v_hat.sqrt() + a)


class RMSPropSGLD(Kernel):
    """v = b v + (1-b) g^2,  v_hat = v / (1 - b^(t+1)),  eps_t = eps / (sqrt(v_hat) + a),
    Delta w = -(eps_t/2) grad U + sqrt(eps_t) eta                              (Alg. 3).
    The metric's divergence term Gamma is dropped, as the papers do (``DROPPED_GAMMA``): the
    chains sample a biased law, and the bias grows as the step shrinks (module doc)."""

    uses_loss_grad = True  # it adapts on grad L

    name, minibatch = "rmsprop-sgld", True
    caveats = {"dropped_gamma": DROPPED_GAMMA}
    batch_size: int | None = None
    a: float = 0.1
    b: float = 0.99

    def start(self, state, target, generator):
        w = state.position
        return AdaptiveState(**vars(state), v=torch.ones_like(w), t=w.new_zeros(w.shape[0], 1))

    def update(self, state, target, batch, noise):
        e = self.energy(state.position, state, target, batch)
        t = state.t + 1
        v = self.b * state.v + (1 - self.b) * e.loss_grad**2
        v_hat = v / (1 - self.b**t)
        eps_t = self.step_size / (v_hat.sqrt() + self.a)
        w = state.position - 0.5 * eps_t * e.grad + eps_t.sqrt() * noise["xi"]
        return replace(state, position=w, v=v, t=t), e.loss, _ones(state)

    def langevin_step(self, state):
        return preconditioned(self.step_size, state, self.b, self.a)


class AdamSGLD(Kernel):
    """m = b1 m + (1-b1) g,  v = b2 v + (1-b2) g^2,  bias-corrected m_hat, v_hat,
    eps_t = eps / (sqrt(v_hat) + a),
    Delta w = -(eps_t/2) (localization (w - w0) + nbeta m_hat) + sqrt(eps_t) eta   (Alg. 2).

    The metric's divergence term Gamma is dropped, as the papers do (``DROPPED_GAMMA``): the
    chains sample a biased law, and the bias grows as the step shrinks (module doc)."""

    uses_loss_grad = True  # it adapts on grad L

    name, minibatch = "adam-sgld", True
    caveats = {"dropped_gamma": DROPPED_GAMMA}
    batch_size: int | None = None
    a: float = 0.1
    b1: float = 0.9
    b2: float = 0.999

    def start(self, state, target, generator):
        w = state.position
        zeros, ones = torch.zeros_like(w), torch.ones_like(w)
        return AdaptiveState(**vars(state), v=ones, t=w.new_zeros(w.shape[0], 1), m=zeros)

    def update(self, state, target, batch, noise):
        e = self.energy(state.position, state, target, batch)
        t = state.t + 1
        m = self.b1 * state.m + (1 - self.b1) * e.loss_grad
        v = self.b2 * state.v + (1 - self.b2) * e.loss_grad**2
        m_hat, v_hat = m / (1 - self.b1**t), v / (1 - self.b2**t)
        eps_t = self.step_size / (v_hat.sqrt() + self.a)
        nbeta = self.nbeta_for(target)
        drift = e.grad - nbeta * e.loss_grad + nbeta * m_hat  # the momentum replaces g
        w = state.position - 0.5 * eps_t * drift + eps_t.sqrt() * noise["xi"]
        return replace(state, position=w, m=m, v=v, t=t), e.loss, _ones(state)

    def langevin_step(self, state):
        return preconditioned(self.step_size, state, self.b2, self.a)


@dataclass
class MomentumState(State):
    p: Tensor  # [C, d]
    alpha: Tensor | None = None  # [C] SGNHT's thermostat (the friction it adapts)


def kinetic(state: MomentumState) -> dict[str, Tensor]:
    return {"kinetic": 0.5 * (state.p * state.p).sum(-1)}


class SGHMC(Kernel):
    """Default ("corrected"): p <- p - eps grad U - alpha p + sqrt(2 alpha eps) eta;  w <- w + p.
    variant="paper" (Alg. 4 as printed): force eps/2 and w moved by the OLD momentum, which
    samples at twice the temperature (reference 000, section 1). p_0 ~ N(0, eps I)."""

    name, minibatch = "sghmc", True
    batch_size: int | None = None
    friction: float = 0.1
    variant: str = "corrected"

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
        return replace(state, position=w, p=p_new), e.loss, _ones(state)

    observe = staticmethod(kinetic)


class SGNHT(Kernel):
    """SGHMC whose friction alpha_t follows a Nose-Hoover thermostat (Alg. 5):
    p <- p - eps grad U - alpha p + sqrt(2 alpha_0 eps) eta,  w <- w + p,
    alpha <- alpha + |p|^2 / d - eps / (1 - alpha_0 / 2) with the new p (a fixed diffusion,
    as Ding et al. and devinterp).

    The thermostat's target: with Euler friction, p <- (1 - alpha) p + sqrt(2 alpha_0 eps) eta
    has the stationary variance 2 alpha_0 eps / (1 - (1 - alpha)^2) = alpha_0 eps / (alpha (1 -
    alpha / 2)). The chain is at temperature 1 when the friction balances the diffusion, alpha =
    alpha_0 (SGHMC), where that variance is eps / (1 - alpha_0 / 2); so the thermostat drives
    |p|^2 / d there. The printed target eps settles alpha at alpha_0 / (1 - alpha_0 / 2) = 0.105
    and samples ~5% cold at every step size (position variance 0.95 on N(0, I)); alpha relaxes
    over ~alpha_0 / eps steps, so only long runs show it.

    variant="paper", as printed: force eps/2, w moved by the old p, noise sqrt(2 alpha_t eps)
    and alpha <- alpha + |p_old| / d - eps (it can diverge; kept to compare)."""

    name, minibatch = "sgnht", True
    batch_size: int | None = None
    friction: float = 0.1
    variant: str = "corrected"

    def start(self, state, target, generator):
        state = SGHMC.start(self, state, target, generator)
        return replace(state, alpha=torch.full_like(state.position[:, 0], self.friction))

    def update(self, state, target, batch, noise):
        e = self.energy(state.position, state, target, batch)
        eps, p, alpha, d = self.step_size, state.p, state.alpha[:, None], state.p.shape[1]
        if self.variant == "paper":
            p_new = p - 0.5 * eps * e.grad - alpha * p + (2 * alpha * eps).sqrt() * noise["xi"]
            w, heat, goal = state.position + p, torch.linalg.vector_norm(p, dim=-1) / d, eps
        else:
            p_new = p - eps * e.grad - alpha * p + (2 * self.friction * eps) ** 0.5 * noise["xi"]
            w, heat = state.position + p_new, (p_new * p_new).sum(-1) / d
            goal = eps / (1 - 0.5 * self.friction)  # |p|^2 / d at alpha = alpha_0 (docstring)
        alpha_new = state.alpha + heat - goal
        return replace(state, position=w, p=p_new, alpha=alpha_new), e.loss, _ones(state)

    def observe(self, state):
        return {**kinetic(state), "thermostat": state.alpha}
