"""Stochastic-gradient kernels of the local-sampling benchmark (reference 000, Algs 1-5).

Notation as in the paper: eps = step_size, g = minibatch mean loss gradient (raw: no nbeta, no
prior), grad U = nbeta g + localization (w - w0) + prior, eta = the step's N(0, I) draw (``xi``).
Typos fixed as the reference says: eps_t[i] uses v_hat[i]; bias corrections use the exponent
t + 1; v starts at 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from .base import Kernel, State


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


class RMSPropSGLD(Kernel):
    """v = b v + (1-b) g^2,  v_hat = v / (1 - b^(t+1)),  eps_t = eps / (sqrt(v_hat) + a),
    Delta w = -(eps_t/2) grad U + sqrt(eps_t) eta                              (Alg. 3)."""

    name, minibatch = "rmsprop-sgld", True
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


class AdamSGLD(Kernel):
    """m = b1 m + (1-b1) g,  v = b2 v + (1-b2) g^2,  bias-corrected m_hat, v_hat,
    eps_t = eps / (sqrt(v_hat) + a),
    Delta w = -(eps_t/2) (localization (w - w0) + nbeta m_hat) + sqrt(eps_t) eta   (Alg. 2)."""

    name, minibatch = "adam-sgld", True
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
    alpha <- alpha + |p|^2 / d - eps with the new p (a fixed diffusion, as Ding et al. and
    devinterp). variant="paper", as printed: force eps/2, w moved by the old p, noise
    sqrt(2 alpha_t eps) and alpha <- alpha + |p_old| / d - eps (it can diverge; kept to compare)."""

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
            w, heat = state.position + p, torch.linalg.vector_norm(p, dim=-1) / d
        else:
            p_new = p - eps * e.grad - alpha * p + (2 * self.friction * eps) ** 0.5 * noise["xi"]
            w, heat = state.position + p_new, (p_new * p_new).sum(-1) / d
        alpha_new = state.alpha + heat - eps
        return replace(state, position=w, p=p_new, alpha=alpha_new), e.loss, _ones(state)

    def observe(self, state):
        return {**kinetic(state), "thermostat": state.alpha}
