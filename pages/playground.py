"""Playground: one sampler on a 2-D potential, watched live against the exact answer.

Widgets (from the registries) -> RunSpec -> ui.submit; the run's records -> charts.runs: the
density with each chain's recent path and the cloud of draws, traces, marginal histograms with
the exact marginal, and ``studies.diagnostics``'s numbers: tail probabilities, KS, ESS and
R-hat (the table ``python -m jobs show ID --diagnostics`` prints); a step-by-step replay for class.
The target is built here only to draw its closed-form density and marginals, never sampled.
"""

from __future__ import annotations

import json

import numpy as np
import streamlit as st
import torch

import charts
import landscapes
import samplers
import ui
from charts.table import highlighted, number
from landscapes import ParamError
from runs import verdict
from runs.store import FINAL
from samplers.explain import POSTERIOR, explain
from studies import compare, diagnostics
from ui import animate, nested_view
from ui.live import run_choices, watch
from ui.truths import (
    density_grid,
    run_context,
    run_length,
    sampler_defaults,
    tail_ess,
    target_of,
)

ui.legacy_guard()  # a fresh server's first deep link: hand the run to the shell

SAMPLERS = [*samplers.REGISTRY, nested_view.NAME]  # nested sampling after the MCMC kernels
CURVE_POINTS = 401  # odd: the grid of a symmetric range holds its midpoint
BINS = 60
MAX_CLOUD = 2000  # draws shown as markers (SVG: each costs the browser ~40 us to draw)
MAX_TRACE = 1000  # points per chain in a trace (more than a chart of this width shows)


def fixed_params(name: str) -> dict:
    """Parameters the playground pins: its potentials are drawn in the plane."""
    return {"dim": 2} if any(p.name == "dim" for p in landscapes.REGISTRY[name].params) else {}


# ---------------------------------------------------------------------------------------------
# Controls.

store = ui.open_page(
    "Playground",
    "Sample a 2-D potential with any sampler, in a background worker, and watch the chains "
    "against the exact answer.",
)

left, right = st.columns(2)
with left:
    target_name = st.selectbox("Potential", diagnostics.POTENTIALS, key=ui.kept("pg.target_name"))
    target_spec = landscapes.REGISTRY[target_name]
    st.caption(f"{target_spec.doc} — *{target_spec.paper}*")
    pinned = fixed_params(target_name)
    target_params = ui.param_inputs(target_spec, key="pg.target", skip=tuple(pinned))
    target = None
    if target_params is not None:
        target_params = {**target_params, **pinned}
        built = target_of(target_name, json.dumps(target_params, sort_keys=True))
        if isinstance(built, ParamError):
            ui.spec_error(built)
        elif built.dim != 2 or built.bounds is None:
            st.error(
                f"**target**: the playground draws 2-D potentials; these parameters give "
                f"d = {built.dim} (use Compare for other dimensions)",
                icon=ui.WARNING,
            )
        else:
            target = built
    preview = st.empty()  # filled below, once the sampler's nbeta and temperature are known
    if target is not None and target_name == "custom":  # exp(-U) with no normaliser: said now
        ui.formula_warning(target_params["formula"], target.dim, target.bounds)
with right:
    sampler_name = st.selectbox("Sampler", SAMPLERS, key=ui.kept("pg.sampler_name"))
    nested = nested_view.settings("pg.nested") if sampler_name == nested_view.NAME else None
    if sampler_name == nested_view.NAME:  # a run of its own kind (runs.nested), not a kernel
        sampler_params = nested and nested["nested"]
        latex, paragraph = nested_view.explain()
    else:
        sampler_spec = samplers.REGISTRY[sampler_name]
        defaults = sampler_defaults(sampler_spec)
        sampler_params = ui.param_inputs(sampler_spec, key="pg.sampler", defaults=defaults)
        latex, paragraph = explain(sampler_name)
    if latex:
        st.latex(latex)

if target is not None:
    # The density the chains will sample, before any run: a typed formula shows at once what
    # it means, and the page has its figure library loaded when the first samples arrive.
    tempered = sampler_params or {}
    nbeta = float(tempered.get("nbeta") or target.nbeta)
    params_json = json.dumps(target_params, sort_keys=True)
    grid = density_grid(target_name, params_json, nbeta, float(tempered.get("temperature", 1.0)))
    preview.plotly_chart(
        charts.density_figure(
            grid["xs"],
            grid["ys"],
            grid["log_density"],
            labels=diagnostics.labels_of(target),
            title=f"{target_name}: the density sampled (log scale)",
            height=300,
        ),
        key="pg.preview",
    )

length = None if sampler_name == nested_view.NAME else run_length("pg")
spec = None
if target is not None and nested is not None:
    spec = nested_view.spec_of(target_name, target_params, nested)
