"""MCLMC's tuner: BlackJAX's ``mclmc_find_L_and_step_size`` (1.7.1, without its diagonal
preconditioning: Basin's MCLMC has the identity metric), run inside the kernel during the run's
burn-in with ``step_size: auto`` (samplers.mclmc.MCLMC), pooled over the chains.

The warm-up's W steps (the burn-in unless ``warmup`` is given) are split in three stages of
W - 2 floor(W / 3), floor(W / 3) and floor(W / 3) steps, as BlackJAX's default fractions (0.1,
0.1, 0.1 of its num_steps) split its tuning. It starts at BlackJAX's eps = sqrt(d) / 4 and
L = sqrt(d):

1. the step size: after every step, eps = (X / T)^(-1/6), X and T running averages (decay
   (n - 1)/(n + 1), n = 150, BlackJAX's num_effective_samples) of w xi / eps^6 and of w, with
   xi = Delta E^2 / (d desired_energy_var) and the weight w = exp(-(log xi / (6 * 1.5))^2 / 2)
   (1.5: BlackJAX's trust_in_estimate): Var[E] grows like eps^6, so each step predicts the step
   that would give the desired variance. xi and w are the means over the chains whose step was
   finite. A chain whose step was not finite is put back where it was, and the step may never
   again exceed 0.8 times the current one (BlackJAX's ``handle_nans``).
2. the same, while averaging the positions and their squares weighted by eps (over chains and
   steps); at its end L = sqrt(sum of the coordinates' variances).
3. steps at the fixed (eps, L); at its end L = 0.4 eps tau (0.4: BlackJAX's l_factor), tau the
   mean over coordinates of the integrated autocorrelation time in steps, (chains x steps) /
   ESS (Stan's ESS, ``geyer_ess``, over the first 64 chains and 64 evenly spaced coordinates,
   from the stage's last 512 steps at most: the state keeps them in a buffer of that size).
   Skipped below 4 steps.

Pooled, as the HMC warm-up (samplers.warmup): one step and one L for all chains. C chains give C
times the evidence a step, so a short burn-in settles; the summary holds one step and one L; and
after the warm-up every chain runs the same kernel, which R-hat assumes. Every pooled value is
kept once per chain, all rows equal (the state's rows stay per chain for divergence
containment). After the warm-up both are fixed: the draws come from MCLMC at that (eps, L), with
the bias of that step. ``find_L_and_step_size`` and ``tune`` run the same tuner on a state
outside a run.
"""

from __future__ import annotations

import copy
import math
from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor

from landscapes import Target

from .base import Noise
from .rank_stats import geyer_ess

DESIRED_ENERGY_VAR = 5e-4  # Var[Delta E] / d the tuner aims at: BlackJAX's desired_energy_var
TRUST_IN_ESTIMATE = 1.5  # BlackJAX's defaults
NUM_EFFECTIVE_SAMPLES = 150
L_FACTOR = 0.4
MAX_ESS_CHAINS = MAX_ESS_COORDINATES = 64  # stage 3's ESS: a subset keeps it cheap at any size
TRAIL_STEPS = 512  # stage 3's last steps kept for its ESS: at most 512 x 64 x 64 numbers
MIN_STAGE3 = 4  # stage 3 runs from this many steps


def stages(warmup: int) -> tuple[int, int]:
    """(first, third): stage 1's steps and those of stages 2 and 3 each."""
    third = max(warmup, 0) // 3
    return max(warmup, 0) - 2 * third, third


