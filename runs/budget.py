"""A run's size and time before it is queued: the memory, disk and seconds it will take.

``estimate`` counts a run's device and store bytes from the target's facts (nothing is built),
``check_budget`` refuses a run that would overflow the device, the store's budget or the disk
before it is queued, and ``estimate_seconds`` is the time model learned from this machine's
finished runs, over which a page asks before Run (``ui.checks.budget_gate``).
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

import landscapes
import samplers
from landscapes import ParamError
from landscapes.base import DATA_CHUNK
from landscapes.formula import probe
from runs import nested
from runs.build import device_of, kernel_of
from runs.observe import EVAL_POINTS
from runs.spec import (
    ESS_PROJECTIONS,
    RunSpec,
    SpecError,
    TargetFacts,
    human_bytes,
    param_error,
    parse_spec,
    resolve_w0,
    target_facts,
)
from runs.store import Store
from runs.store_db import StoreError, store_home
from samplers import diagnostics, predictive


def is_sampling(spec: dict) -> bool:
    """A sampler's run (kind "sample"), not a variational fit (kind "vi", no sampler)."""
    return spec.get("kind", "sample") == "sample"


# -- Time of a run before it is queued (the pages' budget gate, ``ui.budget_gate``) ----------

# Budgets over which a page asks before Run: the page is for runs watched while they go.
BUDGET_STORE_BYTES = 50 * 2**20  # a run the views read back whole; past this the reads lag
BUDGET_SECONDS = 60.0  # past a minute a run ties up a worker while the page shows a progress bar
# The time model's defaults (``estimate_seconds``), measured on 2 CPU cores (eager MALA and HMC
# on the banana, MALA on the funnel at d = 2..1000) and rounded up: seconds per step per
# gradient evaluation, whatever the chains (Python's dispatch of a step's ops, ~0.3 ms) ...
STEP_OVERHEAD_S = 5e-4
# ... plus seconds per chain, coordinate and gradient evaluation (1.4e-7 at 256 chains x 1000
# coordinates, 3.6e-7 at 4096 chains x 2: large batches fall out of the caches) ...
CHAIN_COORDINATE_S = 4e-7
STARTUP_S = 3.0  # ... plus a worker's start of a run (the target and kernel built: ~2.5 s)
AUTOGRAD_FACTOR = 4.0  # a gradient by autograd (a typed formula): ~2.6 ms a step, not ~0.5
AUTOGRAD_TARGETS = ("custom",)  # the potentials without an analytic gradient
CALIBRATION_RUNS = 10  # the newest completed runs of the same target and sampler


NUTS_DEPTH = 6  # a typical NUTS tree before runs calibrate it: 2^6 leapfrogs (donut, eps 0.1)
NUTS_DOUBLING_S = 5e-3  # ... each doubling's bookkeeping and host sync, in lockstep (warm-up)
# ... a leaf grown in the forest (samplers.forest: every step after a warm-up) costs this share
# of a step's overhead: 3.2e-4 s a leaf at 32 chains on the banana (step 0.1, 2000 steps, 41 s
# on a loaded 2-core machine, 2026-11-29), against 5.3e-4 s the model gives a step
NUTS_LEAF = 0.6
# energy evaluations a step of the kernels whose cost no parameter sets, before runs calibrate
# it: a slice search at a width near the target's scale makes ~3-6 (Neal 2003, Sec. 4), each
# with a host sync; gibbs makes one search per coordinate
SEARCHES = {"slice": 6, "elliptical-slice": 4, "gibbs": 6}


def gradient_evaluations(spec: dict) -> int:
    """Gradient evaluations per step of the spec's sampler: HMC's leapfrog steps, NUTS's tree
    (``nuts_depth``), else 1."""
    name, params = spec["sampler"]["name"], spec["sampler"].get("params") or {}
    takes = {p.name: p.default for p in samplers.REGISTRY[name].params}
    if name == "nuts":
        return 2 ** nuts_depth(spec)
    if name in SEARCHES:
        return SEARCHES[name]
    for steps in ("leapfrog_steps", "n_steps"):  # HMC's, MCHMC's trajectory
        if steps in takes:
            return int(params.get(steps) or takes[steps])
    return 1


# A NUTS run whose max_depth tree covers under 1/NUTS_REACH of the way to a U-turn is refused
# (``check_nuts``): every step pays 2^max_depth leapfrogs and moves a chain a hair.
NUTS_REACH = 100


