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
pickle that would run code is refused) or a ``.safetensors`` file, whose declared sizes (the
archive's member sizes, or the file's) are checked against the module's before a byte of it is
read (``checkpoint_limit``).

The factory, its module and its loss are the user's code: whatever they raise (a bare
``BaseException`` and a ``KeyboardInterrupt`` they raise themselves included) becomes one
ParamError naming ``model.factory`` (``user_error``); only a real Ctrl-C passes as itself.
"""

from __future__ import annotations

import dis
import functools
import hashlib
import importlib
import importlib.util
import math
import os
import pickle
import re
import sys
import zipfile
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
# A checkpoint may declare at most this many bytes per number of the module (its parameters and
# buffers), plus CHECKPOINT_SLACK: float64 weights (8 bytes) with an optimiser's state beside
# them (Adam keeps two more tensors of each) fit; a zip bomb's gigabytes do not.
CHECKPOINT_BYTES_PER_NUMBER = 32
CHECKPOINT_SLACK = 4 * 2**20
RAISES = {dis.opmap[name] for name in ("RAISE_VARARGS", "RERAISE") if name in dis.opmap}
KINDS = {"U": "strings", "S": "bytes", "O": "objects"}  # numpy dtype kinds that are not numbers


# ---------------------------------------------------------------------------------------------
# The user's code failing.


def raised_by_code(exc: BaseException) -> bool:
    """Whether ``exc`` came from a ``raise`` statement: its innermost frame stopped at a raise
    instruction. A KeyboardInterrupt from a real Ctrl-C (the SIGINT handler) stops at whatever
    instruction ran when the signal was handled: a call, a jump, never a raise."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code.co_code
    return 0 <= tb.tb_lasti < len(code) and code[tb.tb_lasti] in RAISES


def user_error(exc: BaseException, what: str, field: str = f"{FIELD}.factory") -> ParamError:
    """The ParamError for ``exc`` raised by the user's code (``what``: "X raised"), one line;
    a KeyboardInterrupt from a real Ctrl-C is raised again as itself (the run is interrupted,
    not failed)."""
    if isinstance(exc, KeyboardInterrupt) and not raised_by_code(exc):
        raise exc
    if isinstance(exc, ParamError) and exc.field.startswith(f"{FIELD}."):
        return exc  # said already (a check of ours inside the user's call)
    text = " ".join(str(exc).split())
    text = text if len(text) <= 300 else f"{text[:297]}..."
    return ParamError(field, f"{what} {type(exc).__name__}" + (f": {text}" if text else ""))


# ---------------------------------------------------------------------------------------------
# Finding and calling the factory.


def resolve_factory(ref: str) -> str:
    """``ref`` with a file path made absolute (so a stored run rebuilds from any directory);
    a ParamError naming ``model.factory`` when it has no ``:name``. The file is not looked
    for: a stored run's spec stays valid once its factory is moved (its records can still be
    read and exported); building the model (``load_factory``) needs it."""
    where, sep, attr = str(ref).rpartition(":")
    if not sep or not where or not attr.isidentifier():
        raise ParamError(
            f"{FIELD}.factory",
            f"must be 'path/to/file.py:function' or 'package.module:function', got {ref!r}",
        )
    if where.endswith(".py"):
        return f"{Path(where).expanduser().resolve()}:{attr}"
    return f"{where}:{attr}"


def load_factory(ref: str) -> Callable[[], Any]:
    """The factory function named by ``ref`` (``resolve_factory``'s forms)."""
    where, _, attr = resolve_factory(ref).rpartition(":")
    if where.endswith(".py") and not os.path.isfile(where):
        raise ParamError(f"{FIELD}.factory", f"no such file: {where}")
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
    except BaseException as exc:  # the user's code: any error, reported by name
        raise user_error(exc, f"importing {where} failed:") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ParamError(f"{FIELD}.factory", f"{where} has no function {attr!r}")
    return factory


def call_factory(ref: str) -> tuple[nn.Module, Tensor, Tensor, str | Callable]:
    """Call the factory and check what it returned: (module, inputs, targets, loss)."""
    factory = load_factory(ref)
    try:
        made = factory()
    except BaseException as exc:
        raise user_error(exc, f"{ref} raised") from exc
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
    x, y = (as_numbers(v, what) for v, what in zip(pair, ("inputs", "targets"), strict=True))
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


