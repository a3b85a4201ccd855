"""The local learning coefficient (LLC) and the signals that say whether to trust it.

lambda_hat(w0) = nbeta (E[L_n(w)] - L_n(w0)), the expectation over the tempered posterior localised
at w0, exp(-nbeta L_n(w) - (gamma/2) |w - w0|^2) (Hitchcock & Hoogland 2025, Def. 3.1 and eq. 3.8).
nbeta defaults to n / log n (beta = 1 / log n). gamma (a kernel's ``localization``) defaults to
``LOCALIZATION`` = 1 in LLC runs on networks (``jobs``: the CLI's --observe llc and the app); a
kernel made directly (``samplers.make``) defaults to 0, since a plain sampling run targets exp(-U)
itself, and so do LLC runs on potentials, whose prior already localises them. Each chain gives its
own estimate from the losses it saw after the burn-in; the reported value is their mean, with the
standard deviation over chains and the standard error SD / sqrt(chains). A chain that diverged
(NaN/Inf) is excluded and counted, never averaged in.

The baseline L_n(w0) is the full-data loss by default. The paper's single-minibatch baseline
L_m(w0) is an option, but its noise (nbeta x sd of L_m, hundreds on a tiny DLN against a true
LLC of ~10) swamps the estimate at small scale, which is why it is not the default.

With the full-data baseline, a minibatch run pairs each step's loss L_b(w_t) with w0's loss on
the same batch, L_b(w0) (``Paired``; jobs wraps the kernel in it for LLC runs): the mean of
L_b(w_t) - L_b(w0) is L_n(w_t) - L_n(w0), and the shared batch noise cancels. On a tiny DLN at
n = 1e5 (nbeta 8686, batch 500) the per-step spread of nbeta x the excess fell from ~340 to ~15,
which is what made the DLN benchmark's accuracy reachable (tests/test_dln_accuracy.py).

Everything here is host-side arithmetic on recorded arrays, plus two device-side probes of a
state (the MALA acceptance of an SGLD proposal, and the minibatch gradient noise at w0).
"""

from __future__ import annotations

import math
import warnings
import weakref
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from landscapes import ParamError, Target
from landscapes.base import rows

from .base import Info, Kernel, State
from .integrators import mala_log_ratio

LOCALIZATION = 1.0  # gamma in LLC runs on networks unless given (module doc)


def default_nbeta(n: int | None) -> float:
    """n / log n, i.e. beta = 1 / log n (Hitchcock & Hoogland 2025, Table 2); 1 without a
    dataset."""
    if n is None or n <= 1:
        return 1.0
    return n / math.log(n)


class Paired:
    """``kernel`` whose minibatch steps also report "center_loss": w0's loss on each chain's own
    batch of the step. L_batch(w_t) - L_batch(w0) has the mean L_n(w_t) - L_n(w0) and, near w0, a
    variance hundreds of times smaller than L_batch(w_t)'s: the LLC estimate's control variate.
    Every training point's loss at w0 is computed once, so a step averages its batch's entries
    instead of running one more forward pass. Everything else is the kernel's own."""

    def __init__(self, kernel: Kernel, target: Target, w0: Tensor):
        self.kernel = kernel
        self.center_losses = None  # [n]: L_i(w0), where the kernel takes minibatches
        if kernel.uses_batches(target):
            with torch.no_grad():
                self.center_losses = target.sample_losses(w0[None])[0]

    @classmethod
    def of(cls, kernel: Kernel, target: Target, w0: Tensor) -> Paired:
        """The kernel's pairing on ``target``, kept on the kernel and moved to ``w0`` in place,
        so that a run at a new w0 reuses the compiled chunk of an earlier one."""
        kept = kernel.__dict__.setdefault("_paired", {})
        pair = kept.get(id(target))
        if pair is None or pair.target() is not target:
            pair = kept[id(target)] = cls(kernel, target, w0)
            pair.target = weakref.ref(target)
        elif pair.center_losses is not None:
            with torch.no_grad():
                pair.center_losses.copy_(target.sample_losses(w0[None])[0])
        return pair

    def __getattr__(self, name: str):
        return getattr(self.kernel, name)

    def step(
        self, state: State, target: Target, noise: dict[str, Tensor], trace: bool = False
    ) -> tuple[State, Info]:
        state, info = self.kernel.step(state, target, noise, trace)
        if self.center_losses is not None:
            center = rows(self.center_losses, noise["index"]).mean(-1)  # [C]: each chain's batch
            info.scalars["center_loss"] = center.masked_fill(info.diverged, math.nan)
        return state, info

    run, eager = Kernel.run, Kernel.eager  # their steps are this class's ``step``

    def make_chunk(self, target: Target, state: State, length: int, positions: bool):
        """This class's ``step`` compiled; where it adds nothing to the kernel's (full-batch
        steps), the kernel's own compiled block (NUTS's forest)."""
        if self.center_losses is None:
            return self.kernel.make_chunk(target, state, length, positions)
        return Kernel.make_chunk(self, target, state, length, positions)


