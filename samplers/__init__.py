"""Samplers: kernels on chain-batched tensors, and the diagnostics of their output."""

from __future__ import annotations

from landscapes import ParamError

from .base import Info, Kernel, State
from .registry import REGISTRY

__all__ = ["REGISTRY", "Info", "Kernel", "State", "make"]


def make(name: str, **params) -> Kernel:
    """Build kernel ``name`` with validated hyperparameters (ParamError, a ValueError, names the
    offending parameter and its allowed range)."""
    if name not in REGISTRY:
        raise ParamError("sampler", f"unknown sampler {name!r}; choose one of {sorted(REGISTRY)}")
    spec = REGISTRY[name]
    kernel = spec.build(**spec.validate(params))
    kernel.name = name
    return kernel
