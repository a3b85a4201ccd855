"""The Target contract, parameter specs and their validation.

A Target is what a sampler samples: a loss L(w) on chain-batched positions ``w: Tensor[C, d]``.
Potentials give their energy as the loss (sampled with nbeta = 1); networks give the mean
per-sample training loss over a dataset of size ``n``. Everything here is device- and
dtype-agnostic: constants are made on the fly from ``w``, and data tensors move with ``to``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

Batch = (
    Any  # a target-specific minibatch (a tuple of tensors for data targets, None for potentials)
)


def rows(data: Tensor, index: Tensor) -> Tensor:
    """``data[index]`` for an index of any shape (a minibatch: [B] or [C, B]), as one
    index_select: on a CPU, advanced indexing took 3x as long to gather a step's random rows
    from a dataset out of cache (bench/RESULTS.md, 22:50), and every minibatch step gathers."""
    return data.index_select(0, index.reshape(-1)).reshape(*index.shape, *data.shape[1:])


class ParamError(ValueError):
    """Bad input: names the offending field and says what is allowed."""

    def __init__(self, field_name: str, message: str):
        self.field = field_name
        super().__init__(f"{field_name}: {message}")


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` means CUDA when present, else CPU."""
    if isinstance(device, torch.device):
        return device
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ParamError("device", f"must be 'auto', 'cpu' or 'cuda[:i]', got {device!r}") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ParamError("device", "CUDA was asked for but no CUDA device is available")
    return dev


DTYPES = {"float32": torch.float32, "float64": torch.float64}


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise ParamError("dtype", f"must be float32 or float64, got {dtype}")
        return dtype
    if dtype not in DTYPES:
        raise ParamError("dtype", f"must be one of {sorted(DTYPES)}, got {dtype!r}")
    return DTYPES[dtype]


# ---------------------------------------------------------------------------------------------
# Parameter specs: the single source the CLI flags, RunSpec validation and app widgets come from.


def shown(value: Any, limit: int = 40) -> str:
    """``repr(value)`` for an error message, cut so that it stays one short line: a long integer
    to its first 20 digits and its length ("10000000000000000000... (401 digits)"), any other
    long text to ``limit`` characters."""
    try:
        text = repr(value)
    except ValueError:  # an int past Python's 4300-digit limit on conversion to text
        return f"an integer of about {int(abs(value).bit_length() * math.log10(2)) + 1} digits"
    if len(text) <= limit:
        return text
    digits = str(value).strip().lstrip("+-")
    if isinstance(value, (int, str)) and digits.isdigit():  # also "1000...0" typed as text
        sign = "-" if str(value).strip().startswith("-") else ""
        return f"{sign}{digits[:20]}... ({len(digits)} digits)"
    return f"{text[: limit - 12]}... ({len(text)} chars)"


