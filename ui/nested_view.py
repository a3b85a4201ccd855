"""The Playground's nested-sampling view (``runs.nested``): its settings, the spec it submits,
and a finished or running nested run shown from the store: the evidence with its verdict, the
animation of the live points and the RadFriends region (``charts.nested``), and histograms of
the resampled draws against the exact marginals."""

from __future__ import annotations

import numpy as np
import streamlit as st
import torch

import charts
from charts.nested import nested_figure
from charts.table import number
from landscapes import Param
from runs.nested import FRAME_FIELDS
from runs.store import FINAL, RunRecord, Store
from samplers import nested
from studies import diagnostics

from .live import progress_bar, run_status
from .truths import density_grid, exact_draws, target_of
from .widgets import kept, number_field, param_inputs

NAME = "nested"  # its entry in the Playground's sampler list, after the MCMC kernels
SPEC = nested.SPEC
BINS, CURVE_POINTS = 60, 401
SEED = Param("seed", "int", 0, "Seed of the live points and the region's draws", 0, 2**31 - 1)


def is_nested_run(spec: dict) -> bool:
    """A nested run the Playground draws: on a 2-D potential."""
    target = spec.get("target") or {}
    return (
        spec.get("kind") == NAME
        and target.get("name") in diagnostics.POTENTIALS
        and (target.get("params") or {}).get("dim", 2) == 2
    )


def explain() -> tuple[str, str]:
    """(LaTeX, paragraph) as ``samplers.explain`` gives a kernel's."""
    return SPEC.equation, f"{SPEC.text} Source: {SPEC.paper}."


def settings(key: str) -> dict | None:
    """The nested run's settings (``samplers.nested.PARAMS``) and its seed; None after an
    inline error. The live points default to the SPEC's 400: a second or two on a potential."""
    params = param_inputs(SPEC, key=key)
    seed = number_field(SEED, kept(f"{key}.seed"))  # the run's only other field
    if params is None or seed is None:
        return None
    return {"nested": params, "seed": seed}


def spec_of(target_name: str, target_params: dict, chosen: dict) -> dict:
    """The RunSpec of a nested run (float64: log L near the peak of a narrow potential)."""
    return {
        "kind": NAME,
        "target": {"name": target_name, "params": target_params},
        "dtype": "float64",
        **chosen,
    }


def evidence_line(summary: dict) -> str:
    """ "log Z = a ± b (exact c: k errors off)", or "(no exact normaliser)"."""
    text = f"log Z = {summary['log_z']:.3f} ± {summary['log_z_error']:.3f}"
    if summary.get("exact_log_z") is None:
        return text + " (no exact normaliser for this target)"
    off = summary.get("errors_off")
    errors = "?" if off is None else f"{off:+.2f}"
    return text + f" (exact {summary['exact_log_z']:.3f}: {errors} errors off)"


def show(store: Store, record: RunRecord, log_scale: bool = True) -> None:
    """A nested run: progress while it runs; once it ends, its evidence, verdict, animation
    and histograms."""
    progress_bar(record)
    if record.status not in FINAL:
        done = store.records(record.id)
        st.caption(f"Nested sampling under way: {done:,} points removed so far…")
        return
    summary = record.summary or {}
    if "log_z" not in summary:
        run_status(record)
        return
    spec = record.spec
    target = target_of(spec["target"]["name"], diagnostics.params_json(spec))
    labels = diagnostics.labels_of(target)
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("evidence", f"{summary['log_z']:.3f} ± {summary['log_z_error']:.3f}")
    m2.metric(
        "exact log Z", "—" if summary["exact_log_z"] is None else number(summary["exact_log_z"], 4)
    )
    m3.metric("iterations", f"{summary['iterations']:,}")
    m4.metric("efficiency", number(summary["efficiency"], 3), help="iterations per evaluation")
    st.markdown(f"**{evidence_line(summary)}**")
    st.caption(
        f"{summary['evaluations']:,} energy evaluations; information H = "
        f"{summary['information']:.2f} nats; stopped: {summary['stopped']}; the weights' "
        f"effective sample size {summary['ess']:.0f}, resampled to {summary['draws']:,} equally "
        "weighted draws (the histograms). Error: sqrt(H / N) (Skilling 2006)."
    )
    run_status(record)
    frames = {name: store.get_array(record.id, f"frame_{name}") for name in FRAME_FIELDS}
    nbeta = (spec.get("nested") or {}).get("nbeta") or target.nbeta
    params_json = diagnostics.params_json(spec)
    grid = density_grid(target.name, params_json, float(nbeta), 1.0)
    if frames["live"] is not None and len(frames["live"]):
        st.plotly_chart(
            nested_figure(frames, grid, labels, log_scale=log_scale), key=f"pg.nested.{record.id}"
        )
        st.caption(
            "Each frame: the live points (black), the region RadFriends draws from (orange: a "
            "ball of the bootstrapped radius around each live point), the point of lowest "
            "likelihood removed (red ×), its replacement (green star), and the candidates "
            "drawn in the region below the contour first (grey ×)."
        )
    draws = store.get_array(record.id, "draws")
    if draws is not None and len(draws):
        exact = summary["exact_log_z"] is not None
        for i, col in enumerate(st.columns(2)):
            col.plotly_chart(
                _histogram(target, draws, i, labels, exact, params_json),
                key=f"pg.nested.hist.{record.id}.{i}",
            )


def _histogram(target, draws: np.ndarray, i: int, labels, exact: bool, params_json: str):
    lo, hi = target.bounds[i]
    edges = charts.histogram_edges(lo, hi, BINS)
    x = y = None
    name = "exact"
    if exact and i in target.marginals:
        x = np.linspace(lo, hi, CURVE_POINTS)
        y = np.exp(target.marginals[i](torch.from_numpy(x)).numpy())
        name = "exact marginal (closed form)"
    elif exact and (sample := exact_draws(target.name, params_json)) is not None:
        x = 0.5 * (edges[1:] + edges[:-1])
        y = charts.histogram_density(sample[:, i], edges)
        name = f"exact ({diagnostics.EXACT_DRAWS:,} exact draws)"
    return charts.histogram_figure(
        draws[:, i],
        x,
        y,
        f"Marginal of {labels[i]}: nested sampling's resampled draws",
        f"{labels[i]} (coordinate {i})",
        edges=edges,
        exact_name=name,
        height=320,
    )
