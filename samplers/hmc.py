"""Hamiltonian Monte Carlo with a jittered number of leapfrog steps (TATi: Heber et al. 2020,
eq. 15)."""

from __future__ import annotations

import torch
from torch import Tensor

from .base import Draw, Energy
from .integrators import MHKernel
from .metric import factor, kinetic, momentum, sharp
from .spec import LOC, NBETA, P003, Param, aligned, kernel_spec
from .warmup import Adaptive, adapting_params


class HMC(Adaptive, MHKernel):
    """p ~ N(0, I); ``leapfrog_steps`` velocity-Verlet steps B(eps/2) A(eps) B(eps/2); accept with
    min(1, exp(H(w, p) - H(w', p'))), H = U + |p|^2 / 2. With ``jitter`` (the default) each chain
    draws its number of steps uniformly from 1..leapfrog_steps every iteration (masked, no host
    sync): a fixed length resonates when a mode's phase (omega L eps; the leapfrog's is
    L arccos(1 - (eps omega)^2 / 2)) is near a multiple of pi: the trajectory ends near its start
    or its mirror image, so that mode barely mixes and a far start stays far. ``jitter=False`` is
    the fixed-length textbook HMC. With ``step_size: auto`` the burn-in adapts the step and a
    diagonal (or dense) mass matrix M (samplers.warmup): p ~ N(0, M), w moves by eps M^-1 p and the
    kinetic energy is p M^-1 p / 2."""

    SPEC = kernel_spec(
        "hmc",
        "mcmc",
        P003 + ", eq. 15",
        [
            *adapting_params(1e-3, 0.8, "Stan's default"),
            NBETA,
            LOC,
            Param(
                "leapfrog_steps",
                "int",
                # jittered: ~10 steps a trajectory on average, enough to travel around the
                # teaching potentials (the donut's ring) at the adapted step (test_verdict)
                20,
                "leapfrog steps per iteration (maximum with jitter)",
                1,
                1000,
            ),
            Param(
                "jitter",
                "bool",
                True,
                "draw the number of leapfrog steps per chain and step (off: fixed length, which "
                "can resonate)",
            ),
        ],
        equation=aligned(
            r"p_0 \sim \mathcal{N}(0, M),\quad (w, p) \leftarrow (w_t, p_0)",
            r"K \text{ times: } p \leftarrow p - \tfrac{\varepsilon}{2}\nabla U(w),"
            r"\ w \leftarrow w + \varepsilon\,M^{-1} p,",
            r"\qquad\qquad p \leftarrow p - \tfrac{\varepsilon}{2}\nabla U(w)",
            r"w_{t+1} = w \text{ with probability } A, \text{ else } w_t",
            r"A = \min\big(1,\ e^{\,H(w_t, p_0) - H(w, p)}\big)",
            r"H(w, p) = U(w) + \tfrac{1}{2}\,p^\top M^{-1} p",
            r"M = I \text{ unless step\_size auto}",
        ),
        text="Hamiltonian Monte Carlo (Duane et al. 1987; Neal 2011) as in the TATi paper (Heber, "
        "Trstanova & Leimkuhler 2020, eq. 15): a fresh momentum, K = leapfrog_steps "
        "velocity-Verlet steps along the Hamiltonian flow, then a Metropolis test on the energy "
        "error, so long moves are accepted as long as the integrator is accurate. By default "
        "(jitter) each chain draws K uniformly from 1..leapfrog_steps at every iteration: a "
        "fixed length K eps resonates when a mode's phase over the trajectory is near a "
        "multiple of pi, so the trajectory ends near its start or its mirror image and that "
        "mode barely mixes (a far start stays far). Set jitter off for the fixed-length "
        "textbook HMC with K = leapfrog_steps every time. With step_size auto the burn-in "
        "tunes the step toward an acceptance of 0.8 and a diagonal (or, metric dense, a full) "
        "mass matrix to the target's scales (Stan's warm-up, pooled over the chains, or each "
        "chain alone with adapt chain); both stay fixed after it.",
        acceptance=(0.4, 1.0),  # optimum 0.65-0.8 (Beskos et al. 2013)
    )

    def noise(self, chains, dim):
        draws = super().noise(chains, dim)  # xi: the momentum
        if self.jitter:
            draws["count"] = Draw("uniform", (chains,))
        return draws

    def start(self, state, target, generator):
        state = super().start(state, target, generator)
        return self.adapting_start(state, target, generator) if self.auto else state

    def update(self, state, target, batch, noise, trace=None):
        (eps, inv_mass), n = self.stepping(state), self.leapfrog_steps
        w, grad, e = state.position, state.grad, None
        path = [w]
        p0 = p = momentum(noise["xi"], factor(inv_mass))
        count = (noise["count"] * n).floor() + 1 if self.jitter else None
        for i in range(n):
            p_half = p - 0.5 * eps * grad
            w_new = w + eps * sharp(p_half, inv_mass)
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
        log_ratio = (state.U + kinetic(p0, inv_mass)) - (e.value + kinetic(p, inv_mass))
        new, loss, accepted = self.settle(state, w, e, log_ratio, noise["u"])
        if self.auto:
            new = self.adapted(state, new, log_ratio.clamp(max=0.0).exp())
        return new, loss, accepted


def _pick(mask: Tensor, new: Tensor | None, old: Tensor | None) -> Tensor | None:
    if new is None:  # a grad L the kernel did not ask for
        return None
    return torch.where(mask.reshape(-1, *[1] * (new.ndim - 1)), new, old)