@dataclass(frozen=True)
class Param:
    """One user-facing parameter. ``kind`` is one of int, float, bool, choice, str, ints, floats.

    ``low``/``high`` bound the value (or every element of a list) inclusively; ``optional``
    admits None (shown as "auto"/"off" by front ends); ``length`` bounds list lengths; ``auto``
    (a number) also admits the string "auto": the owner chooses the value itself (a kernel's
    warm-up adapts its step size, samplers.warmup).
    """

    name: str
    kind: str
    default: Any
    doc: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    unit: str = ""
    optional: bool = False
    length: tuple[int, int] = (1, 64)
    auto: bool = False

    def allowed(self) -> str:
        if self.kind == "choice":
            return f"one of {list(self.choices)}"
        if self.kind == "bool":
            return "true or false"
        if self.kind == "str":
            return "a string"
        what = {
            "int": "an integer",
            "float": "a number",
            "ints": "a list of integers",
            "floats": "a list of numbers",
        }[self.kind]
        lo = "-inf" if self.low is None else f"{self.low:g}"
        hi = "inf" if self.high is None else f"{self.high:g}"
        rng = f" in [{lo}, {hi}]" if (self.low is not None or self.high is not None) else ""
        if self.kind in ("ints", "floats"):
            rng = f" of length {self.length[0]}..{self.length[1]}" + (f", each{rng}" if rng else "")
        return what + rng + (" (or None)" if self.optional else "") + (" or 'auto'" * self.auto)

    def check(self, value: Any, owner: str) -> Any:
        """Return the value coerced to its kind, or raise ParamError naming ``owner.name``."""
        name = f"{owner}.{self.name}"
        if value is None:
            if self.optional:
                return None
            raise ParamError(name, f"must be {self.allowed()}, got None")
        if self.auto and isinstance(value, str) and value.strip().lower() == "auto":
            return "auto"
        if self.kind == "choice":
            if value not in self.choices:
                raise ParamError(name, f"must be {self.allowed()}, got {shown(value)}")
            return value
        if self.kind == "bool":
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
                return value.lower() in ("true", "1")
            raise ParamError(name, f"must be true or false, got {shown(value)}")
        if self.kind == "str":
            if not isinstance(value, str):
                raise ParamError(name, f"must be a string, got {type(value).__name__}")
            return value
        if self.kind in ("ints", "floats"):
            if isinstance(value, str):
                value = [v for v in value.replace(",", " ").split() if v]
            if not isinstance(value, (list, tuple)):
                value = [value]
            lo, hi = self.length
            if not lo <= len(value) <= hi:
                raise ParamError(name, f"must be {self.allowed()}, got length {len(value)}")
            scalar = self.kind[:-1]
            return tuple(self._scalar(v, scalar, name) for v in value)
        return self._scalar(value, self.kind, name)

    def _scalar(self, value: Any, kind: str, name: str) -> int | float:
        """``value`` as a number of ``kind`` within the range, else a ParamError naming both."""
        if isinstance(value, (bool, np.bool_)):
            raise ParamError(name, f"must be {self.allowed()}, got {shown(value)}")
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: an int beyond float's range
            raise ParamError(name, f"must be {self.allowed()}, got {shown(value)}") from None
        if not math.isfinite(number):
            raise ParamError(name, f"must be {self.allowed()}, got {shown(value)}")
        if kind == "int":
            if number != int(number):
                raise ParamError(name, f"must be {self.allowed()}, got {shown(value)}")
            number = int(number)
        if (self.low is not None and number < self.low) or (
            self.high is not None and number > self.high
        ):
            raise ParamError(name, f"must be {self.allowed()}, got {shown(value)}")
        return number


@dataclass(frozen=True)
class Spec:
    """A registry entry (a target or a kernel): how to build it and what its parameters mean."""

    name: str
    kind: str  # targets: "potential" or "network"; kernels: their family
    doc: str
    paper: str
    params: tuple[Param, ...]
    build: Callable[..., Any] = field(repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", tuple(self.params))  # registries may pass lists

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.params}

    def validate(self, params: dict[str, Any]) -> dict[str, Any]:
        """Fill defaults, coerce types and check ranges; unknown names are refused."""
        known = {p.name for p in self.params}
        unknown = sorted(set(params) - known)
        if unknown:
            raise ParamError(
                f"{self.name}.{unknown[0]}",
                f"unknown parameter; {self.name} takes {sorted(known)}",
            )
        out = self.defaults()
        out.update(params)
        return {p.name: p.check(out[p.name], self.name) for p in self.params}


TargetSpec = Spec


# ---------------------------------------------------------------------------------------------
# The Target base class.


DATA_CHUNK = 65536  # training points per forward pass over the full data