# ---------------------------------------------------------------------------------------------
# The estimate from recorded losses.


@dataclass(frozen=True)
class Estimate:
    mean: float | None  # over the chains that stayed finite; None when none did
    std: float | None  # across those chains (ddof 1; 0 for a single chain)
    se: float | None  # std / sqrt(chains used)
    per_chain: list[float | None]  # None where the chain diverged
    nan_chains: int
    chains: int
    draws: int  # losses averaged per chain (after the burn-in)

    def as_dict(self) -> dict:
        return dict(vars(self))


def chain_estimates(losses: np.ndarray, baseline: float, nbeta: float) -> np.ndarray:
    """[C] nbeta (mean_t L_t,c - L0): non-finite (NaN or inf) for a chain with a non-finite loss."""
    losses = np.asarray(losses, dtype=np.float64)
    if losses.ndim != 2:
        raise ValueError(f"losses must be [draws, chains], got shape {losses.shape}")
    with np.errstate(invalid="ignore"):
        return nbeta * (losses.mean(0) - baseline)


def paired_losses(records: dict[str, np.ndarray], baseline: float) -> np.ndarray:
    """[draws, chains] the recorded losses as the estimate averages them: where the kernel
    paired each step's loss with w0's on the same batch (``center_loss``), L_t - L_t(w0) + L0,
    the same mean with far less noise; else the losses as recorded."""
    loss = records["loss"]
    return loss - records["center_loss"] + baseline if "center_loss" in records else loss


def summarise(per_chain: np.ndarray, draws: int) -> Estimate:
    """Mean, SD and SE over the finite per-chain estimates. With no ``draws`` (a run stopped
    before its burn-in ended) there is no estimate, and no chain counts as diverged."""
    per_chain = np.asarray(per_chain, dtype=np.float64)
    good = per_chain[np.isfinite(per_chain)]
    mean = std = se = None
    if good.size:
        mean = float(good.mean())
        std = float(good.std(ddof=1)) if good.size > 1 else 0.0
        se = std / math.sqrt(good.size)
    return Estimate(
        mean=mean,
        std=std,
        se=se,
        per_chain=[float(v) if math.isfinite(v) else None for v in per_chain],
        nan_chains=int(per_chain.size - good.size) if draws else 0,
        chains=int(per_chain.size),
        draws=draws,
    )


def estimate(losses: np.ndarray, baseline: float, nbeta: float, burn_in: int = 0) -> Estimate:
    """The LLC from per-step losses [draws, chains], dropping the first ``burn_in`` draws."""
    if not 0 <= burn_in <= len(losses):
        raise ParamError("burn_in", f"must be in [0, {len(losses)}] (the draws), got {burn_in}")
    kept = np.asarray(losses)[burn_in:]
    if not len(kept):
        return summarise(np.full(np.shape(losses)[1], np.nan), 0)
    return summarise(chain_estimates(kept, baseline, nbeta), len(kept))


def running(losses: np.ndarray, baseline: float, nbeta: float, burn_in: int = 0) -> np.ndarray:
    """[draws, chains]: the estimate from the draws after the burn-in up to each draw (NaN
    before the burn-in ends): lambda_t = nbeta (mean_{B <= s <= t} L_s - L0)."""
    losses = np.asarray(losses, dtype=np.float64)
    out = np.full(losses.shape, np.nan)
    kept = losses[burn_in:]
    if len(kept):
        count = np.arange(1, len(kept) + 1)[:, None]
        out[burn_in:] = nbeta * (np.cumsum(kept, 0) / count - baseline)
    return out