def start_fields(position: Tensor, warmup: int, initial: tuple[float, float] | None) -> dict:
    """The tuner's fields of a state at ``position`` ([C, d]) before its first step, from
    ``initial`` = (step_size, L), by default BlackJAX's (sqrt(d) / 4, sqrt(d))."""
    chains, dim = position.shape
    eps, length = initial or (0.25 * math.sqrt(dim), math.sqrt(dim))
    zeros, rows = position.new_zeros(chains), torch.zeros_like(position)
    _, third = stages(warmup)
    kept = min(third, TRAIL_STEPS) if third >= MIN_STAGE3 else 0
    trail = position.new_zeros(1, kept, min(chains, MAX_ESS_CHAINS), min(dim, MAX_ESS_COORDINATES))
    return {
        "step": position.new_full((chains,), eps),
        "length": position.new_full((chains,), length),
        "count": zeros,
        "x_average": zeros,
        "time": zeros,
        "most": position.new_full((chains,), torch.finfo(position.dtype).max),  # no cap yet
        "weight": zeros,
        "shift": rows,
        "total": rows,
        "squares": rows,
        "error": zeros,
        "error_steps": zeros,
        "failures": zeros,
        "trail": trail,
    }


def put_back(old, new, loss: Tensor) -> tuple[Any, Tensor, Tensor, Tensor]:
    """During the tuning, chains whose step was not finite go back where they were, with a
    zero energy change (BlackJAX's ``handle_nans``). Returns the state, the loss to report and
    two [C] bools: the step was finite (``ok``), it was not (``failed``); chains that were
    already diverged are neither."""
    fine = (
        torch.isfinite(new.position).all(-1)
        & torch.isfinite(new.u).all(-1)
        & torch.isfinite(new.grad).all(-1)
        & torch.isfinite(new.U)
        & torch.isfinite(new.energy_change)
        & torch.isfinite(loss)
    )
    ok, failed = fine & ~old.diverged, ~fine & ~old.diverged
    rows = failed[:, None]
    new = replace(
        new,
        position=torch.where(rows, old.position, new.position),
        u=torch.where(rows, old.u, new.u),
        grad=torch.where(rows, old.grad, new.grad),
        U=torch.where(failed, old.U, new.U),
        loss=torch.where(failed, old.loss, new.loss),
        energy_change=torch.where(failed, torch.zeros_like(old.U), new.energy_change),
    )
    return new, torch.where(failed, old.loss, loss), ok, failed


def tuned(kernel, old, new, t: int, ok: Tensor, failed: Tensor) -> dict:
    """The tuner's fields after warm-up step ``t`` (0-based) from ``old`` to ``new``, whose
    step was finite where ``ok`` and not where ``failed`` ([C] each)."""
    warmup, dim = kernel.warmup, new.position.shape[1]
    first, third = stages(warmup)
    out = {"count": old.count + 1, "failures": old.failures + failed.sum()}
    if t < first + third:  # stages 1 and 2: the step
        out.update(_predict(kernel, old, new.energy_change, ok, failed, dim))
        if t >= first:  # stage 2: the moments too, about the chains' mean at its start
            shift = _alive_mean(old.position, ~old.diverged) if t == first else old.shift
            x = torch.where(ok[:, None], new.position - shift, torch.zeros_like(shift))
            eps = out["step"]
            out["shift"] = shift
            out["weight"] = old.weight + eps * ok.sum()
            out["total"] = old.total + eps[:, None] * x.sum(0)
            out["squares"] = old.squares + eps[:, None] * (x * x).sum(0)
            out.update(_error(old, new, ok, dim, restart=t == first))
            if t == first + third - 1 and third > 1:
                out["length"] = _moments_length(out, old.length, ~old.diverged)
    elif third >= MIN_STAGE3:  # stage 3: the autocorrelation at fixed (eps, L)
        out.update(_error(old, new, ok, dim, restart=t == first + third))
        trail = old.trail
        row = t - (warmup - trail.shape[1])
        if row >= 0:  # in place: the buffer is the tuner's alone
            chains = trail.shape[2]
            trail[0, row] = new.position[:chains][:, _coordinates(dim, trail.shape[3], trail)]
        if t == warmup - 1:
            out["length"] = _autocorrelation_L(kernel, old, trail[0])
            if new.position.shape[0] != 1:  # one chain: the buffer is a per-chain row, kept
                out["trail"] = trail[:, :0]  # no longer needed
    return out


