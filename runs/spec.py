"""RunSpec: the validated description of one background run, and what its target is before it
is built (``TargetFacts``).

The app and the CLI both produce a RunSpec; the worker builds the run from it (``runs.build``),
after ``runs.budget`` checked its size. Target and sampler parameters are validated by their
registries (the single source of ranges and defaults), so a spec always holds complete, coerced
params and survives a JSON round trip unchanged.
"""

from __future__ import annotations

import functools
import json
import math
import re
import types
from typing import Any, Literal, NamedTuple, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

import landscapes
import samplers
from landscapes.base import ParamError, shown
from landscapes.registry import facts as landscape_facts
from runs import nested_spec
from samplers import llc
from samplers.warmup import run_params

# Observables computed alongside the chains (runs.observe): name -> one-line doc.
OBSERVABLES: dict[str, str] = {
    "llc": "local learning coefficient at w0: nbeta (E[L] - L(w0)), live, with health warnings",
    "predictive": "posterior-predictive metrics of the kept draws on the test set: ensemble "
    "log p, accuracy, ECE, confidence, curvature",
    "ess": "per-step ESS (TFP's truncation) of fixed random projections of theta and of the "
    "test predictions f(X_test): min / mean / max over projections, live (Hron et al. 2022)",
    "thermo": "TATi's thermodynamic averages over every step after the burn-in: the virial "
    "w . grad U (d T for a confining U; one more gradient a step) and the kinetic energy (d T / 2)",
}

ESS_PROJECTIONS = 50  # random directions of theta (and of f(X_test)) the "ess" observable records
GiB = 2**30
# A spec file is read only when it is at most this large and nested at most this deep (a RunSpec
# is a few hundred bytes; its deepest value, a list in a parameter, is 4 levels down).
MAX_SPEC_BYTES = 2**20
MAX_SPEC_DEPTH = 20
MAX_START = 2000  # a start position is typed: at most a potential's largest d
START_ALLOWED = f"a list of the target's d numbers (at most {MAX_START})"
START_CLI = {"cli": {"help": "where every chain starts: d numbers (default: the target's start)"}}
MAX_VI_DIM = 100_000  # a vi run's flow: four couplings of 2 x 3 layers of d x hidden weights


class SpecError(ValueError):
    """A bad run spec: ``field`` is the dotted path, ``message`` says what was given and allowed."""

    def __init__(self, field: str, message: str):
        self.field, self.message = field, message
        super().__init__(f"{field}: {message}")


def _fail(field: str, message: str) -> PydanticCustomError:
    # A pydantic error that carries our own field path and message through ValidationError
    message = re.sub(r"\d{21,}", lambda m: shown(int(m[0])), message)  # 400 digits: 20 of them
    return PydanticCustomError("spec", "{field}: {message}", {"field": field, "message": message})


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _not_bool(cls, value: Any) -> Any:
        if isinstance(value, bool):  # pydantic's lax mode would read True as 1 chain
            raise ValueError("no field takes a boolean")
        return value


class Component(_Model):
    """A target or a sampler: a registry name and its parameters (completed on validation)."""

    name: str
    params: dict[str, Any] = {}


class Record(_Model):
    """What the run loop records besides loss, accepted and diverged."""

    positions: Literal["auto", "all", "projection", "none"] = "auto"  # auto: all when d <= 64
    projection_dim: int = Field(8, ge=1, le=64)  # dims of the random projection when d > 64
    snapshots: int = Field(200, ge=0, le=10_000)  # thinned full positions for PCA when d > 64
    # the first steps of the first ANIMATED_CHAINS chains traced with every proposal (and
    # HMC/NUTS path), for the pages' animation; 0: none. Runs recording all positions only.
    animate: int = Field(0, ge=0, le=5_000)


