"""Stan's warm-up for the MH kernels run with ``step_size: auto`` (HMC, NUTS, MALA).

During the first ``warmup`` steps (the run's burn-in) the kernel adapts, after every step:
- its step size, by dual averaging of log eps toward ``target_accept`` (Hoffman & Gelman 2014,
  Alg. 5, with Stan's constants gamma = 0.05, t0 = 10, kappa = 0.75);
- with ``metric: diag``, a diagonal inverse mass matrix: the variance of the positions over
  Stan's windows (75 steps for the step alone, then windows of 25, 50, 100, ... steps, the last
  stretched to end 50 steps before the warm-up does; 50 last steps for the step alone),
  regularised as Stan does, (n / (n + 5)) var + 1e-3 (5 / (n + 5)). After each window the dual
  averaging restarts from mu = log(10 eps).
At the warm-up's last step the step becomes exp(x_bar), the averaged iterate, and both stay
fixed: the draws after the warm-up come from one fixed, exact MH kernel.

Pooled by default (``adapt: pooled``), where Stan adapts each chain alone: one step size and one
metric for all chains, from their mean acceptance and all their positions. C chains give C times
the evidence a step, so the short warm-ups of an interactive run settle; the summary holds one
step and one metric; and after the warm-up every chain runs the same kernel, which R-hat
assumes. A chain that is not finite is left out. Every pooled value is kept once per chain (the
state's rows stay per chain: divergence containment, checkpoints), all rows equal. With
``adapt: chain`` each chain adapts alone, as Stan and BlackJAX's window_adaptation do: the same
updates, each row from its own acceptance and positions (a window's batch is then one point).

Stan also re-runs its step-size heuristic after each window; here the dual averaging's restart
does that job (it doubles or halves the step within a few iterations). A start heuristic as
Stan's (``initial_step``) picks the first step: double or halve a one-leapfrog trial step until
the chains' mean acceptance crosses 0.8.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from landscapes import ParamError

from .integrators import MHState
from .spec import Param

GAMMA, T0, KAPPA = 0.05, 10.0, 0.75  # dual averaging (Hoffman & Gelman 2014; Stan's defaults)
INIT_BUFFER, BASE_WINDOW, TERM_BUFFER = 75, 25, 50  # Stan's window schedule
MIN_WARMUP = 20  # Stan adapts no metric below this; the step still adapts
HEURISTIC_ACCEPT = 0.8  # Stan's init_stepsize: double or halve until acceptance crosses it
HEURISTIC_TRIES = 60  # 2^60: any step a float holds


def step_auto(default: float) -> Param:
    """``step_size`` that also takes "auto" (HMC, NUTS and MALA; ``default``: the kernel's)."""
    return Param(
        "step_size",
        "float",
        default,
        "step size epsilon, or auto: adapted during the burn-in (Stan's warm-up)",
        1e-12,
        10.0,
        auto=True,
    )


DENSE_MAX_DIM = 200  # a dense metric keeps d x d numbers per chain, a Cholesky factor a step


def metric_param(dense: bool) -> Param:
    """``metric``: diag (the default), unit, and for HMC and NUTS dense."""
    helps = "diag adapts a diagonal mass matrix too, unit keeps the identity"
    if dense:
        helps += f", dense adapts a full one (d <= {DENSE_MAX_DIM})"
    choices = ("diag", "unit", "dense") if dense else ("diag", "unit")
    return Param("metric", "choice", "diag", f"with step_size auto: {helps}", choices=choices)


ADAPT = Param(
    "adapt",
    "choice",
    "pooled",
    "with step_size auto: pooled adapts one step and metric from all chains; chain adapts "
    "each chain's own, as Stan does",
    choices=("pooled", "chain"),
)


WARMUP = Param(
    "warmup",
    "int",
    None,
    "with step_size auto: steps that adapt (empty: the run's burn-in)",
    1,
    10_000_000,
    optional=True,
    unit="steps",
)


def adapting_params(
    step: float, accept: float, source: str, dense: bool = True
) -> tuple[Param, ...]:
    """The parameters of a kernel with a warm-up: its step (``step``, or auto), the metric
    (``dense``: a full mass matrix is one of its choices), the warm-up's length and the
    acceptance it aims at (``accept``; ``source``: whose default)."""
    aim = Param(
        "target_accept",
        "float",
        accept,
        f"with step_size auto: the acceptance the warm-up aims at ({source})",
        0.05,
        0.995,
    )
    return step_auto(step), metric_param(dense), WARMUP, aim, ADAPT


def run_params(params: dict, burn_in: int, steps: int) -> dict:
    """A run's kernel parameters with step_size auto's warm-up settled: the run's burn-in unless
    given, never longer (the draws after the burn-in come from the kernel it fixed); a
    ParamError naming the run's field otherwise."""
    auto, warmup = params.get("step_size") == "auto", params.get("warmup")
    if warmup is not None and not auto:
        raise ParamError(
            "sampler.params.warmup",
            f"applies only with step_size auto (the step is adapted then), got {warmup}",
        )
    if not auto:
        return params
    if warmup is None:
        if burn_in < 1:
            raise ParamError(
                "burn_in",
                "must be at least 1 with sampler.params.step_size auto: the warm-up adapts the "
                f"step during the burn-in (Stan's is 1000 steps; try {steps // 2})",
            )
        return {**params, "warmup": burn_in}
    if warmup > burn_in:
        raise ParamError(
            "sampler.params.warmup",
            f"must be at most burn_in ({burn_in}): the draws after the burn-in come from the "
            f"kernel the warm-up fixed, got {warmup}",
        )
    return params


@functools.cache  # read at every step of the warm-up
def windows(warmup: int) -> tuple[int, int, tuple[int, ...]]:
    """(first, stop, ends): the steps t (0-based) with first <= t < stop feed the variance, and
    a window closes after each step in ``ends`` (Stan's windowed_adaptation)."""
    if warmup < MIN_WARMUP:
        return warmup, warmup, ()
    init, term, base = INIT_BUFFER, TERM_BUFFER, BASE_WINDOW
    if init + base + term > warmup:  # Stan's proportions for a short warm-up
        init, term = int(0.15 * warmup), int(0.1 * warmup)
        base = warmup - (init + term)
    last, size, end, ends = warmup - term - 1, base, init + base - 1, []
    while True:
        ends.append(end)
        if end >= last:
            break
        size *= 2
        end = end + size
        if end != last and end + 2 * size >= warmup - term:
            end = last
    return init, warmup - term, tuple(ends)


@dataclass
class AdaptState(MHState):
    """An MH state with the warm-up's own: what the kernel uses (``log_step``, ``inv_mass``)
    and the accumulators that adapt them (pooled: every row the same)."""

    log_step: Tensor  # [C] log eps
    inv_mass: Tensor  # [C, d] the diagonal inverse metric, [C, d, d] a dense one
    count: Tensor  # [C] steps taken
    accept_prob: Tensor  # [C] the last step's acceptance statistic
    s_bar: Tensor  # [C] dual averaging: the running mean of (target - acceptance)
    x_bar: Tensor  # [C] dual averaging: the averaged log step
    mu: Tensor  # [C] dual averaging: its shrinkage point, log(10 eps)
    n_da: Tensor  # [C] dual averaging: iterations since its (re)start
    n_var: Tensor  # [C] the window's points so far (chains x steps)
    mean: Tensor  # [C, d] their mean
    m2: Tensor  # [C, d] their sum of squared deviations ([C, d, d]: of their outer products)


class Warmed:
    """A kernel whose ``step_size`` may be "auto": set during a warm-up of ``warmup`` steps
    (Stan's here, MCLMC's tuner in samplers.mclmc)."""

    step_size: float | str
    warmup: int | None
    warms = "adapts"  # what the warm-up does to the step, in the error below

    @property
    def auto(self) -> bool:
        return self.step_size == "auto"

    def check_warmup(self) -> int:
        if self.warmup is None:
            raise ValueError(
                f"{self.name}.warmup: step_size auto {self.warms} during a warm-up; give its "
                "length (a run takes its burn-in)"
            )
        return self.warmup


class Adaptive(Warmed):
    """The warm-up's side of an MH kernel: its state, the step and metric a step uses, and the
    adaptation after it. A kernel with a number for ``step_size`` is untouched (``auto`` False)."""

    target_accept: float
    metric: str
    adapt: str = "pooled"

    def adapting_start(self, state: MHState, target, generator: torch.Generator) -> AdaptState:
        """The MH state with a warm-up beginning at Stan's heuristic step."""
        self.check_warmup()
        w = state.position
        chains, dim = w.shape
        if self.metric == "dense" and dim > DENSE_MAX_DIM:
            raise ParamError(
                "sampler.params.metric",
                f"dense keeps a {dim} x {dim} matrix per chain: it is for d <= {DENSE_MAX_DIM}; "
                "use diag",
            )
        # float64 then the run's dtype, a float (pooled) or [C] (per chain)
        log_h = torch.as_tensor(self.initial_step(state, target, generator), dtype=torch.float64)
        log_h = log_h.log().to(w.device).expand(chains)
        zeros = w.new_zeros(chains)
        square = torch.zeros(chains, dim, dim, dtype=w.dtype, device=w.device)
        eye = torch.eye(dim, dtype=w.dtype, device=w.device).expand(chains, dim, dim)
        dense = self.metric == "dense"
        return AdaptState(
            **vars(state),
            log_step=log_h.to(w.dtype).contiguous(),
            inv_mass=eye.clone() if dense else torch.ones_like(w),
            count=zeros,
            accept_prob=zeros,
            s_bar=zeros,
            x_bar=zeros,
            mu=(log_h + math.log(10.0)).to(w.dtype).contiguous(),
            n_da=zeros,
            n_var=zeros,
            mean=torch.zeros_like(w),
            m2=square if dense else torch.zeros_like(w),
        )

    def initial_step(self, state: MHState, target, generator: torch.Generator) -> float | Tensor:
        """Stan's init_stepsize: from eps = 1, double (or halve) a one-leapfrog trial until the
        acceptance crosses 0.8: pooled, the mean over the finite chains (a float); per chain
        (``adapt: chain``), each chain's own ([C]). MALA's step is the square of the
        leapfrog's (one leapfrog with a fresh momentum is MALA's move)."""
        w, u, grad = state.position, state.U, state.grad
        ok = torch.isfinite(u) & torch.isfinite(w).all(-1) & ~state.diverged
        if not bool(ok.any()):
            return 1.0
        p = torch.randn(w.shape, generator=generator, device=w.device, dtype=w.dtype)
        h0 = u + 0.5 * (p * p).sum(-1)

        def accept(h: float | Tensor) -> Tensor:
            p_half = p - 0.5 * h * grad
            e = self.energy(w + h * p_half, state, target, None)
            p_new = p_half - 0.5 * h * e.grad
            log_a = h0 - e.value - 0.5 * (p_new * p_new).sum(-1)
            return torch.nan_to_num(log_a.clamp(max=0.0).exp(), nan=0.0)

        if self.adapt == "chain":
            h = w.new_ones(len(w), 1)
            up = accept(h) > HEURISTIC_ACCEPT
            going = ok.clone()
            for _ in range(HEURISTIC_TRIES):
                h = torch.where(going[:, None], torch.where(up[:, None], h * 2.0, h / 2.0), h)
                going &= (accept(h) > HEURISTIC_ACCEPT) == up
                if not bool(going.any()):
                    break
            h = h[:, 0]
            return h * h if self.leapfrog_squared else h
        h = 1.0
        up = float(accept(h)[ok].mean()) > HEURISTIC_ACCEPT
        for _ in range(HEURISTIC_TRIES):
            h = h * 2.0 if up else h / 2.0
            if (float(accept(h)[ok].mean()) > HEURISTIC_ACCEPT) != up:
                break
        return h * h if self.leapfrog_squared else h

    leapfrog_squared = False  # MALA: its step eps is a leapfrog step h squared

    def stepping(self, state) -> tuple[float | Tensor, Tensor | None]:
        """The step (a float, or [C, 1] adapted) and the inverse metric ([C, d]; None: unit)."""
        if not self.auto:
            return self.step_size, None
        return state.log_step.exp()[:, None], state.inv_mass

    def langevin_step(self, state):
        """With step_size auto: the adapted step, per coordinate with the metric (MALA's move;
        HMC's and NUTS's leapfrog step, as for a number)."""
        if not self.auto:
            return self.step_size
        eps, inv_mass = self.stepping(state)
        return eps if inv_mass is None or not self.leapfrog_squared else eps * inv_mass

    def adapted(self, old: AdaptState, new: MHState, prob: Tensor) -> AdaptState:
        """``new`` (the state after a step from ``old`` whose acceptance statistic per chain is
        ``prob``) with the warm-up's update; unchanged after the warm-up."""
        warmup = self.check_warmup()
        first, stop, ends = windows(warmup)
        t, w, dtype = old.count, new.position, new.position.dtype
        prob = torch.nan_to_num(prob, nan=0.0)  # a NaN energy: rejected, accepted with 0
        adapting = t < warmup
        ok = (~old.diverged & torch.isfinite(w).all(-1)).to(dtype)
        pooled = self.adapt == "pooled"
        k = ok.sum().clamp_min(1.0) if pooled else ok  # the points a window gains this step
        alpha = prob.clamp(max=1.0) * ok
        alpha = alpha.sum() / k if pooled else alpha
        # dual averaging (Hoffman & Gelman 2014, Alg. 5)
        n = old.n_da + 1
        eta = 1.0 / (n + T0)
        s_bar = (1 - eta) * old.s_bar + eta * (self.target_accept - alpha)
        x = old.mu - s_bar * n.sqrt() / GAMMA
        x_eta = n.pow(-KAPPA)
        x_bar = (1 - x_eta) * old.x_bar + x_eta * x
        # the window's pooled variance, or covariance (Chan et al.'s update of a Welford mean
        # and M2); per chain, a batch of one point, of M2 zero
        inside = (t >= first) & (t < stop)
        weight = ok[:, None]
        finite = torch.nan_to_num(w)
        dense = self.metric == "dense"
        if not pooled:
            batch_mean, batch_m2 = finite, torch.zeros_like(old.m2)
        elif dense:
            batch_mean = (finite * weight).sum(0) / k
            batch_m2 = ((finite - batch_mean) * weight).T @ (finite - batch_mean)
        else:
            batch_mean = (finite * weight).sum(0) / k
            batch_m2 = ((finite - batch_mean) ** 2 * weight).sum(0)
        n_var = old.n_var + k * inside
        delta = batch_mean - old.mean
        share = k / n_var.clamp_min(1.0)
        mean = torch.where(inside[:, None], old.mean + delta * share[:, None], old.mean)
        spread = delta[:, :, None] * delta[:, None, :] if dense else delta**2
        gain = batch_m2 + spread * _rows(old.n_var * share, spread)
        m2 = torch.where(_rows(inside, gain), old.m2 + gain, old.m2)
        closes = torch.zeros_like(adapting)
        for end in ends:
            closes = closes | (t == end)
        if self.metric in ("diag", "dense"):
            size = _rows(n_var, m2)
            var = m2 / (size - 1).clamp_min(1.0)
            ridge = torch.eye(w.shape[1], dtype=dtype, device=w.device) if dense else 1.0
            regular = (size / (size + 5.0)) * var + 1e-3 * (5.0 / (size + 5.0)) * ridge
            inv_mass = torch.where(_rows(closes, regular), regular, old.inv_mass)
        else:
            inv_mass = old.inv_mass
        restart = closes.to(dtype)
        last = t == warmup - 1
        log_step = torch.where(last, x_bar, x)
        keep = ~adapting

        def held(value: Tensor, before: Tensor) -> Tensor:
            return torch.where(_rows(keep, value), before, value)

        return replace(
            new,
            log_step=held(log_step, old.log_step),
            inv_mass=held(inv_mass, old.inv_mass),
            count=t + 1,
            accept_prob=prob,
            s_bar=held(s_bar * (1 - restart), old.s_bar),
            x_bar=held(x_bar * (1 - restart), old.x_bar),
            mu=held(torch.where(closes, x + math.log(10.0), old.mu), old.mu),
            n_da=held(n * (1 - restart), old.n_da),
            n_var=held(n_var * (1 - restart), old.n_var),
            mean=held(mean * (1 - restart)[:, None], old.mean),
            m2=held(m2 * _rows(1 - restart, m2), old.m2),
        )

    def adaptation(self, state) -> dict | None:
        """What the warm-up settled on (the summary's ``adapted``), or None without one. Per
        chain: the median step over the chains that did not diverge, with its range, and
        their mean inverse metric."""
        if not self.auto or not isinstance(state, AdaptState):
            return None
        alive = (~state.diverged).nonzero()[:, 0]
        rows = alive if len(alive) else torch.arange(len(state.diverged))
        row = int(rows[0])
        found = {
            "step_size": math.exp(float(state.log_step[row])),
            "inverse_mass": state.inv_mass[row].tolist(),
            "metric": self.metric,
            "target_accept": self.target_accept,
            "warmup": self.warmup,
            "finished": bool(state.count[row] >= self.warmup),
            "adapt": self.adapt,
        }
        if self.adapt == "chain":
            steps = state.log_step[rows].exp()
            found["step_size"] = float(steps.median())
            found["step_range"] = [float(steps.min()), float(steps.max())]
            found["inverse_mass"] = state.inv_mass[rows].mean(0).tolist()
        return found


def _rows(per_chain: Tensor, like: Tensor) -> Tensor:
    """A [C] tensor shaped to broadcast over ``like``'s rows ([C, d] or [C, d, d])."""
    return per_chain.reshape(-1, *[1] * (like.ndim - 1))