def wbic(mean_loss: float | None, n: int | None, nbeta: float) -> float | None:
    """Watanabe's WBIC, n E_beta[L_n] at beta = 1 / log n: an estimate of the free energy
    n L_n(w0) + lambda log n in the units of the loss. Only defined at that temperature (None
    elsewhere, or without a dataset). Under localisation it is the free energy of the
    neighbourhood of w0, the local counterpart the LLC belongs to."""
    if mean_loss is None or n is None or n <= 1 or not math.isfinite(mean_loss):
        return None
    if not math.isclose(nbeta, default_nbeta(n), rel_tol=1e-6):
        return None
    return n * mean_loss


# ---------------------------------------------------------------------------------------------
# Device-side probes.


def mala_acceptance(
    w: Tensor,
    w_new: Tensor,
    u: Tensor,
    u_new: Tensor,
    grad: Tensor,
    grad_new: Tensor,
    eps: float | Tensor,
) -> Tensor:
    """[C] min(1, exp(MALA's log ratio)) for the Langevin proposal w -> w' of step ``eps`` (a
    float or per coordinate, [C, d]): the probability MALA would accept it (NaN-safe: 0)."""
    ratio = torch.exp(torch.clamp(mala_log_ratio(w, w_new, u, u_new, grad, grad_new, eps), max=0))
    return torch.nan_to_num(ratio, nan=0.0)


def sgld_acceptance(
    kernel: Kernel, state: State, target: Target, generator: torch.Generator, batch=None
) -> Tensor:
    """[C] the MALA acceptance probability of one fresh Langevin proposal from each chain's
    position, with the step the chain actually takes (``kernel.langevin_step``: per coordinate
    for RMSProp- and Adam-SGLD, up to 1/a = 10x the nominal step) and the kernel's U, on
    ``batch`` (the full data when None): a step-size diagnostic; near 1 the discretisation
    barely biases the chains, low means the step is large for the curvature. NaN for a kernel
    without a Langevin step."""
    eps, w = kernel.langevin_step(state), state.position
    if eps is None:
        return torch.full_like(state.position[:, 0], math.nan)
    e = kernel.energy(w, state, target, batch)
    noise = torch.randn(w.shape, generator=generator, device=w.device, dtype=w.dtype)
    proposal = w - 0.5 * eps * e.grad + eps**0.5 * noise
    new = kernel.energy(proposal, state, target, batch)
    return mala_acceptance(w, proposal, e.value, new.value, e.grad, new.grad, eps)


def gradient_noise_ratio(
    target: Target,
    w0: Tensor,
    nbeta: float,
    eps: float,
    batch_size: int | None,
    generator: torch.Generator,
    batches: int = 16,
) -> float:
    """(eps / 4) nbeta^2 Var(g_m), averaged over coordinates, at w0: the variance SGLD's
    minibatch gradient adds to a step, (eps/2)^2 nbeta^2 Var(g_m), over the injected eps.
    Well below 1, the injected noise dominates; near or above it the chains sample a hotter
    posterior than intended (docs/methods/local-sampling.md). 0 on full batches."""
    if target.n is None or batch_size is None or batch_size >= target.n:
        return 0.0
    w = w0.reshape(1, -1)
    grads = torch.cat(
        [target.grad(w, target.sample_batch(generator, batch_size)) for _ in range(batches)]
    ).double()
    return float(eps / 4 * nbeta**2 * grads.var(0, unbiased=True).mean())


# ---------------------------------------------------------------------------------------------
# Health: what a user needs to be told, with the likely cause.

NOISE_RATIO_WARN = 0.1  # "not << 1"
SPIKE_MADS = 10.0  # robust z-score of a loss spike


def spikes(losses: np.ndarray, baseline: float, nbeta: float, dim: int) -> np.ndarray:
    """[C] count of loss spikes per chain: draws whose loss is both a robust outlier of the
    chain's own trace (> 10 MADs above its median) and an excess energy nbeta (L - L0) that a
    posterior of d/2 effective parameters practically never reaches (> d/2 + 10 sqrt(d/2) + 10,
    the Gamma(d/2) tail far past any regular or singular model)."""
    losses = np.asarray(losses, dtype=np.float64)
    if not len(losses):
        return np.zeros(losses.shape[1], int)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN chains: no spikes to count
        median = np.nanmedian(losses, 0)
        mad = 1.4826 * np.nanmedian(np.abs(losses - median), 0)
        outlier = losses - median > SPIKE_MADS * np.maximum(mad, 1e-12 * np.abs(median) + 1e-30)
        half = dim / 2
        excess = nbeta * (losses - baseline) > half + 10 * math.sqrt(half) + 10
        return (outlier & excess).sum(0)


