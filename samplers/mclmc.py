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
  finite step, the bias set by the energy error's variance per dimension. With
  ``step_size: auto`` the burn-in picks the step and L as ``blackjax.mclmc_find_L_and_step_size``
  does, pooled over the chains (samplers.mclmc_tune, which also has ``tune`` for a state outside
  a run); both are fixed after it.
- ``mchmc`` refreshes u fully at each iteration (the "bounce") and runs ``n_steps`` integrator
  steps; by default a Metropolis test on the trajectory's energy error makes it exact (the MH
  ratio of Robnik, Cohn-Gordon & Seljak 2025, BlackJAX's ``adjusted_mclmc``). Its step is a
  number: MCLMC's tuner aims at an energy error, which suits the unadjusted chain, while the
  Metropolis-adjusted one is tuned to an acceptance by another tuner (BlackJAX's
  ``adjusted_mclmc_find_L_and_step_size``), not built here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import torch
from torch import Tensor

from .base import Draw
from .integrators import MHKernel, MHState, all_accepted
from .mclmc_tune import (
    DESIRED_ENERGY_VAR,
    L_FACTOR,
    NUM_EFFECTIVE_SAMPLES,
    TRUST_IN_ESTIMATE,
    Tuned,
    adapted,
    find_L_and_step_size,
    put_back,
    start_fields,
    tune,
    tuned,
)
from .spec import LOC, NBETA, Param, Watch, aligned, kernel_spec
from .warmup import WARMUP, Warmed

__all__ = ["MCHMC", "MCLMC", "Tuned", "find_L_and_step_size", "tune"]

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


@dataclass
class MicroState(MHState):
    u: Tensor  # [C, d] the unit velocity (MCHMC draws a fresh one each iteration)
    energy_change: Tensor  # [C] Delta E of the last step (MCHMC: of the last trajectory)


@dataclass
class TuneState(MicroState):
    """MCLMC's state with step_size auto: the step and L every chain uses and the tuner's
    accumulators (samplers.mclmc_tune; pooled: all rows equal)."""

    step: Tensor  # [C] eps
    length: Tensor  # [C] L
    count: Tensor  # [C] steps taken
    x_average: Tensor  # [C] stages 1-2: the running average of w xi / eps^6
    time: Tensor  # [C] ... and of w
    most: Tensor  # [C] the largest step allowed since a step was not finite
    weight: Tensor  # [C] stage 2: the sum of eps over the finite chain steps
    shift: Tensor  # [C, d] the chains' mean at stage 2's start (the moments are about it)
    total: Tensor  # [C, d] the eps-weighted sum of the positions (less shift)
    squares: Tensor  # [C, d] ... of their squares
    error: Tensor  # [C] the sum over the stage's steps of the mean Delta E^2 / d
    error_steps: Tensor  # [C] those steps
    failures: Tensor  # [C] chain steps that were not finite (put back)
    trail: Tensor  # [1, steps, chains, k] stage 3's last positions (its ESS)


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


def refresh(u: Tensor, z: Tensor, time: float | Tensor, L: float | Tensor) -> Tensor:
    """u <- (u + nu z) / |u + nu z|, nu = sqrt((exp(2 time / L) - 1) / d), z ~ N(0, I): the
    partial refresh that decorrelates u over a length L (BlackJAX's
    ``partially_refresh_momentum``; a huge time / L makes it a full refresh)."""
    if isinstance(time, Tensor) or isinstance(L, Tensor):  # step_size auto: [C, 1] each
        # e^60: u's share of v is 1e-13, a full refresh, and (nu z)^2 d stays in float32
        nu = torch.sqrt(torch.expm1((2 * time / L).clamp(max=60.0)) / u.shape[-1])
    else:
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

    def isokinetic(self, state, target, w, u, grad, points, eps=None):
        """One step B(b1 eps) A(eps/2) B(b2 eps) A(eps/2) B(b1 eps) from (w, u) with grad U(w)
        ``grad``; appends both new positions to ``points``. Returns (w, u, Energy, Delta K).
        ``eps``: the kernel's step unless given ([C, 1] with step_size auto)."""
        eps = self.step_size if eps is None else eps
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