class LLCOptions(_Model):
    """Where an LLC run's chains start (w0) and what its baseline is; used with "llc"."""

    w0: Literal["auto", "train", "truth", "init"] = Field(
        "auto",
        description="one of ['auto', 'train', 'truth', 'init'] (auto: train on data targets, "
        "else the target's known point)",
        json_schema_extra={
            "cli": {"help": "where the chains start: train (default on data targets), truth, init"}
        },
    )
    baseline: Literal["full", "minibatch"] = Field(
        "full", json_schema_extra={"cli": {"help": "L(w0): full data (default)"}}
    )
    train_optimizer: Literal["adam", "sgd"] = "adam"
    train_steps: int = Field(5000, ge=0, le=10_000_000)
    train_lr: float = Field(1e-3, gt=0, le=10, description="a number in (0, 10]")
    train_batch_size: int | None = Field(
        None,
        ge=1,
        le=10_000_000,  # the samplers' batch_size bound: no dataset here is larger
        description="an integer in [1, 10000000], or null: full batch up to 4096 points, else 512",
    )
    train_patience: int = Field(500, ge=1, le=10_000_000)


class VIOptions(_Model):
    """A variational fit (the ``vi`` run kind; docs/methods/vi.md, ``samplers.vi``): a flow of
    ``layers`` affine couplings on a generalized-gamma source (the paper's nf_gamma: lambda =
    (1, lambda0, ...), k = k0, beta = (n, beta0, ...), learned) or a fixed Gaussian of the same
    mean and variance (nf_gaussian), trained by Adam on Psi = ELBO + n S_n."""

    source: Literal["gamma", "gaussian"] = "gamma"
    lambda0: float = Field(500.0, gt=0, le=1e6, description="a number in (0, 1e6]")
    k0: float = Field(1.0, gt=0, le=100, description="a number in (0, 100]")
    beta0: float = Field(100.0, gt=0, le=1e8, description="a number in (0, 1e8]")
    # phi = N(prior_mean, prior_variance I): the VI paper's pairs are (mean, variance)
    prior_mean: float = Field(5.0, ge=-1e6, le=1e6, description="a number in [-1e6, 1e6]")
    prior_variance: float = Field(100.0, gt=0, le=1e12, description="a number in (0, 1e12]")
    # the data's noise sd (regression); None: the target's own (noise_std, sigma, else 1)
    sigma: float | None = Field(
        None, gt=0, le=1e6, description="a number in (0, 1e6], or null: the target's noise sd"
    )
    epochs: int = Field(300, ge=1, le=1_000_000)
    samples: int = Field(5, ge=1, le=10_000)  # M, draws per step
    batch_fraction: float = Field(0.1, gt=0, le=1, description="a number in (0, 1]")
    lr_flow: float = Field(1e-3, gt=0, le=10, description="a number in (0, 10]")
    lr_k: float = Field(1e-3, gt=0, le=10, description="a number in (0, 10]")
    lr_lambda_beta: float = Field(1e-1, gt=0, le=10, description="a number in (0, 10]")
    layers: int = Field(4, ge=1, le=32)
    hidden: int = Field(16, ge=1, le=4096)
    final_samples: int = Field(100, ge=2, le=100_000)  # the final Psi's draws
    # fit on the first ``points`` training points (a nested n-scan: one dataset, its first n
    # points, so the scan's fits differ in n and not in their noise draws); None: all n
    points: int | None = Field(None, ge=2, le=10_000_000, description="an integer >= 2, or null")


# A vi run fits one flow: these fields of a sampling run mean nothing there, and are refused
# rather than ignored (nothing runs with a value the user gave that it does not use).
SAMPLE_ONLY = (
    "sampler", "chains", "steps", "burn_in", "thin", "record", "observables", "llc",
    "flush_every", "compile", "start",
)  # fmt: skip


