"""A run's size and time before it is queued: the budgets over which a page asks before Run
(``ui.widgets.budget_gate``), and the time model learned from this machine's finished runs."""

from __future__ import annotations

import numpy as np

import samplers
from landscapes import ParamError
from runs.spec import SpecError, parse_spec, target_facts
from runs.store import Store


def is_sampling(spec: dict) -> bool:
    """A sampler's run (kind "sample"), not a variational fit (kind "vi", no sampler)."""
    return spec.get("kind", "sample") == "sample"


# -- Size and time of a run before it is queued (the pages' budget gate, ``ui.budget_gate``) ---

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
NUTS_DOUBLING_S = 5e-3  # ... each doubling's bookkeeping and host sync, eager


def gradient_evaluations(spec: dict) -> int:
    """Gradient evaluations per step of the spec's sampler: HMC's leapfrog steps, NUTS's typical
    tree (its depth is only known once it runs), else 1."""
    name, params = spec["sampler"]["name"], spec["sampler"].get("params") or {}
    takes = {p.name: p.default for p in samplers.REGISTRY[name].params}
    if name == "nuts":
        depth = min(int(params.get("max_depth") or takes["max_depth"]), NUTS_DEPTH)
        return 2**depth + int(depth * NUTS_DOUBLING_S / STEP_OVERHEAD_S)
    return int(params.get("leapfrog_steps") or takes.get("leapfrog_steps") or 1)


def model_seconds(spec: dict, steps: int | None = None) -> float:
    """The sampling seconds the default model gives ``steps`` (default: all) of the spec:
    steps x g x (STEP_OVERHEAD_S + chains x max(d, 2) x CHAIN_COORDINATE_S), g the gradient
    evaluations per step (x AUTOGRAD_FACTOR where the target's gradient is autograd's)."""
    run = parse_spec(spec)
    dim = target_facts(run).dim
    g = gradient_evaluations(spec)
    if run.target.name in AUTOGRAD_TARGETS:
        g *= AUTOGRAD_FACTOR
    per_step = g * (STEP_OVERHEAD_S + run.chains * max(dim, 2) * CHAIN_COORDINATE_S)
    return (run.steps if steps is None else steps) * per_step


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