def as_numbers(value: Any, what: str) -> Tensor:
    """The factory's ``inputs`` or ``targets`` as a tensor of numbers (bool, integer or
    floating); a ParamError naming ``model.factory`` for strings, objects or ragged lists."""
    if not isinstance(value, Tensor):
        try:
            array = np.asarray(value)
        except Exception as exc:  # ragged nesting, an object numpy cannot hold
            raise user_error(exc, f"its {what} are not an array of numbers:") from None
        if array.dtype.kind not in "biuf":
            kind = KINDS.get(array.dtype.kind, "not numbers")
            raise ParamError(
                f"{FIELD}.factory",
                f"its {what} must be numbers (bool, integer or float), got an array of "
                f"{array.dtype} ({kind})",
            )
        value = torch.as_tensor(array)
    if value.is_complex() or value.is_quantized:
        raise ParamError(f"{FIELD}.factory", f"its {what} must be real numbers, got {value.dtype}")
    return value


# ---------------------------------------------------------------------------------------------
# Checkpoints: weights only.


def checkpoint_limit(module: nn.Module) -> int:
    """The most bytes a checkpoint for ``module`` may declare (``CHECKPOINT_BYTES_PER_NUMBER``
    a number of its parameters and buffers, plus ``CHECKPOINT_SLACK``)."""
    numbers = sum(t.numel() for t in (*module.parameters(), *module.buffers()))
    return CHECKPOINT_BYTES_PER_NUMBER * numbers + CHECKPOINT_SLACK


