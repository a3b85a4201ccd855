"""The Kernel contract: chain-batched states, the posterior they target, divergence containment.

Every kernel targets U(w) = nbeta L(w) + (localization / 2) |w - center|^2 + prior(w), on all C
chains at once. ``step`` never synchronises with the host: no ``.item()``, no Python branch on a
tensor value; divergence is handled with masks, so a chain that turns NaN/Inf is frozen where it
was and flagged while the others go on untouched.
"""

from __future__ import annotations

import math
import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor

from landscapes import Target
from landscapes.base import Batch

from . import normals


@dataclass
class State:
    """One position per chain plus what the kernel carries between steps: ``aux`` holds
    kernel-specific per-chain tensors (momentum, preconditioner statistics, cached energy)."""

    position: Tensor  # [C, d]
    center: Tensor  # [C, d]: the localisation centre (the starting point)
    diverged: Tensor  # [C] bool: frozen after a NaN/Inf
    step: int = 0  # steps taken (a host counter, never read from the device)
    aux: dict[str, Tensor] = field(default_factory=dict)
    # [n]: each training point's loss at the centre, when the kernel pairs (``Kernel.paired``)
    center_losses: Tensor | None = None


@dataclass
class Info:
    """Per-chain results of one step."""

    loss: Tensor  # [C]: L as the step evaluated it (SG kernels: L_batch(w_t); MH: at w_{t+1})
    accepted: Tensor  # [C] float: 1 where an MH proposal was accepted (1 for kernels without MH)
    diverged: Tensor  # [C] bool
    position: Tensor | None = None  # after the step, when ``run(..., positions=...)``
    scalars: dict[str, Tensor] = field(default_factory=dict)  # the kernel's ``observe``: [C] each


@dataclass
class Energy:
    """U and its pieces at a position, for one batch."""

    loss: Tensor  # L [C]
    loss_grad: Tensor  # grad L [C, d] (what adaptive preconditioners adapt on)
    value: Tensor  # U [C]
    grad: Tensor  # grad U [C, d]