RANGE_SE = 2.0  # how many standard errors past (0, d/2] an estimate must be to be flagged


def out_of_range(mean: float | None, se: float | None, dim: int) -> str | None:
    """Whether an estimate is "above" d/2 or "below" 0 by more than RANGE_SE standard errors.

    At a regular point the truth is d/2 itself, so half of all honest estimates land above it by
    Monte Carlo error alone; only an excess beyond that error says the step or locality is off."""
    if mean is None:
        return None
    margin = RANGE_SE * (se or 0.0)
    if mean - margin > dim / 2:
        return "above"
    if mean + margin < 0:
        return "below"
    return None


def health(
    est: Estimate,
    dim: int,
    spike_counts: np.ndarray | None = None,
    noise_ratio: float | None = None,
    acceptance: float | None = None,
) -> list[dict[str, str]]:
    """Warnings {code, message} with the likely cause; empty when nothing looks wrong."""
    out = []

    def warn(code: str, message: str) -> None:
        out.append({"code": code, "message": message})

    if not est.draws:
        warn("no_draws", "no draws after the burn-in (the run ended before it did): no estimate")
    if est.nan_chains:
        warn(
            "nan",
            f"{est.nan_chains} of {est.chains} chains diverged (NaN/Inf) and are left out: the "
            "step size is too large for the curvature at w0 (or nbeta too large for it)",
        )
    side = out_of_range(est.mean, est.se, dim)
    finite = [x for x in est.per_chain if x is not None and math.isfinite(x)]
    if side is None and finite and min(finite) > dim:
        # every chain past twice the largest true LLC: a spread that wide only hides the excess
        side = "above"
    if side == "above":
        warn(
            "above_max",
            f"lambda_hat = {est.mean:.4g} (SE {est.se:.2g}) exceeds d/2 = {dim / 2:g}, which no "
            "true LLC can: the step size is too large, or the chains left the neighbourhood of w0",
        )
    if side == "below":
        warn(
            "negative",
            f"lambda_hat = {est.mean:.4g} (SE {est.se:.2g}) < 0: the chains found lower loss than "
            "w0, so w0 is not "
            "a local minimum (train longer), the chains are not local (raise localization), "
            "or the baseline is a noisy minibatch loss",
        )
    if spike_counts is not None and int(np.sum(spike_counts)):
        chains = int(np.count_nonzero(spike_counts))
        warn(
            "spikes",
            f"loss spikes in {chains} chain(s) ({int(np.sum(spike_counts))} draws): the step "
            "size is near the stability limit; lower it",
        )
    if noise_ratio is not None and noise_ratio > NOISE_RATIO_WARN:
        warn(
            "gradient_noise",
            f"minibatch gradient noise is {noise_ratio:.3g} x the injected noise: the chains "
            "sample a hotter posterior than intended (lambda_hat biased up); lower the step "
            "size or raise batch_size",
        )
    if acceptance is not None and acceptance < 0.5:
        warn(
            "low_acceptance",
            f"an SGLD step would be accepted by MALA with probability {acceptance:.2f} only: "
            "the step size is large for the curvature, so the discretisation biases the chains",
        )
    return out


def stationary(losses: np.ndarray, baseline: float, nbeta: float, tol: float = 0.05) -> bool:
    """Whether the running estimate is stationary: the two halves of the draws (after burn-in)
    agree within ``tol`` of the estimate or three standard errors of their difference over
    chains. A chain still spreading out from w0 keeps raising its loss, so its halves disagree.
    That is all it can see: a step too large biases every draw alike, so a stationary estimate
    can be far off (four DLN runs from 2.5 to 10.1 against 4.5 all passed). The calibration
    sweep adds what separates those: agreement across step sizes 10x apart, the
    preconditioned acceptance and lambda_hat against d/2 (``studies.calibrate``)."""
    losses = np.asarray(losses, dtype=np.float64)
    half = len(losses) // 2
    if half < 2:
        return False
    first = chain_estimates(losses[:half], baseline, nbeta)
    second = chain_estimates(losses[half:], baseline, nbeta)
    good = np.isfinite(first) & np.isfinite(second)
    if not good.any():
        return False
    diff = second[good] - first[good]
    se = diff.std(ddof=1) / math.sqrt(diff.size) if diff.size > 1 else 0.0
    return bool(abs(diff.mean()) <= max(tol * abs(second[good].mean()), 3 * se))