@functools.lru_cache(maxsize=32)
def _potential_scale(name: str, params_json: str) -> tuple[float, str] | None:
    """A potential's widest standard deviation at nbeta = 1 and where it comes from: its
    covariance's largest eigenvalue, else its plot's bounds (about +-3 sd), else None."""
    target = landscapes.make(name, device="cpu", dtype="float64", **json.loads(params_json))
    if target.cov is not None:
        return float(torch.linalg.eigvalsh(target.cov).max()) ** 0.5, "its covariance"
    if target.bounds is not None:
        return max(hi - lo for lo, hi in target.bounds) / 6, "its plot's bounds"
    return None


def _usual_nbeta(run: RunSpec) -> float:
    """The target's own nbeta (1 for potentials, n / log n for most networks)."""
    return landscapes.facts(run.target.name, run.target.params)["nbeta"]


def nuts_reach(run: RunSpec) -> tuple[float, float, str] | None:
    """(leapfrog steps a NUTS tree needs to turn, the posterior's widest sd, its source) for a
    fixed step (None: 'auto', adapted to the target; or no scale known). The trajectory turns
    after about half an oscillation of the widest direction, pi sd / step leapfrogs; the sd is
    that of exp(-U), U = nbeta L + (gamma / 2)|w - w0|^2 + prior: precision nbeta / s^2 + gamma
    + 1 / prior_std^2, s a potential's own scale at nbeta = 1, or 1 / sqrt(nbeta) on a network
    (a loss of unit curvature: a guess; a singular network's flat directions are wider)."""
    params, facts = run.sampler.params, target_facts(run)
    if params.get("step_size") in (None, "auto"):
        return None
    nbeta = params.get("nbeta") or _usual_nbeta(run)
    gamma = params.get("localization") or 0.0
    if facts.has_data:
        scale, source = 1.0, "a network's loss, taken as of unit curvature"
    else:
        found = _potential_scale(run.target.name, json.dumps(run.target.params, sort_keys=True))
        if found is None:
            return None
        scale, source = found
    prior = None if facts.has_data else run.target.params.get("prior_std")  # normal-crossing's
    precision = nbeta / scale**2 + gamma + (1 / prior**2 if prior else 0.0)
    sd = precision**-0.5
    return math.pi * sd / params["step_size"], sd, source


def nuts_depth(spec: dict) -> int:
    """A NUTS step's tree depth: log2 of the leapfrogs it needs to turn (``nuts_reach``), to the
    nearest doubling (the banana at step 0.1: pi 2.5 / 0.1 = 79, depth 6, as it runs), at
    least NUTS_DEPTH (a typical tree, taken where the scale is not known) and at most
    max_depth: a step far below the target's scale builds max_depth trees at every step."""
    params = spec["sampler"].get("params") or {}
    most = int(params.get("max_depth") or samplers.REGISTRY["nuts"].param("max_depth").default)
    try:
        reach = nuts_reach(parse_spec(spec))
    except (SpecError, ParamError):
        reach = None
    need = NUTS_DEPTH if reach is None else round(math.log2(max(reach[0], 1.0)))
    return min(most, max(NUTS_DEPTH, need))


def check_nuts(run: RunSpec) -> None:
    """A SpecError naming the step size (or nbeta, where that is what widened the posterior)
    when every NUTS tree would reach max_depth far short of its U-turn (NUTS_REACH)."""
    reach = nuts_reach(run) if run.sampler.name == "nuts" else None
    depth = run.sampler.params.get("max_depth")
    if reach is None or reach[0] <= NUTS_REACH * 2**depth:
        return
    _, sd, source = reach
    step, nbeta = run.sampler.params["step_size"], run.sampler.params.get("nbeta")
    tree = f"every NUTS tree would stop at max_depth {depth} ({2**depth - 1} leapfrog steps a step)"
    short = f"under 1/{NUTS_REACH} of the way to its U-turn"
    lowest = math.pi * sd / (NUTS_REACH * 2**depth)
    usual = _usual_nbeta(run)  # at the target's own nbeta, would the step do?
    if nbeta is not None and nbeta < usual and step >= lowest * math.sqrt(nbeta / usual):
        raise SpecError(
            "sampler.params.nbeta",
            f"{nbeta:g} widens the posterior to a scale of ~{sd:.2g} ({source}), far beyond the "
            f"step {step:g}: {tree}, {short}; raise nbeta, or set a localization",
        )
    raise SpecError(
        "sampler.params.step_size",
        f"{step:g} is far below the target's scale (~{sd:.2g}, from {source}): {tree}, {short}; "
        f"give a step of at least {lowest:.2g}, or 'auto' (the warm-up adapts it)",
    )