if target is not None and sampler_params is not None and length is not None:
    spec = {
        "target": {"name": target_name, "params": target_params},
        "sampler": {"name": sampler_name, "params": sampler_params},
        **length,
        "record": {"animate": animate.traced_steps(length["steps"])},  # the animated view
    }
confirmed = ui.budget_gate([spec] if spec and nested is None else [], "pg")  # nested: seconds

if st.button("Run", type="primary", key="pg.run"):
    if spec is None:
        st.error(ui.FIX_FIRST, icon=ui.WARNING)
    elif not confirmed:
        st.error(ui.OVER_BUDGET, icon=ui.WARNING)
    elif run_id := ui.submit(spec):
        st.session_state["pg.shown"] = run_id
        ui.await_first_records([run_id])


# ---------------------------------------------------------------------------------------------
# Live views of the shown run.


def histogram(ctx: dict, draws: np.ndarray, i: int):
    target, label = ctx["target"], ctx["labels"][i]
    lo, hi = target.bounds[i]
    edges = charts.histogram_edges(lo, hi, BINS)
    x = y = None
    name = "exact"
    if ctx["truths"] and i in target.marginals:
        x = np.linspace(lo, hi, CURVE_POINTS)
        y = np.exp(target.marginals[i](torch.from_numpy(x)).numpy())
        name = "exact marginal (closed form)"
    elif ctx["exact"] is not None:
        x = 0.5 * (edges[1:] + edges[:-1])
        y = charts.histogram_density(ctx["exact"][:, i], edges)
        name = f"exact ({diagnostics.EXACT_DRAWS:,} exact draws)"
    title = f"Marginal of {label}"
    return charts.histogram_figure(
        draws[..., i].ravel(),
        x,
        y,
        title,
        f"{label} (coordinate {i})",
        edges=edges,
        exact_name=name,
        height=320,
    )


def live_run(run_id: str, show: int, trail: int, log_scale: bool, tails: list[float]) -> None:
    try:
        record = store.get(run_id)
    except KeyError:
        st.info("This run was deleted.")
        return
    ui.stop_polling("pg.polling", run_id, record.status in FINAL)
    if nested_view.is_nested_run(record.spec):
        nested_view.show(store, record, log_scale)
        return
    ui.progress_bar(record)
    ctx = run_context(record)
    if ctx is None:
        return
    data, labels, grid = ctx["data"], ctx["labels"], ctx["grid"]
    name = compare.sampler_label(record.spec)
    animate.player([record], [name], grid, ctx["target"].bounds, labels, log_scale)
    if not len(data.get("step", ())):
        if record.status in FINAL:
            ui.run_status(record)
        else:
            st.caption("Waiting for the first samples…")
        return
    position = data["position"]
    # The views below read an even subsample after burn-in: a rerun's cost stays flat.
    draws, every, total = diagnostics.even_sample(position, data["diverged"], ctx["burn"])
    sample = draws.reshape(-1, 2)
    run_figures(record, ctx, sample, min(show, position.shape[1]), trail, log_scale)
    if not ctx["truths"]:
        st.caption(
            "Exact marginals hold for nβ = 1, localization 0 and temperature 1; this run "
            "samples another density, so no exact curve, exact tail or KS is shown."
        )
    run_diagnostics(record, ctx, sample, every, total, tails)
    if record.status in FINAL:
        ui.run_status(record)