def _predict(kernel, old, change: Tensor, ok: Tensor, failed: Tensor, dim: int) -> dict:
    """Stages 1-2's step: BlackJAX's ``predictor`` with its running averages, pooled (the
    means over the chains whose step was finite). Non-finite values keep the old ones (a
    state's rows must stay finite). float32 holds eps^6 for 1e-6 < eps < 1e6."""
    okf = ok.to(change.dtype)
    xi = torch.where(ok, change, torch.zeros_like(change)) ** 2
    xi = xi / (dim * kernel.desired_energy_var) + 1e-8  # BlackJAX's guard against log 0
    weight = torch.exp(-0.5 * (torch.log(xi) / (6.0 * kernel.trust_in_estimate)) ** 2)
    n, wx, w, x = okf.sum(), (weight * xi * okf).sum(), (weight * okf).sum(), (xi * okf).sum()
    eps = old.step
    most = torch.where(failed.any(), torch.minimum(old.most, 0.8 * eps), old.most)
    decay = (kernel.num_effective_samples - 1.0) / (kernel.num_effective_samples + 1.0)
    count = n.clamp_min(1.0)
    x_average = decay * old.x_average + wx / count / eps**6
    time = decay * old.time + w / count
    ratio = (x_average / time) ** (-1.0 / 6.0)
    # every weight underflowed (a step far off): predict from this step alone
    alone = eps * (x / count) ** (-1.0 / 6.0)
    predicted = torch.where((time > 0) & (x_average > 0), ratio, alone)
    seen = (n > 0) & torch.isfinite(x_average) & torch.isfinite(time)
    good = seen & torch.isfinite(predicted) & (predicted > 0)
    return {
        "step": torch.minimum(torch.where(good, predicted, eps), most),
        "x_average": torch.where(seen, x_average, old.x_average),
        "time": torch.where(seen, time, old.time),
        "most": most,
    }


def _error(old, new, ok: Tensor, dim: int, restart: bool) -> dict:
    """The running sum of each step's mean Delta E^2 / d over the finite chains (and of the
    steps that had one), restarted at a stage's first step."""
    okf = ok.to(new.energy_change.dtype)
    change = torch.where(ok, new.energy_change, torch.zeros_like(new.energy_change))
    n = okf.sum()
    mean = (change * change).sum() / dim / n.clamp_min(1.0)
    mean = torch.where(torch.isfinite(mean), mean, torch.zeros_like(mean))
    seen = ((n > 0) & (mean > 0)).to(mean.dtype)
    zero = torch.zeros_like(old.error)
    error, steps = (zero, zero) if restart else (old.error, old.error_steps)
    return {"error": error + mean * seen, "error_steps": steps + seen}


def _alive_mean(position: Tensor, alive: Tensor) -> Tensor:
    """The mean of the alive chains' positions, as [C, d] rows (all equal)."""
    weight = alive.to(position.dtype)[:, None]
    mean = (torch.nan_to_num(position) * weight).sum(0) / weight.sum().clamp_min(1.0)
    return mean.expand_as(position)


def _row(alive: Tensor) -> int:
    """An alive chain's row (a host read), 0 where none is."""
    found = alive.nonzero()
    return int(found[0, 0]) if len(found) else 0


def _moments_length(out: dict, before: Tensor, alive: Tensor) -> Tensor:
    """Stage 2's L = sqrt(sum of the coordinates' variances), the old L where there is none."""
    row = _row(alive)
    weight = float(out["weight"][row])
    if weight <= 0:
        return before
    mean = out["total"][row] / weight
    value = float((out["squares"][row] / weight - mean * mean).sum().sqrt())
    good = math.isfinite(value) and value > 0
    return torch.full_like(before, value) if good else before


def _coordinates(dim: int, count: int, like: Tensor) -> Tensor:
    return torch.linspace(0, dim - 1, count, device=like.device).round().long()


