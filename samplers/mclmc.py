"""Microcanonical samplers: MCLMC with its tuner (Robnik & Seljak 2024) and MCHMC (Robnik, De Luca,
Silverstein & Seljak 2023).

Both move a position w with a unit-norm velocity u along the isokinetic dynamics
dw/dt = u, du/dt = -(I - u u^T) grad U / (d - 1) (ESH dynamics: Ver Steeg & Galstyan 2021),
whose stationary law has the marginal exp(-U) in w and u uniform on the sphere (Robnik et al.
2023 Secs. 3-4). They integrate it as
BlackJAX 1.7.1 does (``isokinetic_mclachlan``): the minimal-norm splitting B(b1 eps) A(eps/2)
B(b2 eps) A(eps/2) B(b1 eps), b1 = 0.1931833275037836 (McLachlan 1995), where A moves w by
(its time) u and B is the exact velocity update under a constant force, with the change of the
ESH kinetic energy it makes (BlackJAX's ``esh_dynamics_momentum_update_one_step``). The energy
error of a step, Delta E = Delta K + U(w') - U(w), measures the discretisation error.

- ``mclmc`` adds BlackJAX's Langevin noise: a partial refresh of u by half a step before and
  after each integrator step (``with_isokinetic_maruyama``). No Metropolis test: biased at a
  finite step, the bias set by the energy error's variance per dimension. ``tune`` picks the
  step and L as ``blackjax.mclmc_find_L_and_step_size`` does, for all chains at once.
- ``mchmc`` refreshes u fully at each iteration (the "bounce") and runs ``n_steps`` integrator
  steps; by default a Metropolis test on the trajectory's energy error makes it exact (the MH
  ratio of Robnik, Cohn-Gordon & Seljak 2025, BlackJAX's ``adjusted_mclmc``).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from landscapes import Target

from .base import Draw, Noise
from .integrators import MHKernel, MHState, all_accepted
from .rank_stats import geyer_ess
from .spec import LOC, NBETA, Param, Watch, aligned, kernel_spec

B1 = 0.1931833275037836  # McLachlan's minimal-norm coefficient, BlackJAX's ``mclachlan``
B2 = 1.0 - 2.0 * B1
LOG2 = math.log(2.0)
MCLMC_PAPER = (
    "Robnik & Seljak (2024), Fluctuation without dissipation: Microcanonical Langevin Monte "
    "Carlo (AABI); Robnik, De Luca, Silverstein & Seljak (2023), JMLR 24"
)
MCHMC_PAPER = (
    "Robnik, De Luca, Silverstein & Seljak (2023), Microcanonical Hamiltonian Monte Carlo, "
    "JMLR 24; MH test: Robnik, Cohn-Gordon & Seljak (2025), Metropolis adjusted "
    "microcanonical Hamiltonian Monte Carlo"
)
DESIRED_ENERGY_VAR = 5e-4  # Var[Delta E] / d the tuner aims at: BlackJAX's desired_energy_var


@dataclass
class MicroState(MHState):
    u: Tensor  # [C, d] the unit velocity (MCHMC draws a fresh one each iteration)
    energy_change: Tensor  # [C] Delta E of the last step (MCHMC: of the last trajectory)


def esh_velocity(u: Tensor, grad: Tensor, time: float) -> tuple[Tensor, Tensor]:
    """The velocity after ``time`` under the constant force -grad U ([C, d] each), and the change
    of the ESH kinetic energy ([C]). With e = -grad / |grad|, delta = time |grad| / (d - 1) and
    zeta = exp(-delta): u' ~ e (1 - zeta)(1 + zeta + u.e (1 - zeta)) + 2 zeta u, normalised, and
    Delta K = (d - 1)(delta - log 2 + log((1 + u.e)(1 - zeta^2) + 2 zeta^2)) (Robnik et al. 2023
    Secs. 3-4; BlackJAX's ``esh_dynamics_momentum_update_one_step``). No exponential grows, so a
    large gradient cannot overflow it. A zero gradient leaves u as it is."""
    dims = u.shape[-1] - 1
    norm = grad.norm(dim=-1, keepdim=True)
    e = -grad / norm.clamp_min(torch.finfo(grad.dtype).tiny)
    ue = (u * e).sum(-1, keepdim=True)
    delta = time * norm / dims
    zeta = torch.exp(-delta)
    gap = -torch.expm1(-delta)  # 1 - zeta, exact for a small delta
    raw = e * (gap * (1 + zeta + ue * gap)) + 2 * zeta * u
    new = raw / raw.norm(dim=-1, keepdim=True)
    stretch = (1 + ue).clamp_min(0) * -torch.expm1(-2 * delta) + 2 * zeta * zeta
    kinetic = dims * (delta - LOG2 + torch.log(stretch))
    return new, kinetic[:, 0]


def refresh(u: Tensor, z: Tensor, time: float, L: float) -> Tensor:
    """u <- (u + nu z) / |u + nu z|, nu = sqrt((exp(2 time / L) - 1) / d), z ~ N(0, I): the
    partial refresh that decorrelates u over a length L (BlackJAX's
    ``partially_refresh_momentum``; a huge time / L makes it a full refresh)."""
    nu = math.sqrt(math.expm1(min(2 * time / L, 700.0)) / u.shape[-1])
    v = u + nu * z
    return v / v.norm(dim=-1, keepdim=True)


def unit(z: Tensor) -> Tensor:
    """z / |z| per row: a draw uniform on the sphere from z ~ N(0, I)."""
    return z / z.norm(dim=-1, keepdim=True)


def _check_dim(name: str, dim: int) -> None:
    if dim < 2:
        raise ValueError(
            f"{name} needs a target of dimension 2 or more (its velocity update divides by "
            f"d - 1), got d = {dim}"
        )


class _Microcanonical(MHKernel):
    """The isokinetic integrator both kernels share, and the state they carry."""

    def start(self, state, target, generator):
        _check_dim(self.name, state.position.shape[1])
        mh = super().start(state, target, generator)
        w = state.position
        z = torch.randn(w.shape, generator=generator, device=w.device, dtype=w.dtype)
        return MicroState(**vars(mh), u=unit(z), energy_change=torch.zeros_like(mh.U))

    def observe(self, state):
        """``energy_change``: Delta E a step (MCHMC: a trajectory); ``energy_error``:
        Delta E^2 / d, whose mean over steps and chains is the Var[E] / d that MCLMC's tuner
        aims at (5e-4)."""
        dims = state.position.shape[1]
        change = state.energy_change
        return {"energy_change": change, "energy_error": change * change / dims}

    def isokinetic(self, state, target, w, u, grad, points):
        """One step B(b1 eps) A(eps/2) B(b2 eps) A(eps/2) B(b1 eps) from (w, u) with grad U(w)
        ``grad``; appends both new positions to ``points``. Returns (w, u, Energy, Delta K)."""
        eps = self.step_size
        u, kinetic = esh_velocity(u, grad, B1 * eps)
        w = w + 0.5 * eps * u
        e = self.energy(w, state, target, None)
        points.append(w)
        u, k2 = esh_velocity(u, e.grad, B2 * eps)
        w = w + 0.5 * eps * u
        e = self.energy(w, state, target, None)
        points.append(w)
        u, k3 = esh_velocity(u, e.grad, B1 * eps)
        return w, u, e, kinetic + k2 + k3


ISOKINETIC = (
    r"B(\tau):\ e = -\nabla U / \lVert \nabla U \rVert,\ \zeta = e^{-\delta},",
    r"\qquad \delta = \tau \lVert \nabla U \rVert / (d - 1),\ \mathrm{n}[v] = v / \lVert v \rVert",
    r"\qquad u \leftarrow \mathrm{n}\big[e\,(1 - \zeta)(1 + \zeta + u \cdot e\,(1 - \zeta))"
    r" + 2\zeta\,u\big]",
    r"\qquad \Delta K \mathrel{+}= (d - 1)\big(\delta - \ln 2",
    r"\qquad\qquad + \ln((1 + u \cdot e)(1 - \zeta^2) + 2\zeta^2)\big)",
    r"A(\tau):\ w \leftarrow w + \tau\,u,\quad b_1 = 0.19318,\ b_2 = 1 - 2 b_1",
    r"\Phi_\varepsilon = B(b_1\varepsilon)\,A(\tfrac{\varepsilon}{2})\,B(b_2\varepsilon)"
    r"\,A(\tfrac{\varepsilon}{2})\,B(b_1\varepsilon)",
)


class MCLMC(_Microcanonical):
    """Microcanonical Langevin Monte Carlo, unadjusted, as ``blackjax.mclmc`` with its default
    ``isokinetic_mclachlan`` integrator: R(eps/2), one isokinetic step, R(eps/2), where R(t) is
    the partial refresh u <- (u + nu z)/|u + nu z|, nu = sqrt((exp(2 t / L) - 1) / d). Every
    step is taken (no Metropolis test): the chain is biased at a finite step, by an amount that
    grows with the energy error Delta E = Delta K + U(w') - U(w), reported as the scalars
    ``energy_change`` and ``energy_error`` (Delta E^2 / d). BlackJAX's optional cut-off of steps
    with a large |Delta E| (``desired_energy_var_max_ratio``, off by default) is not implemented.
    A chain whose step turns non-finite is frozen and flagged, as for every Basin kernel
    (BlackJAX instead keeps its old position and draws a new velocity). ``tune`` sets the step
    and L."""

    SPEC = kernel_spec(
        "mclmc",
        "mcmc",
        MCLMC_PAPER,
        [
            Param(
                "step_size",
                "float",
                0.1,
                "step size epsilon: the distance w moves a step (|u| = 1)",
                1e-12,
                1e6,  # a distance, which grows like sqrt(d) (the tuner starts at sqrt(d) / 4)
            ),
            NBETA,
            LOC,
            Param(
                "L",
                "float",
                1.0,
                "momentum decoherence length L: u forgets its direction over about this distance "
                "(large: no refresh, the deterministic dynamics)",
                1e-6,
                1e12,
            ),
        ],
        equation=aligned(
            r"u \leftarrow R(\tfrac{\varepsilon}{2})\,u,\ (w, u) \leftarrow"
            r" \Phi_\varepsilon(w, u),\ u \leftarrow R(\tfrac{\varepsilon}{2})\,u",
            *ISOKINETIC,
            r"R(t)\,u = \mathrm{n}[u + \nu z],\ z \sim \mathcal{N}(0, I),"
            r"\ \nu = \sqrt{(e^{2t/L} - 1)/d}",
            r"\Delta E = \Delta K + U(w_{t+1}) - U(w_t)",
            r"\text{(every step is taken)}",
        ),
        text="Microcanonical Langevin Monte Carlo (Robnik & Seljak 2024), as BlackJAX 1.7.1 runs "
        "it: the position moves with a velocity of fixed length 1 along the isokinetic (ESH) "
        "dynamics of Microcanonical HMC (Robnik et al. 2023), in which the force only turns the "
        "velocity, and a small random turn of the velocity at every step (the Langevin noise) "
        "makes it forget its direction over a distance L. The continuous dynamics, noise "
        "included, leaves exp(-U) invariant; the discretised chain has no Metropolis test and "
        "is biased at a finite step, by an amount that grows with the energy error per step. "
        "Every step is taken (acceptance is 1): watch instead the energy error Var[E]/d (the "
        "mean of the energy_error scalar), which the tuner aims at 5e-4, BlackJAX's "
        "desired_energy_var; well above that the samples are visibly off (too wide or too "
        "narrow), and a step that is far too large shows as diverged chains. With step_size "
        "and L from the tuner it needs neither a trajectory length nor a Metropolis test, which "
        "makes it fast in high dimension.",
        acceptance=None,  # no MH test: the energy error is the diagnostic
        watch=(
            Watch(
                "energy_error",
                5e-3,
                "the energy error per dimension is over ten times the 5e-4 the tuner aims at "
                "(BlackJAX's desired_energy_var; Robnik & Seljak 2024), so the step biases the "
                "draws",
                "a smaller step_size",
            ),
        ),
    )

    def noise(self, chains, dim):
        """z0, z1: the refreshes before and after the integrator step."""
        return {"z0": Draw("normal", (chains, dim)), "z1": Draw("normal", (chains, dim))}

    def update(self, state, target, batch, noise, trace=None):
        half = 0.5 * self.step_size
        u = refresh(state.u, noise["z0"], half, self.L)
        points = [state.position]
        w, u, e, kinetic = self.isokinetic(state, target, state.position, u, state.grad, points)
        u = refresh(u, noise["z1"], half, self.L)
        if trace is not None:
            trace["proposal"], trace["path"] = w, torch.stack(points, 1)
        new = replace(
            state,
            position=w,
            u=u,
            U=e.value,
            grad=e.grad,
            loss=e.loss,
            energy_change=kinetic + e.value - state.U,
        )
        return new, e.loss, all_accepted(state)


class MCHMC(_Microcanonical):
    """Microcanonical HMC with a full refresh: each iteration draws u uniform on the sphere
    (the bounce of Robnik et al. 2023 Secs. 3-4), takes ``n_steps`` isokinetic steps (as
    MCLMC's, without its noise) and, with ``metropolis`` (the default), accepts the end point
    with min(1, exp(-W)), W = U(w') - U(w) + Delta K over the trajectory: the isokinetic map is
    reversible and Delta K accounts for its volume change, so the chain samples exp(-U)
    exactly (Robnik, Cohn-Gordon & Seljak 2025; BlackJAX's ``adjusted_mclmc`` with no
    in-trajectory noise). ``metropolis=False`` takes every end point, as the MCMC Interactive
    Gallery's MCHMC does: biased at a finite step like MCLMC, by an amount that grows with W's
    variance."""

    SPEC = kernel_spec(
        "mchmc",
        "mcmc",
        MCHMC_PAPER,
        [
            Param(
                "step_size",
                "float",
                0.2,
                "step size epsilon: the distance w moves a step (|u| = 1)",
                1e-12,
                1e6,  # a distance, which grows like sqrt(d) (the tuner starts at sqrt(d) / 4)
            ),
            NBETA,
            LOC,
            Param(
                "n_steps",
                "int",
                10,
                "isokinetic steps per iteration, between two full refreshes of u (trajectory "
                "length n_steps eps)",
                1,
                1000,
            ),
            Param(
                "metropolis",
                "bool",
                True,
                "accept with min(1, exp(-W)): exact (off: every trajectory is taken, biased at a "
                "finite step)",
            ),
        ],
        equation=aligned(
            r"u_0 = z / \lVert z \rVert,\ z \sim \mathcal{N}(0, I)",
            r"(w, u) \leftarrow \Phi_\varepsilon^{\,n}(w_t, u_0)",
            *ISOKINETIC,
            r"W = U(w) - U(w_t) + \Delta K",
            r"w_{t+1} = w \text{ with probability } \min(1, e^{-W}),\ \text{else } w_t",
            r"\text{(metropolis off: always } w)",
        ),
        text="Microcanonical Hamiltonian Monte Carlo (Robnik, De Luca, Silverstein & Seljak "
        "2023): the position moves with a velocity of fixed length 1 along the isokinetic (ESH) "
        "dynamics, in which the force only turns the velocity, for n_steps steps of length eps; "
        "then the velocity is drawn afresh, uniform on the sphere (the paper's bounce, which "
        "the dynamics needs to be ergodic). By default a Metropolis test on the trajectory's "
        "energy error W accepts the end point with min(1, exp(-W)) (Robnik, Cohn-Gordon & "
        "Seljak 2025, the Metropolis-adjusted microcanonical sampler), so the chain samples "
        "exp(-U) exactly at any step and too large a step shows as a low acceptance. With "
        "metropolis off every trajectory is taken, as the MCMC Interactive Gallery runs MCHMC: "
        "faster, but biased at a finite step; watch the energy_error scalar (W^2/d) there.",
        acceptance=(0.4, 1.0),  # HMC's band (optimum 0.65-0.8, Beskos et al. 2013): the same
        # role for the isokinetic energy error W as for H's
    )

    def update(self, state, target, batch, noise, trace=None):
        w, u, grad = state.position, unit(noise["xi"]), state.grad
        points, e, kinetic = [w], None, torch.zeros_like(state.U)
        for _ in range(self.n_steps):
            w, u, e, k = self.isokinetic(state, target, w, u, grad, points)
            kinetic, grad = kinetic + k, e.grad
        if trace is not None:
            trace["proposal"], trace["path"] = w, torch.stack(points, 1)
        work = e.value - state.U + kinetic
        if self.metropolis:
            new, loss, accepted = self.settle(state, w, e, -work, noise["u"])
        else:
            new, loss, accepted = self.move(state, w, e, torch.ones_like(state.diverged))
        # a rejected trajectory may end non-finite: keep the velocity it started with, and
        # report a W that is not finite as 0, as BlackJAX does
        u = torch.where(accepted[:, None] > 0, u, unit(noise["xi"]))
        work = torch.where(torch.isfinite(work), work, torch.zeros_like(work))
        return replace(new, u=u, energy_change=work), loss, accepted


# -- the tuner ---------------------------------------------------------------------------------


class Tuned(NamedTuple):
    """What ``find_L_and_step_size`` found, and the chains after its steps."""

    step_size: float
    L: float
    state: MicroState
    energy_error: float  # mean Delta E^2 / d over the last stage's steps (the aim: 5e-4)
    failures: int  # chain steps that were not finite (put back) during the tuning


def tune(
    kernel: MCLMC,
    state: MicroState,
    target: Target,
    noise: Noise | torch.Generator,
    steps: int,
    **options,
) -> tuple[float, float]:
    """(step_size, L) for ``kernel`` on ``target`` after ``steps`` tuning steps from ``state``
    (``find_L_and_step_size``, whose keyword ``options`` it passes on)."""
    tuned = find_L_and_step_size(kernel, state, target, noise, steps, **options)
    return tuned.step_size, tuned.L


def find_L_and_step_size(
    kernel: MCLMC,
    state: MicroState,
    target: Target,
    noise: Noise | torch.Generator,
    steps: int,
    *,
    desired_energy_var: float = DESIRED_ENERGY_VAR,
    trust_in_estimate: float = 1.5,
    num_effective_samples: int = 150,
    l_factor: float = 0.4,
    initial: tuple[float, float] | None = None,
) -> Tuned:
    """BlackJAX's ``mclmc_find_L_and_step_size`` (1.7.1, without its diagonal preconditioning:
    Basin's metric is the identity) on all chains at once. ``steps`` tuning steps, split in
    three equal stages as BlackJAX's default fractions (0.1, 0.1, 0.1 of its run) split them,
    starting from ``initial`` = (step_size, L), by default BlackJAX's (sqrt(d) / 4, sqrt(d)):

    1. the step size: after every step, eps = (X / T)^(-1/6), X and T running averages
       (decay (n - 1)/(n + 1), n = ``num_effective_samples``) of w xi / eps^6 and w, with
       xi = Delta E^2 / (d ``desired_energy_var``) and the weight
       w = exp(-(log xi / (6 ``trust_in_estimate``))^2 / 2): Var[E] grows like eps^6, so
       each step predicts the step that would give the desired variance. Here xi and w are
       the means over the chains that stayed finite; where a chain's step is not finite, the
       chain is put back where it was and the step may never again exceed 0.8 times the
       current one (BlackJAX's ``handle_nans``).
    2. the same, while averaging the positions and their squares weighted by eps:
       L = sqrt(sum of the coordinates' variances) (pooled over chains and steps).
    3. steps at the fixed (eps, L): L = ``l_factor`` eps tau, tau the mean over coordinates of
       the integrated autocorrelation time in steps, (chains x steps) / ESS (Stan's ESS as
       BlackJAX computes it, over at most 64 chains and 64 evenly spaced coordinates).
       Skipped when it would have fewer than 4 steps.

    The chains' positions move during the tuning: ``Tuned.state`` is where they end."""
    dim = state.position.shape[1]
    _check_dim(kernel.name, dim)
    eps, length = initial or (0.25 * math.sqrt(dim), math.sqrt(dim))
    work = copy.copy(kernel)  # the caller's kernel keeps its own step and L
    work.step_size, work.L = eps, length
    if isinstance(noise, torch.Generator):
        noise = kernel.noise_for(state, target, noise)
    dead = state.diverged.clone()
    if bool(dead.all()):
        raise ValueError("no finite chain to tune on")
    third = max(steps, 0) // 3
    first = max(steps, 0) - 2 * third
    decay = (num_effective_samples - 1.0) / (num_effective_samples + 1.0)
    predictor = _StepPredictor(eps, dim, desired_energy_var, trust_in_estimate, decay)
    moments = _Moments(state.position[~dead].mean(0))
    error, failures = [], torch.zeros((), dtype=torch.long, device=dead.device)
    for t in range(first + third):
        state, ok, failed = _advance(work, state, target, noise, dead)
        work.step_size = predictor.update(state.energy_change, ok, failed)
        failures = failures + failed.sum()
        if t >= first:
            moments.add(state.position, ok, work.step_size)
            error.append(_mean_error(state, ok, dim))
    if third > 1:
        work.L = moments.length() or work.L
    if third >= 4:
        stage = _autocorrelation_L(work, state, target, noise, dead, third, l_factor)
        state, work.L, error, failed = stage
        failures = failures + failed
    energy_error = float(torch.stack(error).nanmean()) if error else math.nan
    return Tuned(work.step_size, work.L, state, energy_error, int(failures))


def _advance(work: MCLMC, state: MicroState, target: Target, noise: Noise, dead: Tensor):
    """One step of ``work``; a chain whose step was not finite (frozen where it was by
    ``contain``) is unflagged to go on. Returns the state and two [C] bools: the step was
    finite (``ok``), it was not (``failed``; chains that started non-finite are neither)."""
    new, _ = work.run(state, target, noise, 1)
    failed = new.diverged & ~dead
    return replace(new, diverged=dead), ~failed & ~dead, failed


def _mean_error(state: MicroState, ok: Tensor, dim: int) -> Tensor:
    """The mean over the chains whose step was finite of Delta E^2 / d (NaN where none was)."""
    change = torch.where(ok, state.energy_change, torch.full_like(state.energy_change, math.nan))
    return (change * change / dim).nanmean()


class _StepPredictor:
    """Stages 1-2's step size: BlackJAX's ``predictor`` with its running averages, pooled over
    chains (the mean over the chains whose step was finite)."""

    def __init__(self, eps: float, dim: int, desired: float, trust: float, decay: float):
        self.eps, self.dim, self.desired, self.trust, self.decay = eps, dim, desired, trust, decay
        self.x_average, self.time, self.most = 0.0, 0.0, math.inf

    def update(self, change: Tensor, ok: Tensor, failed: Tensor) -> float:
        """The next step size after a step at ``self.eps`` whose chains changed their energy
        by ``change`` ([C]), finite where ``ok``, not finite where ``failed``."""
        okf = ok.to(change.dtype)
        xi = torch.where(ok, change, torch.zeros_like(change)) ** 2 / (self.dim * self.desired)
        xi = xi + 1e-8  # BlackJAX's guard against log 0
        weight = torch.exp(-0.5 * (torch.log(xi) / (6.0 * self.trust)) ** 2)
        sums = [okf, weight * xi * okf, weight * okf, xi * okf, failed.to(change.dtype)]
        n, wx, w, x, bad = torch.stack([v.sum() for v in sums]).tolist()  # one host sync
        if bad > 0:  # some step was not finite: never again this large (BlackJAX's 0.8)
            self.most = min(self.most, 0.8 * self.eps)
        if n > 0:
            self.x_average = self.decay * self.x_average + wx / n / self.eps**6
            self.time = self.decay * self.time + w / n
            if self.time > 0 and self.x_average > 0:
                eps = (self.x_average / self.time) ** (-1.0 / 6.0)
            else:  # every weight underflowed (a step far off): predict from this step alone
                eps = self.eps * (x / n) ** (-1.0 / 6.0)
            self.eps = eps if math.isfinite(eps) and eps > 0 else self.eps
        self.eps = min(self.eps, self.most)
        return self.eps


class _Moments:
    """Stage 2's running averages of the positions and their squares, weighted by the step size
    (BlackJAX's ``incremental_value_update``), pooled over the chains; taken about ``shift``
    (the chains' mean at the stage's start) so that E[x^2] - E[x]^2 does not cancel."""

    def __init__(self, shift: Tensor):
        self.shift = shift
        self.weight = shift.new_zeros(())
        self.sum = torch.zeros_like(shift)
        self.sum_sq = torch.zeros_like(shift)

    def add(self, position: Tensor, ok: Tensor, eps: float) -> None:
        x = torch.where(ok[:, None], position - self.shift, torch.zeros_like(position))
        self.weight = self.weight + eps * ok.sum()
        self.sum = self.sum + eps * x.sum(0)
        self.sum_sq = self.sum_sq + eps * (x * x).sum(0)

    def length(self) -> float | None:
        """sqrt(sum of the coordinates' variances), None where there is none to give."""
        mean = self.sum / self.weight
        value = float((self.sum_sq / self.weight - mean * mean).sum().sqrt())
        return value if math.isfinite(value) and value > 0 else None


MAX_ESS_CHAINS = MAX_ESS_COORDINATES = 64  # stage 3's ESS: a subset keeps it cheap at any size


def _autocorrelation_L(work, state, target, noise, dead, steps, l_factor):
    """Stage 3: ``steps`` steps at the fixed (eps, L), then L = l_factor eps tau, tau the mean
    over coordinates of (chains x steps) / ESS. Returns the state, L, each step's energy error
    and the count of chain steps that were not finite."""
    chains = torch.nonzero(~dead)[:MAX_ESS_CHAINS, 0]
    dim = state.position.shape[1]
    count = min(dim, MAX_ESS_COORDINATES)
    coordinates = torch.linspace(0, dim - 1, count, device=chains.device).round().long()
    rows, error, failures = [], [], 0
    for _ in range(steps):
        state, ok, failed = _advance(work, state, target, noise, dead)
        rows.append(state.position[chains][:, coordinates])
        error.append(_mean_error(state, ok, dim))
        failures = failures + failed.sum()
    draws = torch.stack(rows, 1).detach().cpu().double().numpy()  # [chains, steps, coordinates]
    taus = []
    for j in range(draws.shape[2]):
        series = draws[:, :, j]
        if not np.isfinite(series).all() or np.ptp(series) == 0:
            continue  # BlackJAX leaves out coordinates without an autocorrelation (ESS 0, NaN)
        ess = geyer_ess(series)
        if math.isfinite(ess) and ess > 0:
            taus.append(series.size / ess)
    length = l_factor * work.step_size * float(np.mean(taus)) if taus else work.L
    return state, length, error, failures
