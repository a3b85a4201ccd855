"""Your own torch model as a target: any ``nn.Module`` on your data, all chains at once.

A factory is a function of no arguments, named ``"path/to/file.py:make"`` or
``"package.module:make"``, that returns ``(module, (inputs, targets), loss)``:

- ``module``: a ``torch.nn.Module``. Basin samples its parameters (``named_parameters``, in that
  order, flattened: the layout, so layer-wise metrics, Shampoo blocks and filter-normalised
  directions see its tensors). It is evaluated in **eval mode**, with its **buffers held fixed**:
  Dropout is off, and BatchNorm normalises with its running statistics, which are not sampled
  (the posterior is over the parameters only). A module whose output depends on the batch it is
  given in eval mode is outside what Basin can sample.
- ``(inputs, targets)``: the training data, tensors (or arrays) with the same first axis n.
  Minibatches are rows of them.
- ``loss``: ``"cross_entropy"`` (torch's ``F.cross_entropy``, the mean over samples; integer
  class targets), ``"mse"`` (exactly ``F.mse_loss``: the mean over samples AND outputs, as
  devinterp measures), or a callable ``(outputs, targets) -> mean loss`` over a batch.

All C chains are one call: ``torch.func.functional_call`` of the module, ``vmap``-ed over the
chains' flat parameter vectors (each unflattened to the named tensors), so a step costs batched
matmuls, on any device. w0 is the module's own weights as built, or those of a ``checkpoint``:
a ``torch.save``-d state dict read with ``torch.load(weights_only=True)`` (no code is run: a
pickle that would run code is refused) or a ``.safetensors`` file.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import math
import os
import pickle
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from .base import ParamError, Target
from .data import Dataset
from .networks import Network, check_dim, network_facts

LOSSES = ("cross_entropy", "mse")
SAFETENSORS = (".safetensors",)

FIELD = "model"  # error field prefix: "model.factory", "model.checkpoint"


# ---------------------------------------------------------------------------------------------
# Finding and calling the factory.


def resolve_factory(ref: str) -> str:
    """``ref`` with a file path made absolute (so a stored run rebuilds from any directory);
    a ParamError naming ``model.factory`` when it has no ``:name`` or the file is missing."""
    where, sep, attr = str(ref).rpartition(":")
    if not sep or not where or not attr.isidentifier():
        raise ParamError(
            f"{FIELD}.factory",
            f"must be 'path/to/file.py:function' or 'package.module:function', got {ref!r}",
        )
    if where.endswith(".py"):
        path = Path(where).expanduser().resolve()
        if not path.is_file():
            raise ParamError(f"{FIELD}.factory", f"no such file: {path}")
        return f"{path}:{attr}"
    return f"{where}:{attr}"


def load_factory(ref: str) -> Callable[[], Any]:
    """The factory function named by ``ref`` (``resolve_factory``'s forms)."""
    where, _, attr = resolve_factory(ref).rpartition(":")
    try:
        if where.endswith(".py"):
            digest = hashlib.sha1(where.encode()).hexdigest()[:12]
            name = f"basin_model_{Path(where).stem}_{digest}"
            spec = importlib.util.spec_from_file_location(name, where)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module  # dataclasses and pickling look modules up by name
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except Exception as exc:  # the user's code: any error, reported by name
        raise ParamError(
            f"{FIELD}.factory", f"importing {where} failed: {type(exc).__name__}: {exc}"
        ) from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ParamError(f"{FIELD}.factory", f"{where} has no function {attr!r}")
    return factory


def call_factory(ref: str) -> tuple[nn.Module, Tensor, Tensor, str | Callable]:
    """Call the factory and check what it returned: (module, inputs, targets, loss)."""
    try:
        made = load_factory(ref)()
    except ParamError:
        raise
    except Exception as exc:
        raise ParamError(f"{FIELD}.factory", f"{ref} raised {type(exc).__name__}: {exc}") from exc
    shape = "(module, (inputs, targets), loss)"
    if not (isinstance(made, (tuple, list)) and len(made) == 3):
        raise ParamError(f"{FIELD}.factory", f"must return {shape}, got {type(made).__name__}")
    module, pair, loss = made
    if not isinstance(module, nn.Module):
        raise ParamError(
            f"{FIELD}.factory", f"must return a torch.nn.Module first, got {type(module).__name__}"
        )
    if not any(True for _ in module.parameters()):
        raise ParamError(f"{FIELD}.factory", "the module has no parameters to sample")
    if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
        raise ParamError(f"{FIELD}.factory", f"must return {shape}: data as (inputs, targets)")
    x, y = (torch.as_tensor(np.asarray(v)) if not isinstance(v, Tensor) else v for v in pair)
    if x.ndim == 0 or y.ndim == 0 or x.shape[0] != y.shape[0] or x.shape[0] < 1:
        raise ParamError(
            f"{FIELD}.factory",
            f"inputs and targets must share their first axis n >= 1, got {list(x.shape)} and "
            f"{list(y.shape)}",
        )
    if not (callable(loss) or loss in LOSSES):
        raise ParamError(
            f"{FIELD}.factory", f"loss must be one of {list(LOSSES)} or a callable, got {loss!r}"
        )
    if loss == "cross_entropy" and (y.is_floating_point() or y.ndim != 1):
        raise ParamError(
            f"{FIELD}.factory",
            f"cross_entropy needs integer class targets of shape [n], got {y.dtype} "
            f"{list(y.shape)}",
        )
    return module, x, y, loss


# ---------------------------------------------------------------------------------------------
# Checkpoints: weights only.


def load_weights(path: str | os.PathLike) -> dict[str, Tensor]:
    """A state dict from ``path``: safetensors, or ``torch.load(weights_only=True)``, which
    unpickles tensors and containers only (a pickle that would run code is refused). A dict
    holding the state dict under "state_dict" or "model_state_dict" (a training script's
    checkpoint) is unwrapped."""
    path = Path(path)
    field = f"{FIELD}.checkpoint"
    if not path.is_file():
        raise ParamError(field, f"no such file: {path}")
    try:
        if path.suffix in SAFETENSORS:
            from safetensors.torch import load_file

            state = load_file(str(path), device="cpu")
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:  # a global beyond tensors: code it would have run
        called = re.search(r"GLOBAL (\S+)", str(exc))
        raise ParamError(
            field,
            f"{path.name} is not a weights-only checkpoint: its pickle calls code beyond tensors "
            f"and containers ({called.group(1) if called else 'a global'}); refused, and none "
            "of it was run",
        ) from None
    except Exception as exc:  # a corrupt or foreign file
        first = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip().split("\n")[0]
        raise ParamError(
            field,
            f"{path.name} is not a weights-only checkpoint (a state dict of tensors, saved with "
            f"torch.save or safetensors); refused: {type(exc).__name__}: {first}",
        ) from None
    for key in ("state_dict", "model_state_dict"):
        if isinstance(state, Mapping) and isinstance(state.get(key), Mapping):
            state = state[key]
    if not isinstance(state, Mapping) or not all(isinstance(v, Tensor) for v in state.values()):
        raise ParamError(field, f"{path.name} must hold a state dict (names -> tensors)")
    return dict(state)


def apply_weights(module: nn.Module, state: Mapping[str, Tensor], name: str) -> None:
    """Load ``state`` into ``module``, refusing any mismatch by its first tensor: a parameter
    the file lacks, a tensor of another shape, or a name the module does not have."""
    field = f"{FIELD}.checkpoint"
    own = {**dict(module.named_parameters()), **dict(module.named_buffers())}
    for key in dict(module.named_parameters()):
        if key not in state:
            raise ParamError(field, f"{name} has no tensor {key!r}, a parameter of the module")
    for key, value in state.items():
        if key not in own:
            raise ParamError(
                field, f"{name}'s tensor {key!r} is not a parameter or buffer of the module"
            )
        if tuple(value.shape) != tuple(own[key].shape):
            raise ParamError(
                field,
                f"{name}'s tensor {key!r} has shape {list(value.shape)}, the module's "
                f"{list(own[key].shape)}",
            )
    with torch.no_grad():
        for key, value in state.items():
            own[key].copy_(value.to(own[key].dtype))


# ---------------------------------------------------------------------------------------------
# The target.


class Model(Network):
    """A user's module on its data (the module doc). ``w0`` is its weights; the loss is the
    factory's (its ``loss_convention`` is "mean" for "mse": F.mse_loss)."""

    def __init__(self, module: nn.Module, x: Tensor, y: Tensor, loss: str | Callable):
        module = module.eval()  # Dropout off, BatchNorm on its running statistics
        named = dict(module.named_parameters())
        layout = {key: tuple(p.shape) for key, p in named.items()}
        with torch.no_grad():
            probe = module(
                x[:1].to(next(iter(named.values())).dtype) if x.is_floating_point() else x[:1]
            )
        if not isinstance(probe, Tensor) or probe.ndim == 0 or probe.shape[0] != 1:
            raise ParamError(
                f"{FIELD}.factory",
                "the module must return one tensor with the batch as its first axis",
            )
        outputs = math.prod(probe.shape[1:])
        classification = loss == "cross_entropy"
        if not callable(loss) and not classification and y[0].numel() != outputs:
            raise ParamError(
                f"{FIELD}.factory",
                f"mse needs a target of {outputs} numbers a point (the module's output), got "
                f"{y[0].numel()}",
            )
        floating = x.is_floating_point()
        x = x.double() if floating else x
        y = y.long() if classification else (y if callable(loss) else y.reshape(len(y), -1))
        y = y.double() if y.is_floating_point() else y
        empty = (x[:0], y[:0])
        task = "classification" if classification else "regression"
        dataset = Dataset(x, y, *empty, task, outputs if classification else None)
        super().__init__("model", layout, dataset)
        self.module, self.loss_fn = module, loss
        self.outputs = outputs
        self.loss_convention = "mean"  # "mse" is F.mse_loss: the mean over outputs too
        self.buffers = {key: b.detach() for key, b in module.named_buffers()}
        self.w0 = torch.cat([p.detach().reshape(-1) for p in named.values()]).double()
        self.training_modules = sorted(
            {type(m).__name__ for m in module.modules() if isinstance(m, STATEFUL)}
        )

    # -- forward -----------------------------------------------------------------------------
    def forward(self, params: dict[str, Tensor], x: Tensor) -> Tensor:
        """Outputs [C, B, out] (flattened per point) for inputs shared ([B, ...], the data's
        rank) or each chain's own ([C, B, ...])."""
        per_chain = x.ndim > self.x.ndim

        def one(p: dict[str, Tensor], xb: Tensor) -> Tensor:
            return torch.func.functional_call(self.module, (p, self.buffers), (xb,))

        out = torch.func.vmap(one, in_dims=(0, 0 if per_chain else None))(params, x)
        return out.reshape(*out.shape[:2], self.outputs)

    def _loss_and_grad(self, w: Tensor, batch) -> tuple[Tensor, Tensor]:
        """Eager: autograd through the chain-batched forward (the base class's). Compiled: each
        chain's gradient by ``torch.func.grad`` inside ``vmap``, which traces into a leaner
        graph: an LLC estimate of the digits MLP (4 chains x 2000 steps) took 1.01 s against
        1.25 s (eagerly the other way round: 5.6 s against 3.1 s), the same numbers."""
        if not torch.compiler.is_compiling():
            return super()._loss_and_grad(w, batch)
        x, y = (self.x, self.y) if batch is None else batch
        shared = x.ndim == self.x.ndim  # one batch for every chain, or each chain its own
        sizes = [math.prod(shape) for shape in self.layout.values()]

        def chain(wc: Tensor, xc: Tensor, yc: Tensor) -> Tensor:
            parts = wc.split(sizes)
            params = {k: p.reshape(s) for (k, s), p in zip(self.layout.items(), parts, strict=True)}
            out = torch.func.functional_call(self.module, (params, self.buffers), (xc,))
            return self.criterion(out.reshape(1, out.shape[0], self.outputs), yc[None])[0]

        dims = None if shared else 0
        grad, loss = torch.func.vmap(torch.func.grad_and_value(chain), in_dims=(0, dims, dims))(
            w, x, y
        )
        return loss, grad

    def apply(self, theta: Tensor, x: Tensor) -> Tensor:
        # integer inputs (token ids) keep their dtype: only floating data follows theta's
        x = x.to(theta) if x.is_floating_point() else x.to(theta.device)
        return self.forward(self.unflatten(theta), x)

    # -- losses --------------------------------------------------------------------------------
    def per_sample(self, out: Tensor, y: Tensor) -> Tensor:
        if callable(self.loss_fn):
            return self._callable(out, y, per_point=True)
        return super().per_sample(out, y)

    def criterion(self, out: Tensor, y: Tensor) -> Tensor:
        if callable(self.loss_fn):
            return self._callable(out, y, per_point=False)
        return super().criterion(out, y)

    def _callable(self, out: Tensor, y: Tensor, per_point: bool) -> Tensor:
        """The user's loss on each chain's outputs (and, per point, on batches of one)."""
        fn = self.loss_fn
        y_dims = 0 if y.ndim == self.y.ndim + 1 else None  # a batch per chain, or shared
        if per_point:
            point = lambda o, t: fn(o[None], t[None])  # noqa: E731
            chain = lambda o, t: torch.func.vmap(point)(o, t)  # noqa: E731
        else:
            chain = fn
        return torch.func.vmap(chain, in_dims=(0, y_dims))(out, y)

    def loss_doc(self) -> str | None:
        if callable(self.loss_fn):
            return f"your loss, {getattr(self.loss_fn, '__name__', 'a callable')}(outputs, targets)"
        return super().loss_doc()

    # -- devices -------------------------------------------------------------------------------
    def to(self, device=None, dtype=None) -> Target:
        super().to(device, dtype)
        self.module.to(device=self.device, dtype=self.dtype)
        self.buffers = {
            k: b.to(self.device, self.dtype) if b.is_floating_point() else b.to(self.device)
            for k, b in self.buffers.items()
        }
        return self

    def describe_modes(self) -> str:
        """What Basin does with train-time behaviour, in words (the app and summaries show it)."""
        if not self.training_modules:
            return "eval mode; no Dropout or normalisation layers"
        kinds = ", ".join(self.training_modules)
        return (
            f"eval mode ({kinds}): Dropout is off and normalisation uses its running statistics; "
            f"buffers ({len(self.buffers)}) are held fixed, not sampled"
        )


STATEFUL = (
    nn.modules.dropout._DropoutNd,
    nn.modules.batchnorm._BatchNorm,
    nn.modules.instancenorm._InstanceNorm,
)


# ---------------------------------------------------------------------------------------------
# Building, with the checkpoint, and facts.


def make_model(factory: str, checkpoint: str | None = None) -> Model:
    module, x, y, loss = call_factory(factory)
    if checkpoint:
        path = resolve_checkpoint(checkpoint)
        apply_weights(module, load_weights(path), Path(path).name)
    dim = sum(p.numel() for p in module.parameters())
    check_dim(FIELD, "factory", dim)
    target = Model(module, x, y, loss)
    target.factory, target.checkpoint = factory, checkpoint
    return target


def resolve_checkpoint(path: str | None) -> str | None:
    if not path:
        return None
    resolved = Path(path).expanduser().resolve()
    if not resolved.is_file():
        raise ParamError(f"{FIELD}.checkpoint", f"no such file: {resolved}")
    return str(resolved)


def model_facts(factory: str, checkpoint: str | None = None) -> dict:
    """Facts of a model target: the module is built (the factory called once per process and
    file version, then cached)."""
    stamp = tuple(
        os.stat(p).st_mtime_ns if p and os.path.isfile(p) else None
        for p in (factory.rpartition(":")[0], checkpoint)
    )
    return dict(_facts(factory, checkpoint, stamp))


@functools.lru_cache(maxsize=32)
def _facts(factory: str, checkpoint: str | None, stamp: tuple) -> dict:
    target = make_model(factory, checkpoint)
    labels = target.task == "classification"
    width = math.prod(target.x.shape[1:])
    facts = network_facts(
        target.dim,
        target.n,
        0,
        (width, target.outputs),
        labels=labels,
        held=target.dim + sum(b.numel() for b in target.buffers.values()),
    )
    if not target.x.is_floating_point():  # integer inputs: bytes, not floats
        facts["floats"] -= target.n * width
        facts["other_bytes"] += target.n * width * 8
    facts["trained"] = True  # w0 is the module's (or checkpoint's) weights: start there
    return facts