class RunSpec(_Model):
    # "sample": a kernel on a target (sampler required); "vi": a variational fit (vi options)
    kind: Literal["sample", "vi", "nested"] = Field(
        "sample",
        json_schema_extra={
            "cli": {
                "help": "sample (a sampler on the target; default), vi (a variational fit, "
                "--vi-param) or nested (nested sampling's evidence, --nested-param)"
            }
        },
    )
    target: Component
    sampler: Component | None = Field(None, json_schema_extra={"cli": {"params_flag": "param"}})
    vi: VIOptions | None = Field(
        None,
        json_schema_extra={
            "cli": {
                "help": "a vi run's option: source (gamma, gaussian), epochs, prior_mean, "
                "prior_variance, ..."
            }
        },
    )
    nested: nested_spec.Options | None = nested_spec.FIELD  # its settings: PARAMS
    # Bounds (ge, le) also write the error messages; those that depend on steps are in _check.
    chains: int = Field(64, ge=1, le=1_000_000)
    steps: int = Field(1000, ge=1, le=1_000_000_000)
    burn_in: int = 0  # 0 .. steps-1
    thin: int = 1  # 1 .. steps
    seed: int = Field(0, ge=0, le=2**31 - 1)
    device: str = Field(
        "auto",
        description="'auto', 'cpu', 'cuda' or 'cuda:<i>'",
        json_schema_extra={"cli": {"help": "auto (CUDA when present), cpu, cuda or cuda:<i>"}},
    )
    dtype: Literal["float32", "float64"] = "float32"
    record: Record = Field(Record(), json_schema_extra={"cli": None})  # no flag: a spec file's
    observables: list[str] = Field(
        [],
        json_schema_extra={
            "cli": {
                "flag": "observe",
                "metavar": "NAME",
                "help": "an observable, repeatable: llc, predictive (test-set metrics), "
                "thermo (virial, K), ess (per step)",
            }
        },
    )
    llc: LLCOptions = Field(
        LLCOptions(), json_schema_extra={"cli": {"group": "LLC (with --observe llc)"}}
    )
    flush_every: int = 0  # 0: auto (every ~0.5 s); else 1 .. steps
    # Compiled chunks of steps (samplers.compiled): "auto" uses a chunk compiled earlier (kept
    # on disk, samplers.cache) from the first whole block, else compiles in the background once
    # the eager remainder of the run would take seconds and switches when ready; "always"
    # compiles (or loads) before the first whole block; "never" steps eagerly. Both paths read
    # the same draws, so the run is the same to float rounding. The summary's "compiled" says
    # which ran.
    compile: Literal["auto", "always", "never"] = Field(
        "auto",
        json_schema_extra={
            "cli": {
                "help": "compiled chunks of steps: auto (a kernel compiled before, from the "
                "cache; else when the compile pays within the run; default)"
            }
        },
    )
    start: list[float] | None = Field(  # None: the target's own (w0, N(0, I) draws, an init)
        None, max_length=MAX_START, description=START_ALLOWED, json_schema_extra=START_CLI
    )

    @model_validator(mode="after")
    def _check(self) -> RunSpec:
        # Only the syntax: a spec written on a GPU machine must still load (from the store) on
        # one without; availability is checked by runs.budget.check_budget and runs.build.
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", self.device):
            raise _fail(
                "device", f"must be {_allowed(RunSpec.model_fields['device'])}, got {self.device!r}"
            )
        if self.kind != "sample":  # vi and nested: a target and the kind's own options
            return self._check_vi()
        if self.sampler is None:
            raise _fail("sampler", "is required for a sampling run (kind 'sample')")
        if other := "vi" if self.vi is not None else "nested" if self.nested else None:
            raise _fail(other, f"is for kind '{other}' runs only; this run's kind is 'sample'")
        steps = self.steps
        for field, low, high, note in (
            ("burn_in", 0, steps - 1, " (below steps)"),
            ("thin", 1, steps, " (at most steps)"),
            ("flush_every", 0, steps, " (0: auto)"),
        ):
            if not low <= (value := getattr(self, field)) <= high:
                raise _fail(field, f"must be an integer in [{low}, {high}]{note}, got {value}")
        for name in self.observables:
            if name not in OBSERVABLES:
                raise _fail(
                    "observables", f"must be names from {sorted(OBSERVABLES)}, got {name!r}"
                )
        if "predictive" in self.observables and self.record.positions == "none":
            raise _fail(
                "record.positions",
                "must record positions for the 'predictive' observable, which evaluates the "
                "kept draws; got 'none' (use 'auto')",
            )
        self._llc_defaults()
        for role, registry in (("target", landscapes.REGISTRY), ("sampler", samplers.REGISTRY)):
            part = getattr(self, role)
            if part.name not in registry:
                raise _fail(f"{role}.name", f"must be one of {sorted(registry)}, got {part.name!r}")
            try:  # storing the validated params back makes JSON lists tuples again: round trip
                part.params = registry[part.name].validate(part.params)
            except ParamError as exc:
                raise _fail(*param_error(exc, role, part.name)) from None
        self._warmup_defaults()
        if "predictive" in self.observables:
            self._check_predictive()
        if self.target.params.get("parametrisation") == "reprior":
            self._check_reprior()
        if self.start is not None:
            self._check_start()
        return self

    def _check_vi(self) -> RunSpec:
        # a default is no choice (a stored spec holds every field): only other values are refused
        given = [n for n in SAMPLE_ONLY if getattr(self, n) != RunSpec.model_fields[n].default]
        given += [k for k in ("vi", "nested") if k != self.kind and getattr(self, k) is not None]
        if given:
            keys = [p.name for p in nested_spec.PARAMS] if self.kind == "nested" else None
            raise _fail(
                given[0],
                f"does not apply to a {self.kind} run (its options are under '{self.kind}': "
                f"{keys or list(VIOptions.model_fields)})",
            )
        registry = landscapes.REGISTRY
        if self.target.name not in registry:
            name = self.target.name
            raise _fail("target.name", f"must be one of {sorted(registry)}, got {name!r}")
        try:
            self.target.params = registry[self.target.name].validate(self.target.params)
        except ParamError as exc:
            raise _fail(*param_error(exc, "target", self.target.name)) from None
        if self.kind == "nested":  # a potential with a box (runs.nested_spec.boxed)
            self.nested = nested_spec.boxed(self.target.name, self.target.params, self.nested)
            return self
        self.vi = self.vi or VIOptions()
        if self.target.params.get("parametrisation") == "reprior":
            raise _fail(
                "target.params.parametrisation",
                "must be 'standard' for a vi run: the flow fits the posterior of the network's "
                "own weights, got 'reprior'",
            )
        try:
            facts = _target_facts(self.target.name, json.dumps(self.target.params, sort_keys=True))
        except ParamError as exc:
            raise _fail(*param_error(exc, "target", self.target.name)) from None
        points = self.vi.points
        if points is not None and (facts.n is None or points > facts.n):
            have = "a potential, which has no data" if facts.n is None else f"n = {facts.n}"
            raise _fail(
                "vi.points",
                f"must be empty or an integer in [2, n], the target's training points; "
                f"{self.target.name} has {have}, got {points}",
            )
        if facts.dim > MAX_VI_DIM:
            raise _fail(
                "target",
                f"has d = {facts.dim} parameters; a vi run's flow takes at most {MAX_VI_DIM} "
                "(its couplings' layers are d x hidden): choose a smaller network",
            )
        return self

    def _check_start(self) -> None:
        name = self.target.name
        try:
            dim = _target_facts(name, json.dumps(self.target.params, sort_keys=True)).dim
        except ParamError as exc:
            raise _fail(*param_error(exc, "target", name)) from None
        if len(self.start) != dim or not all(math.isfinite(x) for x in self.start):
            raise _fail("start", f"must be {dim} finite numbers (the target's d), got {self.start}")
        if self.observables:
            raise _fail(
                "start",
                f"cannot be set with observables {self.observables}: they "
                "choose where the chains start (an LLC's w0)",
            )

    def _check_predictive(self) -> None:
        """The "predictive" observable needs a classification network: from the target's facts,
        parameter arithmetic that builds nothing (``landscapes.registry.facts``)."""
        name = self.target.name
        try:
            facts = _target_facts(name, json.dumps(self.target.params, sort_keys=True))
        except ParamError as exc:  # a size over the limits: named as check_budget names it
            raise _fail(*param_error(exc, "target", name)) from None
        if facts.classes is None:
            what = "a regression network" if facts.has_data else "a potential (no data)"
            raise _fail(
                "observables",
                f"'predictive' needs a classification network (mlp or slp on a classification "
                f"dataset: digits, moons); {name} with these parameters is {what}",
            )
        if not facts.n_test:
            raise _fail(
                "observables",
                f"'predictive' evaluates the draws on a test set, and {name} has none (a model's "
                "factory gives training data only)",
            )

    def _check_reprior(self) -> None:
        """Repriorisation (Hron et al. 2022) samples the Bayesian posterior of a Gaussian prior and
        likelihood on the full data in phi; it refuses what would make phi mean something else."""
        why = (
            "repriorisation samples the Gaussian-prior, Gaussian-likelihood posterior on the "
            "full batch (use parametrisation 'standard' for this)"
        )
        for name in ("llc", "thermo"):
            if name in self.observables:
                what = {
                    "llc": "the LLC localises at w0 with a tempered, localised posterior",
                    "thermo": "the virial is taken in the sampled coordinates",
                }[name]
                raise _fail("observables", f"'{name}' cannot run with reprior: {what}; {why}")
        params = self.sampler.params
        if params.get("localization"):
            raise _fail(
                "sampler.params.localization",
                f"must be 0 with reprior, got {params['localization']}: a pull toward the "
                f"start in phi is not the one in theta; {why}",
            )
        size, n = params.get("batch_size"), self.target.params["n"]
        if size is not None and size < n:
            raise _fail(
                "sampler.params.batch_size",
                f"must be empty (full batch) or >= n = {n} with reprior, got {size}: the map "
                f"reads every training point at every step; {why}",
            )

    def _warmup_defaults(self) -> None:
        kernel = samplers.REGISTRY[self.sampler.name]
        if not any(p.name == "step_size" and p.auto for p in kernel.params):
            return  # reprior-lmc's warmup is its own (a step adapted per chain)
        try:  # step_size auto: the warm-up is the burn-in unless given (samplers.warmup)
            self.sampler.params = run_params(self.sampler.params, self.burn_in, self.steps)
        except ParamError as exc:
            raise _fail(exc.field, str(exc).removeprefix(f"{exc.field}: ")) from None

    def _llc_defaults(self) -> None:
        """LLC runs on networks localise at w0 with gamma = ``llc.LOCALIZATION`` unless the spec
        says otherwise (potentials keep the kernel's 0: their prior localises them)."""
        target = landscapes.REGISTRY.get(self.target.name)
        sampler = samplers.REGISTRY.get(self.sampler.name)
        if "llc" not in self.observables or target is None or sampler is None:
            return
        takes = any(p.name == "localization" for p in sampler.params)
        if target.kind == "network" and takes and "localization" not in self.sampler.params:
            self.sampler.params = {**self.sampler.params, "localization": llc.LOCALIZATION}


