"""The Kernel contract: typed chain-batched states, the noise a step reads, divergence containment.

Every kernel targets U(w) = nbeta L(w) + (localization / 2) |w - center|^2 + prior(w), on all C
chains at once. A kernel declares its hyperparameters in its ``SPEC``, its state as a dataclass of
tensors, and the random draws one step consumes (``draws``). The draws come from a ``Noise``
stream that draws them in blocks of a fixed number of steps, so the eager loop and a compiled
chunk (``samplers.compiled``) read the very same numbers in the same order, and a run's first N
steps never depend on how many steps follow. ``step`` never synchronises with the host: a chain
that turns NaN/Inf is frozen where it was and flagged while the others go on untouched.
"""

from __future__ import annotations

import functools
import math
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar

import torch
from torch import Tensor

from landscapes import Target
from landscapes.base import Batch

from .spec import KernelSpec
from .state import Energy, Info, State


@dataclass(frozen=True)
class Draw:
    """One random draw a step makes: N(0, 1), U(0, 1), or integers in [0, high)."""

    kind: str  # "normal" | "uniform" | "integers"
    shape: tuple[int, ...]
    high: int | None = None


NOISE_BYTES = 32 << 20  # one block of draws at most (a big model gets blocks of fewer steps)
MAX_BLOCK = 256  # steps per block: also the compiled chunk's length
# A CPU generator is sequential (~3.5 ns a normal): a draw of SPLIT numbers or more is drawn as
# PARTS streams seeded from it, on up to torch's thread count (the numbers depend on PARTS only).
SPLIT, PARTS = 1 << 20, 8


