"""What is sampled: chain-batched potentials, networks on data, and their exact truths."""

from __future__ import annotations

import torch

from .base import Param, ParamError, Spec, Target, TargetSpec, resolve_device, resolve_dtype
from .registry import REGISTRY, facts

__all__ = [
    "REGISTRY",
    "Param",
    "ParamError",
    "Spec",
    "Target",
    "TargetSpec",
    "facts",
    "make",
    "resolve_device",
]


def make(
    name: str,
    *,
    device: str | torch.device = "auto",
    dtype: str | torch.dtype = "float32",
    **params,
) -> Target:
    """Build target ``name`` with validated ``params`` on ``device`` ("auto": CUDA if present)."""
    if name not in REGISTRY:
        raise ParamError("target", f"unknown target {name!r}; choose one of {sorted(REGISTRY)}")
    spec = REGISTRY[name]
    values = spec.validate(params)
    target = spec.build(**values)
    target.params = values
    return target.to(resolve_device(device), resolve_dtype(dtype))