def param_error(exc: ParamError, role: str, name: str) -> tuple[str, str]:
    """Registry errors name "<name>.<param>"; users wrote "<role>.params.<param>"."""
    text = str(exc).removeprefix(f"{exc.field}: ")
    prefix = f"{name}."
    if exc.field.startswith(prefix):
        return f"{role}.params.{exc.field[len(prefix) :]}", text
    return f"{role}.{exc.field}", text


def _unwrap(kind: Any) -> Any:
    """``X | None`` -> X (an optional field accepts what X does, or null)."""
    args = [a for a in get_args(kind) if a is not type(None)]
    return args[0] if get_origin(kind) in (Union, types.UnionType) and len(args) == 1 else kind


def _allowed(info: FieldInfo) -> str:
    """What a field accepts, in words, from its annotation and bounds."""
    kind = _unwrap(info.annotation)
    if info.description:
        return info.description
    if get_origin(kind) is Literal:
        return f"one of {list(get_args(kind))}"
    if kind is int:
        low = next((m.ge for m in info.metadata if hasattr(m, "ge")), None)
        high = next((m.le for m in info.metadata if hasattr(m, "le")), None)
        return "an integer" + (f" in [{low}, {high}]" if low is not None else "")
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return f"an object with keys {list(kind.model_fields)}"
    if get_origin(kind) is list:
        return f"a list of names from {sorted(OBSERVABLES)}"
    if get_origin(kind) is dict:
        return "an object (parameter name -> value)"
    return "a string"