class MCLMC(Warmed, _Microcanonical):
    """Microcanonical Langevin Monte Carlo, unadjusted, as ``blackjax.mclmc`` with its default
    ``isokinetic_mclachlan`` integrator: R(eps/2), one isokinetic step, R(eps/2), where R(t) is
    the partial refresh u <- (u + nu z)/|u + nu z|, nu = sqrt((exp(2 t / L) - 1) / d). Every
    step is taken (no Metropolis test): the chain is biased at a finite step, by an amount that
    grows with the energy error Delta E = Delta K + U(w') - U(w), reported as the scalars
    ``energy_change`` and ``energy_error`` (Delta E^2 / d). BlackJAX's optional cut-off of steps
    with a large |Delta E| (``desired_energy_var_max_ratio``, off by default) is not implemented.
    A chain whose step turns non-finite is frozen and flagged, as for every Basin kernel
    (BlackJAX instead keeps its old position and draws a new velocity). With ``step_size:
    auto`` the first ``warmup`` steps (the run's burn-in) tune the step and L together, as
    BlackJAX's tuner does (samplers.mclmc_tune; pooled over chains, a non-finite step put back
    during it), and both are fixed after it."""

    SPEC = kernel_spec(
        "mclmc",
        "mcmc",
        MCLMC_PAPER,
        [
            Param(
                "step_size",
                "float",
                0.1,
                "step size epsilon: the distance w moves a step (|u| = 1), or auto: the burn-in "
                "tunes it and L together (BlackJAX's MCLMC tuner)",
                1e-12,
                1e6,  # a distance, which grows like sqrt(d) (the tuner starts at sqrt(d) / 4)
                auto=True,
            ),
            NBETA,
            LOC,
            Param(
                "L",
                "float",
                1.0,
                "momentum decoherence length L: u forgets its direction over about this distance "
                "(large: no refresh, the deterministic dynamics); with step_size auto it is "
                "tuned with the step and this value is not used",
                1e-6,
                1e12,
            ),
            WARMUP,
            Param(
                "desired_energy_var",
                "float",
                DESIRED_ENERGY_VAR,
                "with step_size auto: the energy error per dimension Var[E]/d the tuner aims at "
                "(BlackJAX's desired_energy_var; smaller: a smaller step, less bias)",
                1e-8,
                1.0,
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
        "auto the burn-in runs BlackJAX's tuner: the step from the energy error, then L from "
        "the spread of the positions and from their autocorrelation time, one step and one L "
        "for all chains, fixed after the burn-in. So it needs neither a trajectory length nor "
        "a Metropolis test, which makes it fast in high dimension.",
        acceptance=None,  # no MH test: the energy error is the diagnostic
        watch=(
            Watch(
                "energy_error",
                5e-3,
                "the energy error per dimension is over ten times the 5e-4 the tuner aims at "
                "(BlackJAX's desired_energy_var; Robnik & Seljak 2024), so the step biases the "
                "draws",
                "a smaller step_size (with step_size auto: a smaller desired_energy_var or a "
                "longer burn-in)",
            ),
        ),
    )

    def noise(self, chains, dim):
        """z0, z1: the refreshes before and after the integrator step."""
        return {"z0": Draw("normal", (chains, dim)), "z1": Draw("normal", (chains, dim))}

    warms = "tunes"
    trust_in_estimate = TRUST_IN_ESTIMATE  # the tuner's other options (BlackJAX's)
    num_effective_samples = NUM_EFFECTIVE_SAMPLES
    l_factor = L_FACTOR

    def __init__(self, **params):
        super().__init__(**params)
        if self.auto:  # the tuner's stage is read on the host at every step
            self.compilable = False

    def start(self, state, target, generator):
        state = super().start(state, target, generator)
        return self.tuning(state) if self.auto else state

    def tuning(self, state: MicroState, initial: tuple[float, float] | None = None) -> TuneState:
        """``state`` with the tuner's fields, before its first step (``initial``: its step
        and L, by default BlackJAX's sqrt(d) / 4 and sqrt(d))."""
        base = {f.name: getattr(state, f.name) for f in fields(MicroState)}
        extra = start_fields(state.position, self.check_warmup(), initial)
        return TuneState(**base, **extra)

    @staticmethod
    def untuned(state: TuneState) -> MicroState:
        """The MicroState of a tuned state (its chains, without the tuner's fields)."""
        return MicroState(**{f.name: getattr(state, f.name) for f in fields(MicroState)})

    def update(self, state, target, batch, noise, trace=None):
        if not self.auto:
            return self.advance(state, target, noise, trace, self.step_size, self.L)
        t = int(state.count.max())  # one host read a step: the stage says what the step tunes
        eps, length = state.step[:, None], state.length[:, None]
        new, loss, accepted = self.advance(state, target, noise, trace, eps, length)
        if t >= self.check_warmup():  # tuned: the step and L stay as they are
            return replace(new, count=state.count + 1), loss, accepted
        new, loss, ok, failed = put_back(state, new, loss)
        return replace(new, **tuned(self, state, new, t, ok, failed)), loss, accepted

    def advance(self, state, target, noise, trace, eps, length):
        """R(eps/2), one isokinetic step, R(eps/2) at (``eps``, ``length``): floats, or [C, 1]
        with step_size auto."""
        half = 0.5 * eps
        u = refresh(state.u, noise["z0"], half, length)
        points = [state.position]
        w, u, e, kinetic = self.isokinetic(
            state, target, state.position, u, state.grad, points, eps
        )
        u = refresh(u, noise["z1"], half, length)
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

    def langevin_step(self, state):
        """The step (a distance here, as for a number): with step_size auto the tuned one."""
        if self.auto and isinstance(state, TuneState):
            return state.step[:, None]
        return self.step_size

    def adaptation(self, state) -> dict | None:
        """What the tuner settled on (the summary's ``adapted``), or None without it."""
        if not self.auto or not isinstance(state, TuneState):
            return None
        return adapted(self, state)


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