def declared_bytes(path: Path) -> int:
    """What reading the checkpoint at ``path`` would hold in memory, from its metadata only:
    a zip archive's (torch.save's format) uncompressed member sizes, from its central
    directory (torch allocates each record at its declared size, then inflates into it);
    any other file (safetensors, torch's legacy format) its size on disk."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        zipped = f.read(4) == b"PK\x03\x04"
    if not (zipped or zipfile.is_zipfile(path)):
        return size
    try:
        with zipfile.ZipFile(path) as archive:
            return max(size, sum(info.file_size for info in archive.infolist()))
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:  # torch reads no better
        raise ParamError(
            f"{FIELD}.checkpoint",
            f"{path.name} is not a readable checkpoint archive ({type(exc).__name__}: {exc})",
        ) from None


def load_weights(path: str | os.PathLike, limit: int | None = None) -> dict[str, Tensor]:
    """A state dict from ``path``: safetensors, or ``torch.load(weights_only=True)``, which
    unpickles tensors and containers only (a pickle that would run code is refused). A dict
    holding the state dict under "state_dict" or "model_state_dict" (a training script's
    checkpoint) is unwrapped. With ``limit`` (``checkpoint_limit`` of the module), a file
    declaring more bytes than that is refused before any of it is read: a zip bomb of 1.4 MB
    declares its gigabytes in its central directory."""
    path = Path(path)
    field = f"{FIELD}.checkpoint"
    if not path.is_file():
        raise ParamError(field, f"no such file: {path}")
    if limit is not None:
        declared = declared_bytes(path)
        if declared > limit:
            raise ParamError(
                field,
                f"{path.name} declares {human(declared)} of data, over the {human(limit)} the "
                f"module's weights could need ({CHECKPOINT_BYTES_PER_NUMBER} bytes a parameter "
                f"or buffer, plus {human(CHECKPOINT_SLACK)}); refused before reading it",
            )
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


def human(n: int) -> str:
    """Bytes in words: 1.19 GB, 40 kB, 12 B."""
    for unit, size in (("GB", 2**30), ("MB", 2**20), ("kB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


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
        named = dict(module.named_parameters())
        layout = {key: tuple(p.shape) for key, p in named.items()}
        try:
            module = module.eval()  # Dropout off, BatchNorm on its running statistics
            with torch.no_grad():
                probe = module(
                    x[:1].to(next(iter(named.values())).dtype) if x.is_floating_point() else x[:1]
                )
        except BaseException as exc:
            raise user_error(exc, "the module's forward raised") from exc
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
        if classification and len(y) and (int(y.min()) < 0 or int(y.max()) >= outputs):
            raise ParamError(
                f"{FIELD}.factory",
                f"cross_entropy needs class targets in [0, {outputs - 1}] (the module's "
                f"{outputs} outputs), got [{int(y.min())}, {int(y.max())}]",
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
        if callable(loss):
            self.check_loss(next(iter(named.values())).dtype)

    def check_loss(self, dtype: torch.dtype) -> None:
        """The user's loss once, on two points, as a run calls it (a batch per chain, and each
        point alone for per-point losses, under ``torch.func.vmap``): a ParamError naming
        ``model.factory`` unless it gives one real number a batch."""
        what = f"its loss {getattr(self.loss_fn, '__name__', 'callable')}(outputs, targets)"
        k = min(self.n, 2)
        x = self.x[:k].to(dtype) if self.x.is_floating_point() else self.x[:k]
        y = self.y[:k].to(dtype) if self.y.is_floating_point() else self.y[:k]
        with torch.no_grad():
            try:
                out = self.module(x).reshape(1, k, self.outputs)
            except BaseException as exc:
                raise user_error(exc, "the module's forward raised") from exc
            try:
                value = self.loss_fn(out[0], y)
            except BaseException as exc:
                raise user_error(exc, f"{what} raised") from exc
            if not isinstance(value, Tensor):
                raise ParamError(
                    f"{FIELD}.factory",
                    f"{what} must return a torch tensor holding one number (the batch's mean "
                    f"loss), got {type(value).__name__}",
                )
            if value.numel() != 1 or not value.is_floating_point():
                raise ParamError(
                    f"{FIELD}.factory",
                    f"{what} must return one real number for a batch (the mean loss, shape []), "
                    f"got {value.dtype} of shape {list(value.shape)} for a batch of {k}",
                )
            total, points = self.criterion(out, y), self.per_sample(out, y)
        if tuple(total.shape) != (1,) or tuple(points.shape) != (1, k):
            raise ParamError(
                f"{FIELD}.factory",
                f"{what} must return one number a batch under torch.func.vmap, got shape "
                f"{list(total.shape[1:])}",
            )

    # -- forward -----------------------------------------------------------------------------
    def forward(self, params: dict[str, Tensor], x: Tensor) -> Tensor:
        """Outputs [C, B, out] (flattened per point) for inputs shared ([B, ...], the data's
        rank) or each chain's own ([C, B, ...])."""
        per_chain = x.ndim > self.x.ndim

        def one(p: dict[str, Tensor], xb: Tensor) -> Tensor:
            return torch.func.functional_call(self.module, (p, self.buffers), (xb,))

        run = torch.func.vmap(one, in_dims=(0, 0 if per_chain else None))
        if torch.compiler.is_compiling():  # traced once: a failure is the compiler's to report
            out = run(params, x)
        else:
            try:
                out = run(params, x)
            except BaseException as exc:  # the user's module
                raise user_error(exc, "the module's forward raised") from exc
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
        run = torch.func.vmap(chain, in_dims=(0, y_dims))
        if torch.compiler.is_compiling():
            return run(out, y)
        try:
            return run(out, y)
        except BaseException as exc:  # the user's loss
            name = getattr(fn, "__name__", "callable")
            raise user_error(exc, f"its loss {name}(outputs, targets) raised") from exc

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
        if not os.path.isfile(path):
            raise ParamError(f"{FIELD}.checkpoint", f"no such file: {path}")
        apply_weights(module, load_weights(path, checkpoint_limit(module)), Path(path).name)
    dim = sum(p.numel() for p in module.parameters())
    check_dim(FIELD, "factory", dim)
    target = Model(module, x, y, loss)
    target.factory, target.checkpoint = factory, checkpoint
    return target


def resolve_checkpoint(path: str | None) -> str | None:
    """``path`` made absolute; the file is not looked for (as ``resolve_factory``):
    ``make_model`` needs it, reading a stored run does not."""
    if not path:
        return None
    return str(Path(path).expanduser().resolve())


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