def model_seconds(spec: dict, steps: int | None = None) -> float:
    """The sampling seconds the default model gives ``steps`` (default: all) of the spec:
    steps x g x (STEP_OVERHEAD_S + chains x max(d, 2) x CHAIN_COORDINATE_S), g the gradient
    evaluations per step (x AUTOGRAD_FACTOR where the target's gradient is autograd's)."""
    run = parse_spec(spec)
    dim = target_facts(run).dim
    g = gradient_evaluations(spec) * (dim if run.sampler.name == "gibbs" else 1)
    if run.sampler.name == "nuts":
        g *= _nuts_leaf_cost(run, spec)
    if run.target.name in AUTOGRAD_TARGETS:
        g *= AUTOGRAD_FACTOR
    per_step = g * (STEP_OVERHEAD_S + run.chains * max(dim, 2) * CHAIN_COORDINATE_S)
    return (run.steps if steps is None else steps) * per_step


def _nuts_leaf_cost(run: RunSpec, spec: dict) -> float:
    """A NUTS leaf's cost in steps of the model, over the run: NUTS_LEAF in the forest; in the
    lockstep warm-up (step_size auto: the burn-in) a whole step plus a share of each doubling's
    bookkeeping."""
    depth = nuts_depth(spec)
    lockstep = 1.0 + depth * NUTS_DOUBLING_S / STEP_OVERHEAD_S / 2**depth
    warm = min(run.burn_in, run.steps) if run.sampler.params.get("step_size") == "auto" else 0
    return (warm * lockstep + (run.steps - warm) * NUTS_LEAF) / run.steps


def estimate_seconds(spec: dict, store: Store | None = None) -> float:
    """Seconds a run of ``spec`` (a RunSpec as a dict) will take, start to end: the default
    model (``model_seconds``, plus STARTUP_S) scaled by this machine's speed, read from the
    store's newest completed runs of the same target and sampler: the median of their sampling
    seconds over the model's for their own chains, steps and size, and the median of their
    start-up seconds. A per-step overhead plus a cost per chain-step: a single chain-steps per
    second rate read off a 32-chain run would make 4096 chains 128 times slower, where they
    are ~10 times. Conservative without runs to learn from, so a run is rather asked about
    once too often than started unannounced."""
    ratios, startups = [], []
    if store is not None:
        same = (spec["target"]["name"], spec["sampler"]["name"])
        for record in store.list("completed"):
            if len(ratios) >= CALIBRATION_RUNS:
                break
            if not is_sampling(record.spec):
                continue
            if (record.spec["target"]["name"], record.spec["sampler"]["name"]) != same:
                continue
            summary = record.summary or {}
            sampling, seconds = summary.get("sampling_seconds"), summary.get("seconds")
            done = (record.progress or {}).get("steps_done") or record.spec.get("steps")
            if not sampling or not seconds or not done:
                continue
            try:
                modelled = model_seconds(record.spec, int(done))
            except (SpecError, ParamError, KeyError, TypeError, ValueError):
                continue  # a spec this version cannot read
            if modelled > 0:
                ratios.append(sampling / modelled)
                startups.append(max(seconds - sampling, 0.0))
    speed = float(np.median(ratios)) if ratios else 1.0
    startup = float(np.median(startups)) if startups else STARTUP_S
    return startup + speed * model_seconds(spec)


def over_budget(store_bytes: float, seconds: float, thin: bool = True) -> list[str]:
    """What of a run (or a group's total) is over its budget, and what to lower (``thin``:
    where the page offers it): one line each; [] when it is within both."""
    lines = []
    if store_bytes > BUDGET_STORE_BYTES:
        lines.append(
            f"~{store_bytes / 2**20:,.0f} MiB on disk, over the {BUDGET_STORE_BYTES / 2**20:.0f}"
            f" MiB budget: lower chains or steps{', or raise thin' if thin else ''}"
        )
    if seconds > BUDGET_SECONDS:
        lines.append(
            f"~{seconds:,.0f} s, over the {BUDGET_SECONDS:.0f} s budget: lower chains or steps"
        )
    return lines


# -- Memory, disk and the budget check before a run is queued ------------------------------

# Records buffered on the device between two flushes when flush_every is 0 (auto, ~0.5 s): the
# run loop must not buffer more than this, since the estimate below counts on it.
AUTO_FLUSH_RECORDS = 1024
GiB = 2**30