def run_figures(record, ctx: dict, sample, shown: int, trail: int, log_scale: bool) -> None:
    """The density with the chains' last ``trail`` steps and the draws, both marginals' histograms,
    and each coordinate's trace."""
    run_id, data, labels, grid = record.id, ctx["data"], ctx["labels"], ctx["grid"]
    position, step = data["position"], data["step"]
    cloud = sample[:: max(1, len(sample) // MAX_CLOUD)]
    paths = np.moveaxis(position[-trail:, :shown], 0, 1)
    c1, c2 = st.columns([3, 2])
    c1.plotly_chart(
        charts.density_figure(
            grid["xs"],
            grid["ys"],
            grid["log_density"],
            paths,
            cloud,
            labels,
            log_scale=log_scale,
            title=f"{record.spec['target']['name']}: chains' last {trail} steps and the draws",
            height=640,
            divergent=diagnostics.divergent_draws(data, ctx["burn"]),
        ),
        key=f"pg.density.{run_id}",
    )
    with c2:
        for i in range(2):
            st.plotly_chart(histogram(ctx, sample, i), key=f"pg.hist.{run_id}.{i}")
    stride = max(1, len(step) // MAX_TRACE)
    burn_step = record.spec["burn_in"] or None
    for i, col in enumerate(st.columns(2)):
        col.plotly_chart(
            charts.trace_figure(
                step[::stride],
                position[::stride, :shown, i],
                f"Trace of {labels[i]}",
                f"{labels[i]} (position)",
                burn_in=burn_step,
            ),
            key=f"pg.trace.{run_id}.{i}",
        )


def run_diagnostics(record, ctx: dict, sample, every: int, total: int, tails: list) -> None:
    """The run's numbers: acceptance, diverged chains, draws and seconds, then the diagnostics
    table (failing cells in colour) and what the views leave out."""
    run_id, data = record.id, ctx["data"]
    facts = diagnostics.metrics(record, data, every, total)
    m1, m2, m3, m4 = st.columns(4)
    band = verdict.ACCEPTANCE.get(record.spec["sampler"]["name"])
    m1.metric(
        "acceptance",
        number(facts["acceptance"], 3) if facts["mh"] else "no MH step",
        acceptance_delta(facts["acceptance"], band),
        delta_color="normal",
    )
    m2.metric("diverged chains", facts["diverged chains"])
    m3.metric("draws after burn-in", f"{total:,}")
    m4.metric("seconds", number(facts["seconds"], 3))
    if (line := diagnostics.adapted_line(record.summary)) is not None:
        st.caption(line)
    tail = tail_ess(run_id, ctx["burn"]) if diagnostics.final_coordinates(record) else None
    rows = diagnostics.diagnostics_rows(record, ctx["target"], ctx["exact"], sample, tails, tail)
    flags = [diagnostics.cell_flags(row) for row in rows]
    st.dataframe(highlighted(rows, flags), hide_index=True, key=f"pg.diag.{run_id}")
    lo, hi = np.array(ctx["target"].bounds).T
    outside = float(np.mean(((sample < lo) | (sample > hi)).any(-1))) if len(sample) else 0.0
    if every > 1:
        st.caption(
            f"Histograms, tails, KS and the live acceptance use one record in {every}: "
            f"{len(sample):,} of the {total:,} draws."
        )
    if outside > 0.01:
        st.caption(f"{outside:.1%} of the draws lie outside the plotted range.")


def acceptance_delta(acceptance: float | None, band: tuple | None) -> str | None:
    """The acceptance tile's coloured note: green inside the kernel's sensible band, red out."""
    if acceptance is None or band is None:
        return None
    lo, hi = band
    where = "in" if lo <= acceptance <= hi else ("below" if acceptance < lo else "above")
    return f"{'' if where == 'in' else '-'}{where} its band {lo:g}–{hi:g}"


def view_controls(run_id: str) -> tuple:
    """The shown run's drawing options and tail thresholds: ``live_run``'s arguments."""
    spec = runs[run_id].spec
    if nested_view.is_nested_run(spec):  # no chains, paths or tails: the contours alone
        return run_id, 0, 0, st.toggle("contours of log density −U", True, key="pg.log_scale"), []
    shown_target = target_of(spec["target"]["name"], diagnostics.params_json(spec))
    d1, d2, d3 = st.columns(3)
    show = d1.slider("chains drawn", 1, 16, 8, key="pg.show")
    trail = d2.slider("recent steps per path", 1, 500, 50, key="pg.trail")
    log_scale = d3.toggle("contours of log density −U", True, key="pg.log_scale")
    tails = []
    if not isinstance(shown_target, ParamError):
        cols = st.columns(2)
        defaults = diagnostics.default_tails(shown_target)
        for i, label in enumerate(diagnostics.labels_of(shown_target)[:2]):
            tails.append(
                cols[i].number_input(
                    f"tail threshold t for P({label} < t)",
                    value=defaults[i],
                    key=f"pg.tail.{spec['target']['name']}.{i}",
                )
            )
    return run_id, show, trail, log_scale, tails


shown_here = (nested_view.is_nested_run, diagnostics.is_playground_run)
runs = {r.id: r for r in [r for r in store.list() if any(f(r.spec) for f in shown_here)][:30]}
shown_id, _ = watch(
    "pg",
    "Run shown",
    run_choices(runs.values()),
    "No playground runs yet: pick a potential and a sampler above, then Run.",
    live_run,
    lambda i: runs[i].status in FINAL,
    0.5,
    controls=view_controls,
)
# ---------------------------------------------------------------------------------------------
# Explanation: of the run shown (else of the sampler picked above).

explained = sampler_name
if shown_id:
    shown_spec = runs[shown_id].spec
    nested_run = shown_spec.get("kind") == nested_view.NAME
    explained = nested_view.NAME if nested_run else shown_spec["sampler"]["name"]
explained = explained if explained in SAMPLERS else sampler_name
latex, paragraph = nested_view.explain() if explained == nested_view.NAME else explain(explained)
st.subheader(f"How {explained} works")
st.latex(POSTERIOR)
if latex:
    st.latex(latex)
st.markdown(paragraph)
