"""Stochastic-gradient kernels of the local-sampling benchmark (reference 000, Algs 1-5).

Notation as in the paper: eps = step_size, g = minibatch mean loss gradient (raw: no nbeta, no
prior), grad U = nbeta g + localization (w - w0) + prior. Typos fixed as the reference says:
eps_t[i] uses v_hat[i]; bias corrections use the exponent t + 1; v starts at 1.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch import Tensor

from landscapes import Target
from landscapes.base import Batch

from .base import Kernel, State, normal


def _ones(state: State) -> Tensor:
    return torch.ones(
        state.position.shape[0], dtype=state.position.dtype, device=state.position.device
    )


def _steps(state: State) -> Tensor:
    """Steps taken, per chain [C, 1]: a tensor (not ``state.step``) so that a compiled scan of
    steps carries the bias corrections' exponent t + 1 like any other statistic."""
    return state.position.new_zeros(state.position.shape[0], 1)


class SGLD(Kernel):
    """Delta w = -(eps/2) grad U(w) + sqrt(eps) eta                          (Alg. 1)."""

    fusable = True

    name, minibatch = "sgld", True

    def update(self, state: State, target: Target, batch: Batch, generator: torch.Generator):
        e = self.energy(state.position, state, target, batch)
        eps = self.step_size
        w = state.position - 0.5 * eps * e.grad + math.sqrt(eps) * normal(generator, e.grad)
        return replace(state, position=w), e.loss, _ones(state)


class ULA(SGLD):
    """SGLD on the full data: the unadjusted Langevin algorithm."""

    name, minibatch = "ula", False


class RMSPropSGLD(Kernel):
    """v = b v + (1-b) g^2,  v_hat = v / (1 - b^(t+1)),  eps_t = eps / (sqrt(v_hat) + a),
    Delta w = -(eps_t/2) grad U + sqrt(eps_t) eta                              (Alg. 3)."""

    fusable = True

    name, minibatch = "rmsprop-sgld", True

    def start(self, state, target, generator):
        return {"v": torch.ones_like(state.position), "t": _steps(state)}

    def update(self, state: State, target: Target, batch: Batch, generator: torch.Generator):
        e = self.energy(state.position, state, target, batch)
        t = state.aux["t"] + 1
        v = self.b * state.aux["v"] + (1 - self.b) * e.loss_grad**2
        v_hat = v / (1 - self.b**t)
        eps_t = self.step_size / (v_hat.sqrt() + self.a)
        w = state.position - 0.5 * eps_t * e.grad + eps_t.sqrt() * normal(generator, e.grad)
        return replace(state, position=w, aux={"v": v, "t": t}), e.loss, _ones(state)


class AdamSGLD(Kernel):
    """m = b1 m + (1-b1) g,  v = b2 v + (1-b2) g^2,  bias-corrected m_hat, v_hat,
    eps_t = eps / (sqrt(v_hat) + a),
    Delta w = -(eps_t/2) (localization (w - w0) + nbeta m_hat) + sqrt(eps_t) eta   (Alg. 2)."""

    fusable = True

    name, minibatch = "adam-sgld", True

    def start(self, state, target, generator):
        zeros, ones = torch.zeros_like(state.position), torch.ones_like(state.position)
        return {"m": zeros, "v": ones, "t": _steps(state)}

    def update(self, state: State, target: Target, batch: Batch, generator: torch.Generator):
        e = self.energy(state.position, state, target, batch)
        t = state.aux["t"] + 1
        m = self.b1 * state.aux["m"] + (1 - self.b1) * e.loss_grad
        v = self.b2 * state.aux["v"] + (1 - self.b2) * e.loss_grad**2
        m_hat, v_hat = m / (1 - self.b1**t), v / (1 - self.b2**t)
        eps_t = self.step_size / (v_hat.sqrt() + self.a)
        nbeta = self.nbeta_for(target)
        drift = e.grad - nbeta * e.loss_grad + nbeta * m_hat  # the momentum replaces g
        w = state.position - 0.5 * eps_t * drift + eps_t.sqrt() * normal(generator, e.grad)
        return replace(state, position=w, aux={"m": m, "v": v, "t": t}), e.loss, _ones(state)


class SGHMC(Kernel):
    """Default ("corrected"): p <- p - eps grad U - alpha p + sqrt(2 alpha eps) eta;  w <- w + p.
    variant="paper" (Alg. 4 as printed): force eps/2 and w moved by the OLD momentum, which
    samples at twice the temperature (reference 000, section 1). p_0 ~ N(0, eps I)."""

    fusable = True

    name, minibatch = "sghmc", True

    def start(self, state, target, generator):
        return {"p": math.sqrt(self.step_size) * normal(generator, state.position)}

    def friction_of(self, state: State) -> Tensor | float:
        return self.friction

    def noise_friction(self, state: State) -> Tensor | float:
        return self.friction

    def update(self, state: State, target: Target, batch: Batch, generator: torch.Generator):
        e = self.energy(state.position, state, target, batch)
        eps, p = self.step_size, state.aux["p"]
        alpha, diffusion = self.friction_of(state), self.noise_friction(state)
        noise = (2 * diffusion * eps) ** 0.5 * normal(generator, p)
        if self.variant == "paper":
            p_new = p - 0.5 * eps * e.grad - alpha * p + noise
            w = state.position + p  # the old momentum, as printed
        else:
            p_new = p - eps * e.grad - alpha * p + noise
            w = state.position + p_new
        aux = {**state.aux, "p": p_new}
        return replace(state, position=w, aux=self.thermostat(aux, p, p_new)), e.loss, _ones(state)

    def thermostat(self, aux: dict, p_old: Tensor, p_new: Tensor) -> dict:
        return aux

    def observe(self, state: State) -> dict[str, Tensor]:
        p = state.aux["p"]
        return {"kinetic": 0.5 * (p * p).sum(-1)}


class SGNHT(SGHMC):
    """SGHMC whose friction alpha_t follows a Nose-Hoover thermostat (Alg. 5).
    Default: alpha <- alpha + |p|^2/d - eps with the new p, noise sqrt(2 alpha_0 eps) (a fixed
    diffusion, as Ding et al. and devinterp). variant="paper": alpha <- alpha + |p|/d - eps with
    the old p and noise sqrt(2 alpha_t eps), as printed (it can diverge; it is kept to compare)."""

    name = "sgnht"

    def start(self, state, target, generator):
        aux = super().start(state, target, generator)
        aux["alpha"] = torch.full_like(state.position[:, 0], self.friction)
        return aux

    def friction_of(self, state):
        return state.aux["alpha"][:, None]

    def noise_friction(self, state):
        return state.aux["alpha"][:, None] if self.variant == "paper" else self.friction

    def observe(self, state):
        return {**super().observe(state), "thermostat": state.aux["alpha"]}

    def thermostat(self, aux, p_old, p_new):
        d = p_new.shape[1]
        if self.variant == "paper":
            kinetic = torch.linalg.vector_norm(p_old, dim=-1) / d
        else:
            kinetic = (p_new * p_new).sum(-1) / d
        return {**aux, "alpha": aux["alpha"] + kinetic - self.step_size}