def _explain(error: dict[str, Any]) -> SpecError:
    """One pydantic error -> a SpecError in our words (pydantic's own text is for developers)."""
    if error["type"] == "spec":
        return SpecError(error["ctx"]["field"], error["ctx"]["message"])
    loc = tuple(str(part) for part in error["loc"])
    path = ".".join(loc) or "spec"
    if error["type"] == "json_invalid":
        return SpecError(path, f"invalid JSON: {error['ctx']['error']}")
    kind, info, fields = RunSpec, None, {}
    for part in loc:  # walk the nested models down to the failing field
        fields = kind.model_fields if isinstance(kind, type) and issubclass(kind, BaseModel) else {}
        if part not in fields:
            break
        info = fields[part]
        kind = _unwrap(info.annotation)
    if error["type"] == "extra_forbidden":
        return SpecError(path, f"unknown field; allowed: {list(fields)}")
    if error["type"] == "missing":
        return SpecError(path, "is required")
    allowed = _allowed(info) if info else f"an object with keys {list(RunSpec.model_fields)}"
    return SpecError(path, f"must be {allowed}, got {shown(error['input'])}")


def parse_spec(data: dict[str, Any] | str) -> RunSpec:
    """A RunSpec from a dict or a JSON string; any problem is one SpecError naming the field."""
    try:
        if isinstance(data, str):
            if len(data) > MAX_SPEC_BYTES:
                size = human_bytes(len(data))
                limit = f"over the {MAX_SPEC_BYTES >> 20} MiB a spec may hold"
                raise SpecError("spec", f"is {size}, {limit}")
            return RunSpec.model_validate_json(data)
        return RunSpec.model_validate(data)
    except ValidationError as exc:
        raise _explain(exc.errors()[0]) from None


