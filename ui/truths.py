"""What the pages share about targets: the app's caches of what ``studies.diagnostics`` computes
(targets built for their closed forms, exact draws, density grids, tail ESS of a finished run,
a network's facts), so a page that reruns every half second pays once; the potential pages'
run-length widgets and the context of a potential's run that their views share."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import streamlit as st

import landscapes
from landscapes import ParamError
from runs.store import FINAL
from studies import diagnostics, llc

from .live import Live, stop_polling
from .pool import store
from .widgets import kept, number_field, spec_error


def sampler_defaults(spec) -> dict:
    """A potential page's defaults for kernel ``spec``: auto where the kernel adapts its step
    (samplers.warmup; MCLMC's tuner, samplers.mclmc_tune), else 0.1 (the registry's 1e-3 suits
    networks; toys mix visibly at 0.1)."""
    has = {p.name: p for p in spec.params}
    step = has.get("step_size")
    return {"step_size": "auto" if step is not None and step.auto else 0.1}


@st.cache_resource(max_entries=32, show_spinner=False)
def target_of(name: str, params_json: str) -> landscapes.Target | ParamError:
    """``diagnostics.target_of``, one per session-independent key (closed forms only)."""
    return diagnostics.target_of(name, params_json)


class Group(NamedTuple):
    """A group of runs a page shows together (Compare's samplers, the Funnel's metrics)."""

    records: dict  # run id -> RunRecord, in the group's order
    done: bool  # every run has ended
    first: dict  # the first run's spec: the target and budget they share
    params_json: str  # its target parameters, the key of the cached target and truths
    target: landscapes.Target


def open_group(ids: list[str], polling_key: str) -> Group | None:
    """The runs of ``ids`` still in the store and their shared target, polling stopped once all
    have ended; None after saying why there is nothing to show (deleted, or a bad target)."""
    records = {}
    for run_id in ids:
        try:
            records[run_id] = store().get(run_id)
        except KeyError:
            continue
    if not records:
        st.info("These runs were deleted.")
        return None
    done = all(r.status in FINAL for r in records.values())
    stop_polling(polling_key, ",".join(ids), done)
    first = next(iter(records.values())).spec
    params_json = diagnostics.params_json(first)
    target = target_of(first["target"]["name"], params_json)
    if isinstance(target, ParamError):
        spec_error(target)
        return None
    return Group(records, done, first, params_json, target)


@st.cache_data(max_entries=32, show_spinner=False)
def exact_draws(name: str, params_json: str) -> np.ndarray | None:
    """``diagnostics.exact_draws`` of the target (fixed seed), or None without an exact sampler."""
    return diagnostics.exact_draws(target_of(name, params_json))


@st.cache_data(max_entries=32, show_spinner=False)
def density_grid(name: str, params_json: str, nbeta: float, temperature: float) -> dict:
    """``diagnostics.density_grid``: -U / T on the target's bounds, for contour plots."""
    return diagnostics.density_grid(target_of(name, params_json), nbeta, temperature)


@st.cache_data(max_entries=128, show_spinner="Computing tail ESS…")
def tail_ess(run_id: str, burn: int) -> list[float] | None:
    """``diagnostics.tail_ess`` of a finished run (not in its summary, and seconds to compute)."""
    return diagnostics.tail_ess(store(), run_id, burn)


@st.cache_data(max_entries=8, show_spinner=False)
def log_p_grid(name: str, params_json: str, bounds: tuple) -> dict:
    """log p = -L - log Z on a grid over ``bounds`` (a potential with a known log Z)."""
    target = target_of(name, params_json)
    grid = diagnostics.density_grid(target, 1.0, 1.0, bounds=bounds)
    return {**grid, "log_density": grid["log_density"] - target.log_z}


@st.cache_data(max_entries=8, show_spinner=False)
def theta1_density(name: str, params_json: str, edges: tuple) -> np.ndarray:
    """``studies.funnel.theta1_density``: theta_1's exact density averaged over each bin."""
    from studies import funnel  # lazily: scipy.stats costs ~1 s to import

    return funnel.theta1_density(target_of(name, params_json), edges)


@st.cache_data(max_entries=128, show_spinner="Tail statistics of every kept draw…")
def funnel_tails(run_id: str, burn: int) -> dict:
    """``studies.funnel.run_tails`` of a finished run: all its kept draws (seconds at 6e6)."""
    from studies import funnel  # lazily: scipy.stats costs ~1 s to import

    return funnel.run_tails(store(), run_id, burn)


@st.cache_data(max_entries=32, show_spinner="Building the target…")
def network_facts(target: dict) -> dict:
    """``llc.network_facts`` of a RunSpec's target ({"name", "params"}): numbers only, as
    building a network's data takes seconds."""
    return llc.network_facts(target["name"], target["params"])


def run_length(prefix: str) -> dict | None:
    """Chains, steps, burn-in, thin and seed of a potential page's runs (RunSpec fields), each
    typed as text and checked (``number_field``); None after showing under each bad field its
    name and allowed range, so that Run queues nothing with a value from before."""
    Param = landscapes.Param
    c1, c2, c3, c4, c5 = st.columns(5)
    with c1:
        chains = number_field(
            Param("chains", "int", 32, "Chains run side by side", 1, 4096), kept(f"{prefix}.chains")
        )
    with c2:
        steps = number_field(
            Param("steps", "int", 2000, "Steps of every chain", 10, 100_000),
            kept(f"{prefix}.steps"),
        )
    with c3:
        burn_pct = number_field(
            Param("burn-in", "int", 10, "Steps left out at the start", 0, 90, unit="% of steps"),
            kept(f"{prefix}.burn_pct"),
        )
    auto = None if chains is None or steps is None else diagnostics.auto_thin(chains, steps)
    with c4:
        thin = number_field(
            Param("thin", "int", 0, "Record every k-th step", 0, 100_000, unit="0: auto"),
            kept(f"{prefix}.thin"),
            help=f"Record every k-th step. 0 keeps at most {diagnostics.AUTO_DRAWS:.0e} draws"
            + ("." if auto is None else f": every {auto} step(s) for this run."),
        )
    with c5:
        seed = number_field(
            Param("seed", "int", 0, "Seed of the chains' starts and noise", 0, 2**31 - 1),
            kept(f"{prefix}.seed"),
        )
    if None in (chains, steps, burn_pct, thin, seed):
        return None
    return {
        "chains": chains,
        "steps": steps,
        "burn_in": steps * burn_pct // 100,
        "thin": thin or auto,
        "seed": seed,
    }


def run_context(record) -> dict | None:
    """What every view of a potential's run needs: its target, density grid, truths and
    records so far (new ones only, ``Live``); None after showing the target's error."""
    spec = record.spec
    params_json = diagnostics.params_json(spec)
    target = target_of(spec["target"]["name"], params_json)
    if isinstance(target, ParamError):
        spec_error(target)
        return None
    sp = spec["sampler"]["params"]
    nbeta = sp.get("nbeta") or target.nbeta
    grid = density_grid(target.name, params_json, float(nbeta), float(sp.get("temperature", 1.0)))
    data = Live(store(), record.id, names=diagnostics.NAMES).update()
    truths = diagnostics.targets_exact(sp)
    return {
        "target": target,
        "labels": diagnostics.labels_of(target),
        "grid": grid,
        "data": data,
        "exact": exact_draws(target.name, params_json) if truths else None,
        "truths": truths,
        "burn": diagnostics.burn_records(spec),
    }