class Kernel(ABC):
    """A sampler with validated hyperparameters. Subclasses write ``update``: the equation.

    ``minibatch``: whether the kernel uses ``batch_size`` minibatches (stochastic-gradient kernels);
    MH kernels always use the full data, because their acceptance needs the exact U.
    """

    name = "kernel"
    minibatch = False

    def __init__(self, **params: Any):
        self.params = params
        for key, value in params.items():
            setattr(self, key, value)

    # -- the contract ------------------------------------------------------------------------
    def init(self, position: Tensor, target: Target, generator: torch.Generator) -> State:
        """Start all chains at ``position`` ([C, d]); the localisation centre is that point."""
        position = target.check_position(position)
        chains = position.shape[0]
        state = State(
            position=position.clone(),
            center=position.clone(),
            diverged=torch.zeros(chains, dtype=torch.bool, device=position.device),
        )
        state.aux = self.start(state, target, generator)
        state.diverged = ~self._finite(state)
        if self.paired and self._uses_batches(target):
            state.center_losses = target.sample_losses(state.center[:1])[0]
        return state

    def step(self, state: State, target: Target, generator: torch.Generator) -> tuple[State, Info]:
        index, batch = self._indexed_batch(target, generator)
        new, info_loss, accepted = self.update(state, target, batch, generator)
        paired = self._paired(state, target, batch, index)
        return self._contain(state, new, info_loss, accepted, extra=paired)

    fusable = False  # whether ``run(..., fused=True)`` may compile several steps into one graph

    # With ``paired`` set, a minibatch step also reports "center_loss": the loss at the
    # localisation centre (chain 0's: an LLC run's chains share w0) on the step's own batch.
    # L_batch(w_t) - L_batch(w0) has the mean L_n(w_t) - L_n(w0) and, near w0, a variance
    # hundreds of times smaller than L_batch(w_t)'s: the LLC estimate's control variate.
    # ``init`` evaluates every training point's loss at the centre once, so a step averages
    # its batch's entries instead of running one more forward pass (a third of a 1-chain step).
    paired = False

    def _paired(
        self, state: State, target: Target, batch: Batch, index: Tensor | None
    ) -> dict[str, Tensor]:
        if not self.paired or batch is None:
            return {}
        if state.center_losses is None:
            raise ValueError("paired: set kernel.paired before kernel.init, which computes L_i(w0)")
        center = state.center_losses[index].mean()
        return {"center_loss": center.expand(state.position.shape[0])}

    def run(
        self,
        state: State,
        target: Target,
        generator: torch.Generator,
        steps: int,
        fused: bool = False,
        chunk: int | None = None,
        positions: bool | Tensor = False,
        ahead=None,
    ) -> tuple[State, Info]:
        """``steps`` steps; returns the final state and every step's Info stacked as [T, C],
        with every step's position in ``info.position`` when ``positions`` is True ([T, C, d])
        or its projection on the columns of ``positions`` when that is a [d, k] basis.

        ``fused=True`` runs ``chunk`` steps per compiled call (``samplers.fused``: a scan
        compiled with torch.compile) with their noise and minibatch indices drawn up front; it
        applies to fusable kernels and falls back to the eager loop otherwise, and where
        torch.compile has no compiler to build with (with a warning saying so). The first call
        compiles (seconds, cached on disk); later calls reuse it. ``chunk`` defaults to 256
        steps, fewer where their noise would take more than 32 MiB. Fused runs draw the same
        noise law in another order, so they are reproducible from the seed but not
        bit-identical to eager runs. ``ahead`` (a ``samplers.fused.Ahead``), handed to each of
        a run's calls, draws the next call's noise while the caller handles this one's steps.
        """
        infos: list[Info] = []
        if fused and self.fusable:
            from .fused import compile_problem

            problem = compile_problem(state.position.device.type)
            if problem is not None:
                warnings.warn(f"fused=True runs the steps eagerly: {problem}", stacklevel=2)
                fused = False
        if fused and self.fusable:
            from .fused import run_fused

            state, infos = run_fused(self, state, target, generator, steps, chunk, positions, ahead)
            steps = 0
        elif ahead is not None:  # eager steps draw now
            ahead.close()
        for _ in range(steps):
            state, info = self.step(state, target, generator)
            info.position = trace(state.position, positions)
            infos.append(info)
        if not infos:  # zero steps: empty [0, C] records
            empty = state.position.new_empty(0, state.position.shape[0])
            traced = trace(state.position, positions)
            traced = None if traced is None else traced.new_empty(0, *traced.shape)
            return state, Info(empty, empty, empty.bool(), traced)
        return state, stack_infos(infos)

    # -- what each kernel writes -------------------------------------------------------------
    def start(self, state: State, target: Target, generator: torch.Generator) -> dict[str, Tensor]:
        """Kernel-specific per-chain tensors (momentum, statistics); none by default."""
        return {}

    def observe(self, state: State) -> dict[str, Tensor]:
        """Per-chain scalars of a state worth recording at every step (kinetic energy,
        thermostat); none by default."""
        return {}

    @abstractmethod
    def update(
        self, state: State, target: Target, batch: Batch, generator: torch.Generator
    ) -> tuple[State, Tensor, Tensor]:
        """One step of the kernel's equation: (new state, loss to report, accepted [C] float)."""

    # -- shared pieces ---------------------------------------------------------------------------
    def nbeta_for(self, target: Target) -> float:
        nbeta = self.params.get("nbeta")
        return target.nbeta if nbeta is None else nbeta

    def energy(self, w: Tensor, state: State, target: Target, batch: Batch) -> Energy:
        """U = nbeta L + (localization/2)|w - center|^2 + prior, and its gradient."""
        loss, loss_grad = target.loss_and_grad(w, batch)
        nbeta = self.nbeta_for(target)
        # nbeta = 1 (potentials) leaves U as L: the same tensor, one less to carry (MHKernel)
        value, grad = (loss, loss_grad) if nbeta == 1 else (nbeta * loss, nbeta * loss_grad)
        # Terms that are off are left out, not multiplied by zero: fewer ops per step.
        loc = self.params.get("localization", 0.0)
        if loc:
            diff = w - state.center
            value, grad = value + 0.5 * loc * (diff * diff).sum(-1), grad + loc * diff
        if target.prior_std is not None:
            value, grad = value + target.prior_energy(w), grad + target.prior_grad(w)
        return Energy(loss, loss_grad, value, grad)

    def _uses_batches(self, target: Target) -> bool:
        size = self.params.get("batch_size")
        return self.minibatch and size is not None and target.n is not None and size < target.n

    def _batch(self, target: Target, generator: torch.Generator) -> Batch:
        return self._indexed_batch(target, generator)[1]

    def _indexed_batch(
        self, target: Target, generator: torch.Generator
    ) -> tuple[Tensor | None, Batch]:
        """A step's minibatch and the indices of its training points (None, None: full data)."""
        if not self._uses_batches(target):
            return None, None
        index = integers(generator, target.n, self.params["batch_size"])
        return index, target.batch(index)

    @staticmethod
    def _finite(state: State) -> Tensor:
        ok = torch.isfinite(state.position).all(-1)
        for value in state.aux.values():
            if value.is_floating_point() and value.ndim >= 1:
                ok &= torch.isfinite(value.reshape(value.shape[0], -1)).all(-1)
        return ok

    def _contain(
        self,
        old: State,
        new: State,
        loss: Tensor,
        accepted: Tensor,
        hold: Tensor | None = None,
        extra: dict[str, Tensor] | None = None,
    ) -> tuple[State, Info]:
        """Freeze chains whose new state (or the loss the step saw) is not finite.

        ``hold`` (a 0-d bool, fused chunks only) keeps every chain where it was: a step that
        only pads a chunk to its compiled length. ``extra``: per-chain scalars of the step
        itself, recorded beside those of ``observe``."""
        fresh = ~self._finite(new) | ~torch.isfinite(loss)
        if hold is not None:
            fresh = fresh & ~hold
        diverged = old.diverged | fresh
        keep = diverged if hold is None else diverged | hold
        frozen = replace(
            new,
            position=torch.where(keep[:, None], old.position, new.position),
            diverged=diverged,
            step=old.step + 1,
            aux={k: _where_chain(keep, old.aux[k], v) for k, v in new.aux.items()},
        )
        nan = torch.full_like(loss, math.nan)
        info = Info(
            loss=torch.where(diverged, nan, loss),
            accepted=torch.where(diverged, torch.zeros_like(accepted), accepted),
            diverged=diverged,
            scalars={
                k: torch.where(diverged, nan, v)
                for k, v in {**self.observe(frozen), **(extra or {})}.items()
            },
        )
        return frozen, info


