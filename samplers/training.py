"""Training a network to the point w0 an LLC is estimated at.

Plain torch.optim (Adam or SGD) on the flat parameter vector, full-batch or minibatch, with early
stopping when the full-data loss stops improving: every ``check_every`` steps the loss is
evaluated, and training stops once ``patience`` steps have passed without a relative
improvement of ``tol`` over the best loss so far. Everything is seeded, so a spec gives the same
w0 on the same device.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from landscapes import ParamError, Target

OPTIMIZERS = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}


@dataclass
class Trained:
    w0: Tensor  # [d]
    steps: int  # optimiser steps taken
    checks: list[int]  # the steps at which the full-data loss was evaluated
    losses: list[float]  # that loss
    stopped_early: bool
    cancelled: bool = False  # on_check asked to stop

    @property
    def loss(self) -> float:
        return self.losses[-1]


def random_init(target: Target, generator: torch.Generator) -> Tensor:
    """[d] a network initialisation: the target's own random one where it has it (MLP), else
    torch.nn.Linear's default for every tensor of the layout, U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    with fan_in the last axis (1 for vectors)."""
    if target.w0 is None:
        return target.initial(generator, 1)[0]
    parts = []
    for shape in target.layout.values():
        fan_in = shape[-1] if len(shape) > 1 else 1
        u = torch.rand(
            math.prod(shape), generator=generator, device=generator.device, dtype=target.dtype
        )
        parts.append((2 * u - 1) / math.sqrt(fan_in))
    return torch.cat(parts)


def train(
    target: Target,
    start: Tensor,
    optimizer: str = "adam",
    lr: float = 1e-3,
    steps: int = 5000,
    batch_size: int | None = None,
    patience: int = 500,
    tol: float = 1e-4,
    check_every: int = 10,
    generator: torch.Generator | None = None,
    on_check: Callable[[int, float], bool | None] | None = None,
) -> Trained:
    """Minimise the target's loss from ``start`` ([d]); returns the final point. ``on_check(step,
    loss)`` hears every check and stops the training by returning True (a cancelled run)."""
    if optimizer not in OPTIMIZERS:
        raise ParamError("train.optimizer", f"must be one of {list(OPTIMIZERS)}, got {optimizer!r}")
    if not lr > 0 or not math.isfinite(lr):
        raise ParamError("train.lr", f"must be a number > 0, got {lr}")
    w = start.detach().clone().reshape(1, -1).requires_grad_(True)
    opt = OPTIMIZERS[optimizer]([w], lr=lr)
    generator = generator or torch.Generator(device=start.device).manual_seed(0)
    minibatch = target.n is not None and batch_size is not None and batch_size < target.n
    checks: list[int] = []
    losses: list[float] = []
    best, best_at, step = math.inf, 0, 0

    def check(step: int) -> bool:
        """Record the full-data loss at ``step``; whether ``on_check`` asks to stop."""
        with torch.no_grad():
            value = float(target.full_loss(w.detach())[0])
        checks.append(step)
        losses.append(value)
        return bool(on_check and on_check(step, value))

    cancelled, stopped = check(0), False
    while not cancelled and step < steps:
        step += 1
        batch = target.sample_batch(generator, batch_size) if minibatch else None
        loss, grad = target.loss_and_grad(w.detach(), batch)
        if not torch.isfinite(loss).all():
            raise ParamError(
                "train.lr", f"training diverged (loss {float(loss[0])}) at step {step}; lower it"
            )
        w.grad = grad
        opt.step()
        if step % check_every and step != steps:
            continue
        cancelled = check(step)
        value = losses[-1]
        if value < best * (1 - tol) - 1e-30:
            best, best_at = value, step
        elif step - best_at >= patience:
            stopped = True
            break
    return Trained(w.detach()[0].clone(), step, checks, losses, stopped, cancelled)