class TargetFacts(NamedTuple):
    dim: int
    floats: int  # numel of its floating tensors (data, truths)
    other_bytes: int  # bytes of its other tensors (labels, indices)
    has_data: bool  # a training set (n), which w0 can be trained on
    has_truth: bool  # a known true parameter w0
    n: int | None  # training points
    widths: tuple[int, ...]  # a data point's numbers through a forward pass (networks)
    closed_form: bool  # the full-data loss needs no pass over the points
    classes: int | None = None  # a classification network's classes (None: any other target)
    n_test: int = 0  # test points (networks)
    trained: bool = False  # w0 is a trained network's weights (a model's): LLCs start there


@functools.lru_cache(maxsize=64)
def _target_facts(name: str, params_json: str) -> TargetFacts:
    """What a run needs to know of its target before it starts, from its parameters alone
    (``landscapes.registry.facts``: nothing is built, every size is checked first)."""
    f = landscape_facts(name, json.loads(params_json))
    n = f["n"]
    return TargetFacts(
        f["dim"],
        f["floats"],
        f["other_bytes"],
        n is not None,
        f["truth"],
        n,
        f["widths"],
        f["closed_form"],
        f.get("classes"),  # network facts only
        f.get("n_test", 0),
        f.get("trained", False),
    )


def target_facts(spec: RunSpec) -> TargetFacts:
    key = json.dumps(spec.target.params, sort_keys=True)
    try:
        return _target_facts(spec.target.name, key)
    except ParamError as exc:  # e.g. a DLN size class whose dataset is too big to hold
        raise SpecError(*param_error(exc, "target", spec.target.name)) from None


def resolve_w0(spec: RunSpec, facts: TargetFacts) -> str:
    """``llc.w0`` with "auto" resolved: a model's own weights, else train on data targets,
    else the target's known point, else an initialisation; a SpecError where the target cannot
    give the one asked for."""
    mode, name = spec.llc.w0, spec.target.name
    if mode == "auto":  # a model's own weights are its w0: its LLC is measured there
        mode = (
            "truth"
            if facts.trained
            else "train"
            if facts.has_data
            else ("truth" if facts.has_truth else "init")
        )
    if mode == "truth" and not facts.has_truth:
        other = "'train' or 'init'" if facts.has_data else f"'init' ({name} has no data)"
        raise SpecError("llc.w0", f"{name} has no known truth; use {other}")
    if mode == "train" and not facts.has_data:
        raise SpecError("llc.w0", f"{name} has no data to train on; use 'truth' or 'init'")
    return mode


def human_bytes(n: float) -> str:
    """``n`` bytes in words: 1.5 KiB, 3.0 GiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