def _where_chain(mask: Tensor, old: Tensor, new: Tensor) -> Tensor:
    return torch.where(mask.reshape(-1, *([1] * (new.ndim - 1))), old, new)


def trace(position: Tensor, positions: bool | Tensor) -> Tensor | None:
    """What ``run(..., positions=...)`` records of a position: it, its projection, or nothing."""
    if isinstance(positions, Tensor):
        return position @ positions
    return position if positions else None


def stack_infos(infos: list[Info]) -> Info:
    """Per-step Infos ([C] or already stacked [T, C]) into one Info of [T, C] tensors."""

    def cat(parts: list[Tensor], ndim: int = 2) -> Tensor:  # [C, ...] or [T, C, ...] parts
        parts = [x.reshape(-1, *x.shape[x.ndim - ndim + 1 :]) for x in parts]
        # one part (a fused block of one chunk) is returned as it is: copying a block's records
        # took 14% of a 4096-chain banana run's time at thin 1
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def column(key: str) -> Tensor:
        return cat([getattr(i, key) for i in infos])

    position = None if infos[0].position is None else cat([i.position for i in infos], 3)
    scalars = {k: cat([i.scalars[k] for i in infos]) for k in infos[0].scalars}
    return Info(column("loss"), column("accepted"), column("diverged"), position, scalars)


def normal(generator: torch.Generator, like: Tensor) -> Tensor:
    """N(0, 1) noise shaped like ``like``; pre-drawn noise when fused (``samplers.fused``)."""
    return draw(generator, "normal", like.shape, like.dtype)


def uniform(generator: torch.Generator, like: Tensor) -> Tensor:
    """U(0, 1) noise shaped like ``like``."""
    return draw(generator, "uniform", like.shape, like.dtype)


def integers(generator: torch.Generator, high: int, size: int) -> Tensor:
    """``size`` integers uniform on [0, high): minibatch indices."""
    return draw(generator, "integers", (size,), torch.int64, high)


def draw(
    generator: torch.Generator,
    kind: str,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    high=None,
    out: Tensor | None = None,
) -> Tensor:
    """One random draw from a torch.Generator, or from a fused run's Recorder/Replay; written
    into ``out`` when given (a torch.Generator only)."""
    if hasattr(generator, "draw"):
        return generator.draw(kind, shape, dtype, high)
    device = generator.device
    if kind == "normal" and normals.serves(generator, dtype):
        return normals.normal(generator, tuple(shape), out)
    if kind == "integers":
        return torch.randint(high, shape, generator=generator, device=device, dtype=dtype, out=out)
    fn = torch.randn if kind == "normal" else torch.rand
    return fn(shape, generator=generator, device=device, dtype=dtype, out=out)