class Noise:
    """A run's draws, made ``length`` steps at a time from one torch.Generator.

    Each block draws every ``Draw`` for all its steps in one call, in the order the kernel lists
    them; steps then read their rows. ``length`` follows from the shapes alone, so a seed gives
    the same numbers to every step whatever path (eager or compiled) reads them."""

    def __init__(
        self,
        draws: dict[str, Draw],
        generator: torch.Generator,
        dtype: torch.dtype,
        length: int | None = None,
    ):
        self.draws, self.generator, self.dtype = draws, generator, dtype
        size = {"integers": 8, "normal": dtype.itemsize, "uniform": dtype.itemsize}
        per_step = sum(math.prod(d.shape) * size[d.kind] for d in draws.values())
        fit = max(1, NOISE_BYTES // max(1, per_step))
        self.length = length or min(MAX_BLOCK, 1 << (fit.bit_length() - 1))  # a power of two
        self.block: dict[str, Tensor] = {}
        self.used = self.length  # rows of ``block`` already read

    def _draw(self) -> dict[str, Tensor]:
        g, device, n = self.generator, self.generator.device, self.length
        block = {}
        for name, d in self.draws.items():
            shape = (n, *d.shape)
            if d.kind == "integers":
                block[name] = torch.randint(d.high, shape, generator=g, device=device)
            elif device.type == "cpu" and math.prod(shape) >= SPLIT:
                block[name] = self._parts(d.kind, shape)
            else:
                fn = torch.randn if d.kind == "normal" else torch.rand
                block[name] = fn(shape, generator=g, device=device, dtype=self.dtype)
        return block

    def _parts(self, kind: str, shape: tuple[int, ...]) -> Tensor:
        """One big CPU draw as PARTS streams, each seeded from the run's generator."""
        out = torch.empty(shape, dtype=self.dtype)
        parts = out.view(-1).tensor_split(PARTS)
        seeds = torch.randint(1 << 62, (PARTS,), generator=self.generator).tolist()
        fill = Tensor.normal_ if kind == "normal" else Tensor.uniform_

        def draw(i: int) -> None:
            fill(parts[i], generator=torch.Generator().manual_seed(seeds[i]))

        with ThreadPoolExecutor(min(PARTS, torch.get_num_threads())) as pool:
            list(pool.map(draw, range(PARTS)))
        return out

    @property
    def left(self) -> int:
        """Steps left in the current block (a new block starts when none are)."""
        return self.length - self.used

    def take(self, steps: int) -> dict[str, Tensor]:
        """The next ``steps`` steps' draws, [steps, ...] each, all from one block
        (``steps`` at most ``left``, or at most ``length`` at a block's start)."""
        if self.used == self.length:
            self.block, self.used = self._draw(), 0
        if not 0 < steps <= self.left:
            raise ValueError(f"take {steps} steps: {self.left} are left in this block")
        rows = {k: v[self.used : self.used + steps] for k, v in self.block.items()}
        self.used += steps
        return rows


class Kernel(ABC):
    """A sampler with validated hyperparameters. Subclasses declare ``SPEC`` (a ``KernelSpec``:
    name, family, paper, hyperparameters, equation, acceptance band) and write ``update``: the
    equation.

    ``minibatch``: whether the kernel uses ``batch_size`` minibatches (stochastic-gradient kernels);
    MH kernels always use the full data, because their acceptance needs the exact U.
    """

    name = "kernel"
    minibatch: ClassVar[bool] = False
    # whether ``update`` takes ``trace``: a dict it fills with "proposal" (and "path")
    traces: ClassVar[bool] = False
    compilable: ClassVar[bool] = True  # whether ``samplers.compiled`` may compile its steps
    # a chain's step reads the other chains (SVGD, EQN, DE-MC-Z): they are not independent
    coupled: ClassVar[bool] = False
    # the chains are one ensemble of particles (SVGD, EQN): judged by the final particles, not
    # as chains (DE-MC-Z's chains, coupled through their archive, are each a Markov chain)
    particles: ClassVar[bool] = False
    # ``accepted`` is a probability (NUTS's accept_stat), recorded as a float, not a 0/1 flag
    fractional_acceptance: ClassVar[bool] = False
    # whether ``update`` reads grad L apart from grad U (adaptive preconditioners)
    uses_loss_grad: ClassVar[bool] = False
    # known biases a run with this kernel must warn about: {code: message}
    caveats: ClassVar[dict[str, str]] = {}

    # the kernel's one declaration: name, hyperparameters, equation, paper, acceptance band
    SPEC: ClassVar[KernelSpec | None] = None
    # hyperparameters every kernel takes (their defaults, like all others, come from SPEC)
    step_size: float
    nbeta: float | None
    localization: float

    def __init_subclass__(cls, **kwargs: Any):
        """Bind a class's own ``SPEC`` to it (builder, docstring) and set its hyperparameter
        attributes to the spec's defaults: the one place they are declared."""
        super().__init_subclass__(**kwargs)
        spec = cls.__dict__.get("SPEC")
        if spec is None:
            return
        doc = cls.__doc__ if spec.doc is None else spec.doc
        cls.SPEC = replace(spec, doc=doc, build=spec.build or cls)
        cls.name = spec.name
        for param in spec.params:
            setattr(cls, param.name, param.default)

    def __init__(self, **params: Any):
        declared = {p.name for p in self.SPEC.params} if self.SPEC else set()
        unknown = set(params) - declared
        if unknown:
            raise TypeError(f"{type(self).__name__} takes no hyperparameter {sorted(unknown)}")
        self.params = params
        for key, value in params.items():
            setattr(self, key, value)

    # -- the contract ------------------------------------------------------------------------
    def draws(self, target: Target, chains: int, dim: int) -> dict[str, Draw]:
        """The draws one step makes: the kernel's own (``noise``) and each chain's minibatch
        indices, drawn independently per chain: with one batch shared by all chains their
        estimates were correlated, and the SE over chains understated the error (2.9x on a
        polynomial target, tests/test_llc_se.py)."""
        own = self.noise(chains, dim)
        if self.uses_batches(target):
            own["index"] = Draw("integers", (chains, self.batch_size), target.n)
        elif self.minibatch and target.n is None and target.gradient_noise:
            own["gradient_noise"] = Draw("normal", (chains, dim))  # a potential's "minibatch"
        return own

    def noise_for(
        self, state: State, target: Target, generator: torch.Generator, most: int | None = None
    ) -> Noise:
        """The noise stream of a run from ``state`` drawn from ``generator`` (in blocks of at
        most ``most`` steps when given: a stream for a single call of that many steps)."""
        chains, dim = state.position.shape
        noise = Noise(self.draws(target, chains, dim), generator, state.position.dtype)
        if most is not None and most < noise.length:
            noise.length = noise.used = max(1, most)
        return noise

    def init(self, position: Tensor, target: Target, generator: torch.Generator) -> State:
        """Start all chains at ``position`` ([C, d]); the localisation centre is that point.
        Kernels that start with random values (a momentum) draw them from ``generator``."""
        position = target.check_position(position)
        base = State(
            position.clone(),
            position.clone(),
            torch.zeros(position.shape[0], dtype=torch.bool, device=position.device),
        )
        state = self.start(base, target, generator)
        return replace(state, diverged=~finite(state))

    def step(
        self, state: State, target: Target, noise: dict[str, Tensor], trace: bool = False
    ) -> tuple[State, Info]:
        """One step with one step's draws (``noise``: [C, ...] each, as ``draws`` lists);
        ``trace``: also report each chain's proposal (and integrator path) in the Info."""
        batch = target.batch(noise["index"]) if "index" in noise else noise.get("gradient_noise")
        extras: dict[str, Tensor] = {}
        if trace and self.traces:
            new, loss, accepted = self.update(state, target, batch, noise, trace=extras)
        else:
            new, loss, accepted = self.update(state, target, batch, noise)
        new, info = contain(state, new, loss, accepted, self.observe(new))
        if trace:
            info.proposal = extras.get("proposal", new.position)
            info.path = extras.get("path")
        return new, info

    def run(
        self,
        state: State,
        target: Target,
        noise: Noise | torch.Generator,
        steps: int,
        compiled: bool = False,
        positions: bool = False,
    ) -> tuple[State, Info]:
        """``steps`` steps; returns the final state and every step's Info stacked as [T, C]
        (each step's position in ``info.position``, [T, C, d], when ``positions``).

        ``noise``: the run's ``Noise`` (carry it from call to call: a run's first N steps then
        never depend on how many follow), or a generator, for a stream of this call alone.
        ``compiled=True`` runs the stream's blocks as compiled chunks (``samplers.compiled``;
        compiled on first use, then reused; a part of a block when ``usable``) and the rest
        eagerly: the same draws either way, so the trajectories agree to float rounding."""
        if isinstance(noise, torch.Generator):
            noise = self.noise_for(state, target, noise, most=steps)
        chunk = None
        if compiled:
            from .compiled import chunk_for  # torch's compiler: loaded when asked for

            chunk = chunk_for(self, target, state, noise.length, positions, wait=True)
        infos = []
        while steps > 0:
            n = min(steps, noise.left or noise.length)
            if chunk is not None and chunk.usable(n):
                state, info = chunk(state, noise.take(n))
            else:
                state, info = self.eager(state, target, noise.take(n), positions)
            infos.append(info)
            steps -= n
        if not infos:  # zero steps: empty [0, C] records
            empty = state.position.new_empty(0, state.position.shape[0])
            return state, Info(empty, empty, empty.bool(), None)
        return state, stack_infos(infos)

    def make_chunk(self, target: Target, state: State, length: int, positions: bool):
        """This kernel's compiled block (``samplers.compiled.Chunk``: ``step`` over a block's
        rows as one call), or None where it compiles nothing."""
        from .compiled import Chunk

        return Chunk(self, target, state, length, positions)

    def eager(
        self,
        state: State,
        target: Target,
        noise: dict[str, Tensor],
        positions: bool = False,
        trace: bool = False,
    ) -> tuple[State, Info]:
        """One step per row of ``noise`` ([T, ...] each), in Python; Infos stacked [T, C]
        (with each step's proposals and paths when ``trace``)."""
        infos = []
        for t in range(next(iter(noise.values())).shape[0] if noise else 0):
            state, info = self.step(state, target, {k: v[t] for k, v in noise.items()}, trace)
            info.position = state.position if positions else None
            infos.append(info)
        return state, stack_steps(infos)

    # -- what each kernel writes -------------------------------------------------------------
    def noise(self, chains: int, dim: int) -> dict[str, Draw]:
        """The kernel's own draws per step (a minibatch's indices are added by ``draws``). A
        kernel without randomness (SVGD) declares one zero-size draw: the stream still counts
        its steps."""
        return {"xi": Draw("normal", (chains, dim))}

    def initial(self, target: Target, generator: torch.Generator, chains: int) -> Tensor:
        """[C, d] where a run's chains start when its spec gives no start: the target's own
        (``Target.initial``). An ensemble kernel whose paper starts its walkers otherwise (EQN:
        all at one point) says so here."""
        return target.initial(generator, chains)

    def start(self, state: State, target: Target, generator: torch.Generator) -> State:
        """The kernel's state at the start (its own dataclass); the base state by default."""
        return state

    def observe(self, state: State) -> dict[str, Tensor]:
        """Per-chain scalars worth recording at every step (kinetic energy, thermostat)."""
        return {}

    @abstractmethod
    def update(
        self, state: State, target: Target, batch: Batch, noise: dict[str, Tensor]
    ) -> tuple[State, Tensor, Tensor]:
        """One step of the kernel's equation: (new state, loss to report, accepted [C] float)."""

    # -- shared pieces ---------------------------------------------------------------------------
    def nbeta_for(self, target: Target) -> float:
        return target.nbeta if self.nbeta is None else self.nbeta

    def energy(self, w: Tensor, state: State, target: Target, batch: Batch) -> Energy:
        """U = nbeta L + (localization/2)|w - center|^2 + prior, and its gradient."""
        nbeta = self.nbeta_for(target)
        loss, loss_grad, value, grad = target.energy_terms(w, batch, nbeta, self.uses_loss_grad)
        if self.localization:
            diff = w - state.center
            loc = self.localization
            value, grad = value + 0.5 * loc * (diff * diff).sum(-1), grad + loc * diff
        return Energy(loss, loss_grad, value, grad)

    def langevin_step(self, state: State) -> float | Tensor | None:
        """The step of the Langevin move this kernel makes at ``state``, w <- w - (eps/2) grad U
        + sqrt(eps) eta: a float, or [C, d] where a preconditioner sets it per chain and
        coordinate; None for a kernel without a step (slice sampling). For SGLD it is
        ``step_size``; the LLC's acceptance probe proposes with it."""
        return getattr(self, "step_size", None)

    def uses_batches(self, target: Target) -> bool:
        size = getattr(self, "batch_size", None)
        return self.minibatch and size is not None and target.n is not None and size < target.n


@functools.cache
def _fields(cls: type) -> tuple[str, ...]:
    """A state class's field names but the localisation centre (``fields`` walks the class's
    dataclass machinery at every call: twice a step)."""
    return tuple(f.name for f in fields(cls) if f.name != "center")


def per_chain(state: State) -> list[str]:
    """The names of ``state``'s float tensors that hold one row per chain (frozen on divergence)."""
    chains = state.position.shape[0]
    # dynamo cannot read a dataclass's fields from its class (a compile traces this): the
    # instance's, there
    names = (
        [f.name for f in fields(state) if f.name != "center"]
        if torch.compiler.is_compiling()
        else _fields(type(state))
    )
    return [
        name
        for name in names
        if isinstance(v := getattr(state, name), Tensor)
        and v.is_floating_point()
        and v.ndim >= 1
        and v.shape[0] == chains
    ]


def _finite_rows(value: Tensor) -> Tensor:
    """[C] bool: every entry of each row of ``value`` ([C, ...]) is finite."""
    ok = torch.isfinite(value)
    if value.ndim <= 2:
        return ok if value.ndim == 1 else ok.all(-1)
    return ok.reshape(value.shape[0], -1).all(-1)


def finite(state: State, names: list[str] | None = None) -> Tensor:
    """[C] bool: every per-chain value of the chain is finite (``names``: ``per_chain(state)``,
    when the caller has them)."""
    ok = None
    for name in per_chain(state) if names is None else names:
        rows = _finite_rows(getattr(state, name))
        ok = rows if ok is None else ok & rows
    return torch.ones_like(state.diverged) if ok is None else ok


def _replace(state: State, **changes: Any) -> State:
    """``dataclasses.replace`` for a state class without ``__post_init__``: the same new object
    without re-running its ``__init__`` (a step makes one or two). Compiled code (which traces
    the step once) keeps ``replace``."""
    cls = type(state)
    plain = hasattr(state, "__dict__") and not hasattr(cls, "__post_init__")
    if torch.compiler.is_compiling() or not plain:
        return replace(state, **changes)
    new = cls.__new__(cls)
    new.__dict__.update(state.__dict__)
    new.__dict__.update(changes)
    return new


def _masked(value: Tensor, diverged: Tensor, fill: float, like: Tensor) -> Tensor:
    """torch.where(diverged, torch.full_like(like, fill), value), in one operation where that
    keeps ``value``'s dtype and shape (masked_fill never promotes), else as written."""
    same = value.shape == diverged.shape
    if same and torch.promote_types(like.dtype, value.dtype) == value.dtype:
        return value.masked_fill(diverged, fill)
    return torch.where(diverged, torch.full_like(like, fill), value)


def contain(
    old: State, new: State, loss: Tensor, accepted: Tensor, scalars: dict[str, Tensor]
) -> tuple[State, Info]:
    """Freeze chains whose new state (or the loss the step saw) is not finite, and flag them."""
    names = per_chain(new)
    diverged = old.diverged | ~(finite(new, names) & _finite_rows(loss))
    kept = {}
    for name in names:
        value = getattr(new, name)
        mask = diverged if value.ndim == 1 else diverged.view(-1, *[1] * (value.ndim - 1))
        kept[name] = torch.where(mask, getattr(old, name), value)
    frozen = _replace(new, diverged=diverged, **kept)
    info = Info(
        loss=_masked(loss, diverged, math.nan, loss),
        accepted=_masked(accepted, diverged, 0.0, accepted),
        diverged=diverged,
        scalars={k: _masked(v, diverged, math.nan, loss) for k, v in scalars.items()},
    )
    return frozen, info


def stack_steps(infos: list[Info]) -> Info:
    """Per-step Infos ([C] each, at least one) into one Info of [T, C] tensors: ``stack_infos``
    of single steps, one torch.stack per piece."""
    first = infos[0]
    if any(v.ndim != 1 for v in first.scalars.values()):  # stack_infos flattens these
        return stack_infos(infos)

    def stacked(name: str) -> Tensor | None:
        if getattr(first, name) is None:
            return None
        return torch.stack([getattr(i, name) for i in infos])

    return Info(
        stacked("loss"),
        stacked("accepted"),
        stacked("diverged"),
        stacked("position"),
        {k: torch.stack([i.scalars[k] for i in infos]) for k in first.scalars},
        stacked("proposal"),
        stacked("path"),
    )


def stack_infos(infos: list[Info]) -> Info:
    """Per-step Infos ([C]) or blocks ([T, C]) into one Info of [T, C] tensors."""

    def cat(parts: list[Tensor], ndim: int = 2) -> Tensor:
        parts = [x.reshape(-1, *x.shape[x.ndim - ndim + 1 :]) for x in parts]
        return parts[0] if len(parts) == 1 else torch.cat(parts)  # one block: no copy

    def optional(name: str, ndim: int) -> Tensor | None:
        first = getattr(infos[0], name)
        return None if first is None else cat([getattr(i, name) for i in infos], ndim)

    return Info(
        cat([i.loss for i in infos]),
        cat([i.accepted for i in infos]),
        cat([i.diverged for i in infos]),
        optional("position", 3),
        {k: cat([i.scalars[k] for i in infos]) for k in infos[0].scalars},
        optional("proposal", 3),
        optional("path", 4),
    )