@dataclass(frozen=True)
class Estimate:
    dim: int  # d, parameters per chain
    device_bytes: int
    store_bytes: int
    recorded_dims: int  # d (all), projection_dim (projection) or 0 (none)
    records: int  # recorded steps, ceil(steps / thin)
    positions: str  # "all", "projection" or "none": "auto" resolved
    host_bytes: int  # the summary's, in RAM (beside device_bytes on a GPU, with them on CPU)
    parts: dict[str, int]  # device_bytes and host_bytes by term (``estimate`` says which)


AUTOGRAD = 3  # a step's activations: the forward's (kept for the backward), their gradients
PARTS = {  # Estimate.parts, in words
    "state": "the chains' state",
    "data": "the data",
    "step": "a step's activations",
    "buffer": "the records between flushes",
    "summary": "the summary's draws",
}


def estimate(spec: RunSpec) -> Estimate:
    """Device and store bytes of a run, from the target's facts (nothing is built).

    Device bytes are the sum of these terms (``Estimate.parts``; C chains, d parameters):
    - state: 8 [C, d] tensors live at once: position, localization centre, gradient, injected
      noise, momentum or preconditioner state, and about three temporaries of the update;
    - data: the dataset and truths, moved to the device;
    - step: a network's activations in the largest of the passes a run makes, one at a time:
      - a step: C x B x sum(widths) numbers x AUTOGRAD, B the points a chain's step reads
        (batch_size for a minibatch sampler, else all n);
      - the initial loss on all n points, without gradients (runs.loop: ``full_loss``, in
        passes of DATA_CHUNK points): a layer's input and two of its outputs alive at once,
        C x min(n, DATA_CHUNK) x max(H_in + 2 H_out) numbers;
      - with "llc": its MALA probe, a step's on min(n, EVAL_POINTS) points a chain, and the
        training of w0 (one chain, its training batch);
      - with "predictive": a forward pass of the kept draws on the test set (at most
        samplers.predictive.NUMBERS_PER_PASS activations, float64 logits) and the curvature's
        double backward (CURVATURE_DRAWS draws on up to CURVATURE_POINTS points, its graph
        kept through the power iterations);
      A closed-form target's full-data loss costs no points (the polynomial's moments); a
      potential's temporaries are [C, d], in state;
    - buffer: the records held between two flushes;
    - with "predictive", in state: its per-chain sums, C x n_test x (classes + 1) float64.
    Host bytes are the summary's: its per-chain sums of positions and the diagnosed chains'
    draws (ESS, R-hat), kept in RAM (on CPU, the device's memory too).
    """
    if spec.kind == "vi":
        return _vi_estimate(spec)
    if spec.kind == "nested":  # live points, region draws, dead points (runs.nested.sizes)
        d = target_facts(spec).dim
        parts, store_bytes, rows = nested.sizes(spec, d)
        return Estimate(d, sum(parts.values()), store_bytes, d, rows, "all", 0, parts)
    f = target_facts(spec)
    dim, itemsize, chains = f.dim, (4 if spec.dtype == "float32" else 8), spec.chains
    positions = spec.record.positions
    if positions == "auto":
        positions = "all" if dim <= 64 else "projection"
    recorded = {"all": dim, "projection": spec.record.projection_dim, "none": 0}[positions]
    records = math.ceil(spec.steps / spec.thin)
    passes, sums = _passes(spec, f, kernel_of(spec), itemsize)
    per_flush = AUTO_FLUSH_RECORDS if spec.flush_every == 0 else spec.flush_every // spec.thin + 1
    draws = max(records - math.ceil(spec.burn_in / spec.thin), 1)
    summary = 0
    if positions == "all":  # a projected run keeps no position sums
        diagnosed = diagnostics.diagnosed_chains(chains, draws)
        summary = 2 * chains * dim * 8 + diagnosed * draws * dim * itemsize
    # the "ess" observable's projections of theta and f(X_test), recorded with each record
    projected = 2 * ESS_PROJECTIONS if "ess" in spec.observables else 0
    parts = {
        "state": 8 * chains * dim * itemsize + sums,
        "data": f.floats * itemsize + f.other_bytes,
        "step": max(passes),
        "buffer": min(records, per_flush)
        * chains
        * (itemsize + 2 + itemsize * (recorded + projected)),
    }
    # The store keeps float32 loss, bool accepted, bool diverged and float32 positions per record,
    # plus the PCA snapshots when positions are projected (all positions already allow the PCA).
    store = records * chains * (4 + 1 + 1 + 4 * recorded + itemsize * projected)
    if positions == "projection" and dim > 64:
        store += min(spec.record.snapshots, records) * chains * dim * 4
    device = sum(parts.values())
    parts["summary"] = summary
    return Estimate(dim, device, store, recorded, records, positions, summary, parts)