class Target(ABC):
    """A loss on chain-batched positions. Subclasses implement ``_loss`` and, where cheap,
    ``_grad``; everything else (shape checks, autograd fallback, device moves) lives here.

    Attributes: ``name``, ``dim``, ``layout`` (parameter name -> shape, in flat order),
    ``n`` (training-set size or None), ``bounds`` ((xlo, xhi), (ylo, yhi)) for 2-D plots,
    ``w0`` (a known true/trained point, Tensor[d], or None), ``minimum`` (a potential's known
    global minimum of its energy, its density's mode, Tensor[d], or None: where an LLC with
    w0 "truth" starts when there is no ``w0``; unlike ``w0`` it does not move the default
    start), ``nbeta`` (the default inverse temperature times n: 1 for potentials).
    ``prior_std``: a Gaussian prior N(0, prior_std^2 I) that kernels add to the energy (None:
    no prior term); targets with another prior override ``has_prior``, ``prior_energy`` and
    ``prior_grad``.
    ``gradient_noise``: sigma of the N(0, sigma^2 I) noise added to a potential's gradient in
    stochastic-gradient kernels (Yu et al.'s funnel protocol, Sec. 4.2, uses 1): a potential's
    "minibatch" is that noise's draw, so exact-gradient kernels (MH, ULA) never see it.
    Optional truths (None or empty where not known): ``exact_sample(generator, C)``,
    ``marginals`` (coordinate index -> closed-form 1-D log-density), ``log_z`` (so that
    exp(-loss - log_z) is the normalised density of a potential), ``mean``, ``cov``,
    ``true_llc`` ((lambda, multiplicity)).
    """

    name: str = "target"
    dim: int
    layout: dict[str, tuple[int, ...]]
    n: int | None = None
    bounds: tuple[tuple[float, float], tuple[float, float]] | None = None
    w0: Tensor | None = None
    minimum: Tensor | None = None
    nbeta: float = 1.0
    log_z: float | None = None
    true_llc: tuple[float, int] | None = None  # (lambda, multiplicity)
    prior_std: float | None = None
    gradient_noise: float = 0.0
    # whether samplers.compiled may export its steps ahead of time (else torch.compile only)
    exportable: bool = True

    # -- the contract ----------------------------------------------------------------------
    def loss(self, w: Tensor, batch: Batch = None) -> Tensor:
        """Tensor[C]: the energy (potentials) or mean per-sample loss (networks)."""
        return self._loss(self.check_position(w), batch)

    def grad(self, w: Tensor, batch: Batch = None) -> Tensor:
        """Tensor[C, d]: gradient of ``loss`` for each chain."""
        return self.loss_and_grad(w, batch)[1]

    def loss_and_grad(self, w: Tensor, batch: Batch = None) -> tuple[Tensor, Tensor]:
        w = self.check_position(w)
        if self.n is None and batch is not None:  # a potential's batch: its gradient's noise
            loss, grad = self._loss_and_grad(w, None)
            return loss, grad + self.gradient_noise * batch
        return self._loss_and_grad(w, batch)

    def _loss_and_grad(self, w: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
        # overridden where the loss and its gradient share work
        if type(self)._grad is not Target._grad:
            return self._loss(w, batch), self._grad(w, batch)
        return self._autograd(w, batch)

    def batch(self, index: Tensor) -> Batch:
        """The training points at ``index``: [B] for a batch every chain shares, [C, B] for a
        batch per chain (samplers draw those); potentials have no data: None."""
        return None

    def sample_batch(self, generator: torch.Generator, size: int) -> Batch:
        """A minibatch of ``size`` points drawn with replacement, shared by all chains."""
        if self.n is None:
            return None
        if not 1 <= size:
            raise ParamError("batch_size", f"must be >= 1, got {size}")
        index = torch.randint(self.n, (size,), generator=generator, device=generator.device)
        return self.batch(index)

    @property
    def truth_point(self) -> Tensor | None:
        """[d] the point an LLC's w0 "truth" names: ``w0``, else the energy's known
        ``minimum``; None where the target knows neither."""
        return self.w0 if self.w0 is not None else self.minimum

    def initial(self, generator: torch.Generator, chains: int) -> Tensor:
        """Tensor[C, d] start: ``w0`` repeated when the target has one, else N(0, I) draws."""
        if self.w0 is not None:
            return self.w0.expand(chains, self.dim).clone()
        return torch.randn(
            chains, self.dim, generator=generator, device=generator.device, dtype=self.dtype
        )

    @property
    def has_prior(self) -> bool:
        """Whether kernels add ``prior_energy`` to U."""
        return self.prior_std is not None

    def prior_energy(self, w: Tensor) -> Tensor:
        """Tensor[C]: -log prior up to a constant (zero without a prior)."""
        if self.prior_std is None:
            return w.new_zeros(w.shape[0])
        return 0.5 * (w * w).sum(-1) / self.prior_std**2

    def prior_grad(self, w: Tensor) -> Tensor:
        if self.prior_std is None:
            return torch.zeros_like(w)
        return w / self.prior_std**2

    def energy_terms(
        self, w: Tensor, batch: Batch, nbeta: float, loss_grad: bool = True
    ) -> tuple[Tensor, Tensor | None, Tensor, Tensor]:
        """(L, grad L, U, grad U) with U = nbeta L + the prior: what a kernel's energy is made
        of. ``loss_grad=False``: grad L is not needed (None is allowed), which lets a target
        whose prior shares work with its loss (a reparametrisation) take one backward pass."""
        loss, grad = self.loss_and_grad(w, batch)
        # nbeta = 1 (potentials) leaves U as L; terms that are off are left out, not zeroed
        value, total = (loss, grad) if nbeta == 1 else (nbeta * loss, nbeta * grad)
        if self.has_prior:
            value, total = value + self.prior_energy(w), total + self.prior_grad(w)
        return loss, grad, value, total

    reparametrised: bool = False  # whether ``original`` is more than the identity

    def original(self, w: Tensor) -> Tensor:
        """The model's own parameters at sampling coordinates ``w`` ([..., d]): ``w`` itself,
        except where the target samples a reparametrisation (ntk-fcn's reprior: theta =
        T(phi)). Runs record these, so every chart, diagnostic and export shows them."""
        return w

    def original_target(self) -> Target:
        """The same model in its own parameters (``original``'s coordinates): what evaluates
        recorded positions (surfaces, exports). The target itself unless reparametrised."""
        return self

    def from_original(self, theta: Tensor) -> Tensor:
        """The sampling coordinates of the model's parameters ``theta`` (``original``'s
        inverse)."""
        return theta

    exact_sample: Callable[[torch.Generator, int], Tensor] | None = None
    marginals: dict[int, Callable[[Tensor], Tensor]] = {}
    mean: Tensor | None = None
    cov: Tensor | None = None

    def full_loss(self, w: Tensor, chunk: int = DATA_CHUNK) -> Tensor:
        """Tensor[C]: the loss on all n points (the mean per-sample loss for networks; the
        energy for potentials, which have no data), ``chunk`` data points per forward pass so
        memory stays bounded. Targets with an exact shortcut override this."""
        if self.n is None or self.n <= chunk:
            return self.loss(w)
        total = w.new_zeros(w.shape[0])
        for start in range(0, self.n, chunk):
            index = torch.arange(start, min(start + chunk, self.n), device=w.device)
            total += self.loss(w, self.batch(index)) * len(index)
        return total / self.n

    def plane_loss(
        self, theta: Tensor, vectors: Tensor, a: Tensor, b: Tensor, chunk: int
    ) -> Tensor:
        """Tensor[P]: the full-data loss at theta + a_p v0 + b_p v1 (``theta`` [d], ``vectors``
        [2, d], ``a`` and ``b`` [P]; loss-landscape surfaces), ``chunk`` points per batched
        pass. Networks whose structure makes the plane cheaper override this."""
        ab = torch.stack([a, b], 1)
        return torch.cat(
            [self.full_loss(theta + ab[s : s + chunk] @ vectors) for s in range(0, len(ab), chunk)]
        )

    # -- helpers shared by every target ----------------------------------------------------
    dtype: torch.dtype = torch.float32
    device: torch.device = torch.device("cpu")

    def check_position(self, w: Tensor) -> Tensor:
        if not isinstance(w, Tensor):
            raise ParamError("w", f"must be a torch.Tensor of shape [C, {self.dim}]")
        if w.ndim != 2 or w.shape[1] != self.dim:
            raise ParamError(
                "w", f"must have shape [C, {self.dim}] (chains x parameters), got {list(w.shape)}"
            )
        if w.dtype != self.dtype or w.device != self.device:
            raise ParamError(
                "w",
                f"is {w.dtype} on {w.device} but the target was built for "
                f"{self.dtype} on {self.device}; use target.to(...) or w.to(...)",
            )
        return w

    @abstractmethod
    def _loss(self, w: Tensor, batch: Batch) -> Tensor:
        """Tensor[C] for a checked position ``w: [C, d]``."""

    def _grad(self, w: Tensor, batch: Batch) -> Tensor:  # overridden where analytic
        return self._autograd(w, batch)[1]

    def _autograd(self, w: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
        # Chains are independent, so d(sum_c L_c)/dw_c is chain c's gradient.
        if torch.compiler.is_compiling():
            # torch.compile traces torch.func.grad into the graph, where autograd.grad would
            # break it; eager keeps autograd.grad, which is ~1.5x faster there. Same numbers.
            def total(x: Tensor) -> tuple[Tensor, Tensor]:
                value = self._loss(x, batch)
                return value.sum(), value

            g, value = torch.func.grad(total, has_aux=True)(w)
            return value, g
        with torch.enable_grad():
            x = w.detach().requires_grad_(True)
            value = self._loss(x, batch)
            if not value.requires_grad:  # a constant (a custom formula "2 * pi"): flat
                return value.detach(), torch.zeros_like(w)
            (g,) = torch.autograd.grad(value.sum(), x)
        return value.detach(), g

    def unflatten(self, w: Tensor) -> dict[str, Tensor]:
        """Split ``w: [C, d]`` into the named tensors of ``layout`` (views, batched over C).

        One ``split``, not a slice per tensor: its gradient is a single concatenation, where
        each slice's would zero a whole [C, d] buffer (11 of them per step on a DLN)."""
        sizes = [math.prod(shape) for shape in self.layout.values()]
        parts = w.split(sizes, dim=1)
        return {
            key: part.reshape(w.shape[0], *shape)
            for (key, shape), part in zip(self.layout.items(), parts, strict=True)
        }

    def to(
        self, device: str | torch.device | None = None, dtype: torch.dtype | None = None
    ) -> Target:
        """Move every floating tensor attribute (data, truths) to ``device``/``dtype``."""
        # An explicit index ("cuda:0", not "cuda") so that device comparisons with tensors hold.
        device = torch.empty(
            0, device=self.device if device is None else resolve_device(device)
        ).device
        dtype = self.dtype if dtype is None else resolve_dtype(dtype)
        for key, value in vars(self).items():
            if isinstance(value, Tensor):
                kw = {"dtype": dtype} if value.is_floating_point() else {}
                setattr(self, key, value.to(device=device, **kw))
        self.device, self.dtype = device, dtype
        return self

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} dim={self.dim} n={self.n}>"


def as_tuple(value: float | Sequence[float], length: int, field_name: str) -> tuple[float, ...]:
    """Broadcast a scalar or a length-1 list to ``length``; refuse other lengths."""
    values = tuple(value) if isinstance(value, (list, tuple)) else (value,)
    if len(values) == 1:
        return values * length
    if len(values) != length:
        raise ParamError(field_name, f"must have 1 or {length} entries, got {len(values)}")
    return values
