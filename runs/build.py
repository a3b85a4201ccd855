"""A RunSpec built: its target on its device and dtype, and its kernel, for the run loop.

A process builds each target once and keeps the last few (and their kernels): a warm worker given
the same target and sampler again (a new seed, more steps, the class pressing Run twice) reuses
the kernel's compiled chunks. Both are read-only during a run.
"""

from __future__ import annotations

import functools
import json
import os

import torch

import landscapes
import samplers
from landscapes import ParamError, Target
from runs.spec import RunSpec, SpecError, param_error
from samplers import Kernel


def device_of(spec: RunSpec) -> torch.device:
    """The device the spec's run uses; a SpecError on "device" where there is none such."""
    try:
        return landscapes.resolve_device(spec.device)
    except ParamError as exc:  # e.g. "cuda" asked for on a machine without one
        raise SpecError("device", str(exc).removeprefix("device: ")) from None


def kernel_of(spec: RunSpec) -> Kernel:
    """The spec's kernel, made as the run makes it (hyperparameters only: cheap), so that a
    builder's refusal (a splitting scheme) comes before a run is queued."""
    try:
        return samplers.make(spec.sampler.name, **spec.sampler.params)
    except ParamError as exc:
        raise SpecError(*param_error(exc, "sampler", spec.sampler.name)) from None


def build(spec: RunSpec) -> tuple[Target, Kernel, torch.device]:
    """The target on the spec's device and dtype, and the kernel, for the run loop (kept, as
    the module says)."""
    target, target_key = build_target(spec)
    kernel = _built_kernel(target_key, json.dumps(spec.sampler.model_dump(mode="json")))
    return target, kernel, target.device


def check_files(spec: RunSpec) -> None:
    """A SpecError naming ``model.factory`` (or ``model.checkpoint``) when a model run's file is
    gone. Reading and exporting a stored run never need it (its spec stays valid:
    ``landscapes.model.resolve_factory``); building it, to run or resume it, does: call this
    before requeueing a run, so that it stays resumable once the file is back."""
    if spec.target.name != "model":
        return
    factory = str(spec.target.params.get("factory") or "")
    checkpoint = spec.target.params.get("checkpoint")
    where = factory.rpartition(":")[0]
    for field, path in (
        ("factory", where if where.endswith(".py") else None),
        ("checkpoint", checkpoint),
    ):
        if path and not os.path.isfile(path):
            raise SpecError(
                f"model.{field}",
                f"{path} no longer exists; the run's records can still be read and exported",
            )


def build_target(spec: RunSpec) -> tuple[Target, str]:
    """The spec's target on its device and dtype (kept, as ``build`` says), and its key."""
    check_files(spec)
    device = device_of(spec)
    target_key = json.dumps(
        {"target": spec.target.model_dump(mode="json"), "device": str(device), "dtype": spec.dtype},
        sort_keys=True,
    )
    return _built_target(target_key), target_key


@functools.lru_cache(maxsize=4)
def _built_target(key: str) -> Target:
    spec = json.loads(key)
    name, params = spec["target"]["name"], spec["target"]["params"]
    try:
        return landscapes.make(name, device=spec["device"], dtype=spec["dtype"], **params)
    except ParamError as exc:  # builder-level checks (e.g. dln.rank above the smallest width)
        raise SpecError(*param_error(exc, "target", name)) from None


@functools.lru_cache(maxsize=16)
def _built_kernel(target_key: str, sampler_key: str) -> Kernel:
    """One kernel per (target, sampler): its compiled chunks are for that target."""
    sampler = json.loads(sampler_key)
    return samplers.make(sampler["name"], **sampler["params"])