def _passes(spec: RunSpec, f: TargetFacts, kernel, itemsize: int) -> tuple[list[int], int]:
    """The bytes of each pass a run makes (``estimate``'s "step": the largest counts), and the
    "predictive" observable's per-chain sums (in its "state")."""
    chains = spec.chains
    width = sum(f.widths) * itemsize  # bytes of one point's activations, per chain
    # without gradients a layer's input and two of its outputs (pre-activation, activation)
    pair = max((a + 2 * b for a, b in itertools.pairwise(f.widths)), default=0) * itemsize
    n = 0 if f.n is None else f.n
    full = 0 if f.closed_form else n
    batch = getattr(kernel, "batch_size", None)
    points = batch if kernel.minibatch and batch is not None and batch < n else full
    passes = [AUTOGRAD * chains * points * width, chains * min(full, DATA_CHUNK) * pair]
    if "llc" in spec.observables:
        passes.append(AUTOGRAD * chains * min(n, EVAL_POINTS) * width)
        if f.has_data and spec.llc.w0 in ("auto", "train"):
            train_points = spec.llc.train_batch_size or (n if n <= 4096 else 512)
            passes.append(AUTOGRAD * min(train_points, n) * width)
    sums = 0
    if "predictive" in spec.observables and f.classes:
        numbers = sum(f.widths)
        held = min(chains * f.n_test * numbers, max(predictive.NUMBERS_PER_PASS, chains * numbers))
        passes.append(held * 8)
        subset = min(max(1, f.n_test // predictive.CURVATURE_FRACTION), predictive.CURVATURE_POINTS)
        passes.append(2 * AUTOGRAD * predictive.CURVATURE_DRAWS * subset * width)
        sums = chains * f.n_test * (f.classes + 1) * 8
    return passes, sums


def _vi_estimate(spec: RunSpec) -> Estimate:
    """A vi run's bytes: the flow (``layers`` couplings, each an s and a t MLP of d x hidden,
    hidden x hidden x 2, hidden x d weights) with Adam's two moments and its gradient; a step's
    activations for M draws on a minibatch; the per-epoch objective in the store."""
    f, o = target_facts(spec), spec.vi
    itemsize, d = (4 if spec.dtype == "float32" else 8), target_facts(spec).dim
    weights = o.layers * 2 * (2 * d * o.hidden + 2 * o.hidden**2 + d + 3 * o.hidden)
    n = 0 if f.n is None else f.n
    points = max(1, round(n * o.batch_fraction)) if n else 0
    width = sum(f.widths) * itemsize
    parts = {
        "state": 4 * weights * itemsize + 8 * d * itemsize,
        "data": f.floats * itemsize + f.other_bytes,
        "step": AUTOGRAD * max(o.samples, o.final_samples) * max(points, 1) * width
        + AUTOGRAD * o.layers * o.final_samples * (d + 6 * o.hidden) * itemsize,
        "buffer": o.epochs * 16,
    }
    return Estimate(d, sum(parts.values()), o.epochs * 16, 0, o.epochs, "none", 0, parts)


def _lower(spec: RunSpec, part: str) -> str:
    """What to change when the device would overflow: the fields behind its largest ``part``."""
    if spec.kind == "vi":
        return "lower target.params.n or vi.samples / vi.final_samples, or a smaller network"
    if spec.kind == "nested":
        return "lower nested.live or nested.max_iter"
    if part == "step":
        takes = samplers.REGISTRY[spec.sampler.name].params
        if any(p.name == "batch_size" for p in takes):
            size = spec.sampler.params.get("batch_size")
            if size is None:  # a full batch: every point's activations at each step
                return "lower chains or target.params.n, or set sampler.params.batch_size"
            return "lower chains or sampler.params.batch_size"
        return "lower chains or target.params.n (or use a minibatch sampler with batch_size)"
    return {
        "state": "lower chains",
        "data": "lower target.params.n",
        "buffer": "lower chains or flush_every",
        "summary": "lower chains or steps, raise thin, or record fewer positions",
    }[part]


def _disk_free() -> tuple[Path, int | None]:
    """The store's home and the bytes free on its disk (None where that cannot be read). A run
    that fills the disk fails part way, its time lost, so it is refused before it starts."""
    home = path = store_home()
    while not path.exists() and path != path.parent:  # not created yet: its nearest ancestor
        path = path.parent
    try:
        return home, shutil.disk_usage(path).free
    except OSError:
        return home, None


def _device_memory(device: torch.device) -> int:
    """80% of the physical memory of the device the run will use."""
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device.index or 0).total_memory
    else:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(0.8 * total)


def check_budget(spec: RunSpec, budget_bytes: int | None = None) -> Estimate:
    """The estimate, or a SpecError on "memory" when the device or the store would overflow,
    checked before a run is queued, as is what else needs the built target (an LLC's w0).

    Budget: ``budget_bytes``, else $BASIN_MEMORY_BUDGET (bytes), for both; else 8 GiB for the
    store and 80% of the device's memory (RAM on CPU) for the device. The run's records must
    also fit in the space free on the store's disk now, less what the runs queued or running
    before it have still to write.
    """
    if spec.target.name == "custom":  # an energy with nothing to sample would only diverge
        try:
            probe(spec.target.params["formula"], spec.target.params["dim"])
        except ParamError as exc:
            raise SpecError(*param_error(exc, "target", "custom")) from None
    est = estimate(spec)  # the target's sizes and the kernel, as the run will make them
    if spec.kind == "sample":
        check_nuts(spec)  # max_depth trees at every step, far short of their U-turn
    if "llc" in spec.observables:
        resolve_w0(spec, target_facts(spec))  # else the worker would fail the run later
    if budget_bytes is None and os.environ.get("BASIN_MEMORY_BUDGET"):
        budget_bytes = _budget_from_env(os.environ["BASIN_MEMORY_BUDGET"])
    if budget_bytes is not None:
        device_budget = store_budget = budget_bytes
    else:
        device_budget, store_budget = _device_memory(device_of(spec)), 8 * GiB
    ram = spec.device == "cpu" or (spec.device == "auto" and not torch.cuda.is_available())
    device = est.device_bytes + (est.host_bytes if ram else 0)  # on CPU the summary shares it
    if device > device_budget or est.store_bytes > store_budget:
        budget = human_bytes(device_budget)
        if store_budget != device_budget:
            budget = f"{budget} (device) and {human_bytes(store_budget)} (store)"
        advice = "lower chains or steps, raise thin, or record fewer positions"  # the store's
        if device > device_budget:
            parts = {k: v for k, v in est.parts.items() if ram or k != "summary"}
            part = max(parts, key=parts.get)
            size = human_bytes(parts[part])
            advice = f"the largest part, {PARTS[part]}, is ~{size}: {_lower(spec, part)}"
        raise SpecError(
            "memory",
            f"needs ~{human_bytes(device)} of device memory and ~{human_bytes(est.store_bytes)} "
            f"of store, over the budget of {budget}; {advice}",
        )
    home, free = _disk_free()
    promised = _promised(home) if free is not None else 0
    if free is not None and est.store_bytes > free - promised:
        raise SpecError(
            "memory",
            f"needs ~{human_bytes(est.store_bytes)} of store, but the disk holding {home} has "
            f"{human_bytes(free)} free, ~{human_bytes(promised)} of it promised to the runs queued "
            "or running; lower chains or steps, raise thin, record fewer positions, or free some "
            "space (deleting old runs on the Runs page does)",
        )
    return est


def _promised(home: Path) -> int:
    """Bytes the store's queued and running runs have still to write: each one's estimate less
    its data file so far (0 when there is no store yet, or it cannot be read)."""
    if not (home / "basin.sqlite").exists():
        return 0
    try:
        store = Store(home)
        runs = store.list("queued") + store.list("running")
    except (StoreError, OSError):
        return 0
    total = 0
    for record in runs:
        try:
            total += max(
                0, estimate(parse_spec(record.spec)).store_bytes - store.written(record.id)
            )
        except (SpecError, ParamError, OSError, KeyError):
            continue  # a run this version cannot read promises nothing it can tell
    return total


def _budget_from_env(text: str) -> int:
    try:
        budget = int(text)
    except ValueError:
        budget = 0
    if budget <= 0:
        raise SpecError("BASIN_MEMORY_BUDGET", f"must be a number of bytes > 0, got {text!r}")
    return budget
