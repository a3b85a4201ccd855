"""What a kernel declares once, beside its update: ``KernelSpec`` (its registry entry, equation,
explanation and acceptance band), the papers and the parameters kernels share.

A kernel class sets ``SPEC = KernelSpec(...)`` in its body; ``Kernel.__init_subclass__`` binds the
spec to the class (its builder, and its docstring as the entry's doc unless one is given) and
sets the class's hyperparameter attributes from the spec's ``Param`` defaults, so a
hyperparameter is written in one place. ``samplers.registry`` only collects the specs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from landscapes import Param, Spec

P000 = "Hitchcock & Hoogland (2025), local posterior sampling benchmark"
P001 = "Yu et al., SGRLD in non-diagonal metrics (TMLR)"
P002 = "Hron et al. (2022), wide BNNs have a simple weight posterior"
P003 = "Heber et al. (2020), TATi"

STEP = Param("step_size", "float", 1e-3, "step size epsilon", 1e-12, 10.0)
NBETA = Param(
    "nbeta",
    "float",
    None,
    "n beta, the weight of the loss (empty: the target's: 1 "
    "for potentials, n / log n for networks)",
    1e-12,
    1e12,
    optional=True,
)
LOC = Param(
    "localization", "float", 0.0, "gamma: pull towards the start, (gamma/2)|w - w0|^2", 0.0, 1e12
)
BATCH = Param(
    "batch_size", "int", None, "minibatch size (empty: full batch)", 1, 10_000_000, optional=True
)
VARIANT = Param(
    "variant",
    "choice",
    "corrected",
    "corrected (temperature-correct, default) or paper (as printed, for comparison)",
    choices=("corrected", "paper"),
)
FRICTION = Param("friction", "float", 1.0, "friction gamma (rate of the O step)", 0.0, 1e6)
TEMPERATURE = Param("temperature", "float", 1.0, "temperature T (target exp(-U/T))", 1e-6, 1e6)
# Hitchcock & Hoogland, Algs. 2-3: a > 0 and b1, b2 in (0, 1). At a = 0 a chain whose gradient
# vanishes in a coordinate (a stationary point, a dead unit) gets the step eps / 0 and diverges.
STABILITY = Param("a", "float", 0.1, "stability constant a (> 0)", 1e-8, 1e6)
EMA_RATE = (1e-6, 0.999999)  # the open interval (0, 1), closed at 1e-6 from either end
SG = (STEP, NBETA, LOC, BATCH)
MH = (STEP, NBETA, LOC)


@dataclass(frozen=True)
class Watch:
    """A per-step scalar (the kernel's ``observe``) a run is judged by where no acceptance rate
    says whether the kernel's settings suit the target (``runs.verdict``): a mean above ``high``
    means what ``why`` says (with its source); ``advice`` is what to try."""

    scalar: str
    high: float
    why: str
    advice: str


@dataclass(frozen=True)
class KernelSpec(Spec):
    """A kernel's registry entry (``kind`` is its family: sgmcmc, mcmc, ensemble, splitting) with
    what the teaching views show: ``equation`` (the update as implemented, LaTeX), ``text`` (a
    paragraph; its source is appended from ``paper``) and ``acceptance``, the band (lo, hi) of
    mean acceptance where the kernel's step is sensible (None: no band; ``runs.verdict``):
    below it proposals are mostly rejected (a step too large for the target's curvature),
    above it the step is needlessly small. ``watch``: the scalars a kernel without an MH test
    is judged by instead (``Watch``).

    ``doc`` and ``build`` may be left None in a class body: the class fills them in (its
    docstring and itself)."""

    equation: str = ""
    text: str = ""
    acceptance: tuple[float, float] | None = None
    watch: tuple[Watch, ...] = ()


def kernel_spec(
    name: str,
    family: str,
    paper: str,
    params: tuple[Param, ...] | list[Param],
    *,
    doc: str | None = None,
    build: Any = None,
    equation: str = "",
    text: str = "",
    acceptance: tuple[float, float] | None = None,
    watch: tuple[Watch, ...] = (),
) -> KernelSpec:
    """A ``KernelSpec`` written with keywords, as kernel classes declare it."""
    return KernelSpec(name, family, doc, paper, params, build, equation, text, acceptance, watch)


def aligned(*rows: str) -> str:
    """LaTeX rows, one under the other, aligned."""
    return r"\begin{aligned}" + r" \\ ".join(rows) + r"\end{aligned}"