def _autocorrelation_L(kernel, old, trail: Tensor) -> Tensor:
    """Stage 3's L = l_factor eps tau from the kept steps ``trail`` ([steps, chains, k]) of the
    chains still alive; the old L where no coordinate has an autocorrelation."""
    alive = ~old.diverged[: trail.shape[1]]
    draws = trail[:, alive].permute(1, 0, 2).detach().cpu().double().numpy()
    taus = []
    for j in range(draws.shape[2]):
        series = draws[:, :, j]
        if series.size == 0 or not np.isfinite(series).all() or np.ptp(series) == 0:
            continue  # BlackJAX leaves out coordinates without an autocorrelation (ESS 0, NaN)
        ess = geyer_ess(series)
        if math.isfinite(ess) and ess > 0:
            taus.append(series.size / ess)
    if not taus:
        return old.length
    eps = float(old.step[_row(~old.diverged)])
    return torch.full_like(old.length, kernel.l_factor * eps * float(np.mean(taus)))


def adapted(kernel, state) -> dict:
    """What the tuner settled on (a run's summary's ``adapted``; ``L`` marks it as MCLMC's
    for runs.verdict and studies.diagnostics)."""
    row = _row(~state.diverged)
    steps = float(state.error_steps[row])
    return {
        "step_size": float(state.step[row]),
        "L": float(state.length[row]),
        "desired_energy_var": kernel.desired_energy_var,
        # mean Delta E^2 / d over the last stage's steps (the aim: desired_energy_var)
        "energy_error": float(state.error[row]) / steps if steps else None,
        "failed_steps": int(state.failures[row]),  # chain steps put back (not finite)
        "warmup": kernel.warmup,
        "finished": bool(state.count[row] >= kernel.warmup),
    }


# -- the tuner outside a run -------------------------------------------------------------------


class Tuned(NamedTuple):
    """What ``find_L_and_step_size`` found, and the chains after its steps."""

    step_size: float
    L: float
    state: Any  # the MicroState where the tuning left the chains
    energy_error: float  # mean Delta E^2 / d over the last stage's steps (the aim: 5e-4)
    failures: int  # chain steps that were not finite (put back) during the tuning


def tune(
    kernel, state, target: Target, noise: Noise | torch.Generator, steps: int, **options
) -> tuple[float, float]:
    """(step_size, L) for ``kernel`` (an MCLMC) on ``target`` after ``steps`` tuning steps from
    ``state`` (``find_L_and_step_size``, whose keyword ``options`` it passes on)."""
    found = find_L_and_step_size(kernel, state, target, noise, steps, **options)
    return found.step_size, found.L


def find_L_and_step_size(
    kernel,
    state,
    target: Target,
    noise: Noise | torch.Generator,
    steps: int,
    *,
    desired_energy_var: float = DESIRED_ENERGY_VAR,
    trust_in_estimate: float = TRUST_IN_ESTIMATE,
    num_effective_samples: int = NUM_EFFECTIVE_SAMPLES,
    l_factor: float = L_FACTOR,
    initial: tuple[float, float] | None = None,
) -> Tuned:
    """The tuner above on all chains of ``state`` (an MCLMC state) for ``steps`` steps, as a
    run with ``step_size: auto`` and ``warmup: steps`` tunes during its burn-in; the options
    are BlackJAX's, ``initial`` = (step_size, L) where it starts. The caller's kernel keeps
    its own step and L; ``Tuned.state`` is where the chains end."""
    if bool(state.diverged.all()):
        raise ValueError("no finite chain to tune on")
    work = copy.copy(kernel)
    work.step_size, work.warmup, work.compilable = "auto", max(steps, 0), False
    work.desired_energy_var, work.trust_in_estimate = desired_energy_var, trust_in_estimate
    work.num_effective_samples, work.l_factor = num_effective_samples, l_factor
    if isinstance(noise, torch.Generator):
        noise = kernel.noise_for(state, target, noise)
    end, _ = work.run(work.tuning(state, initial), target, noise, max(steps, 0))
    found = adapted(work, end)
    error = found["energy_error"]
    return Tuned(
        found["step_size"],
        found["L"],
        work.untuned(end),
        math.nan if error is None else error,
        found["failed_steps"],
    )
