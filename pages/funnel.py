"""Funnel: the SGRLD paper's headline experiment (Yu et al., Sec. 4.2), live. SGRLD in each metric
on the softplus funnel (x | v ~ N(2, softplus(v)), v ~ N(0, 80)) with N(0, 1) gradient noise, every
chain from (1, 1), at the paper's step sizes: how far down the neck does each metric get?

Widgets -> one RunSpec per metric (``studies.funnel.spec``, one seed and budget) -> ui.submit; their
records -> charts: per metric the draws over log p contours beside v's histogram against
N(0, 80) (the paper's Figure 2), v's trace and theta_1's histogram against its exact marginal;
then the tail table (``studies.funnel.tails``) beside the paper's reproduced values.
"""

from __future__ import annotations

import numpy as np
import streamlit as st
import torch

import charts
import samplers
import ui
from charts.table import highlighted
from landscapes import Param
from runs.store import FINAL
from samplers.explain import explain
from samplers.sgrld import GAMMA_OMITTED, METRICS
from studies import compare, diagnostics, funnel
from ui.live import watch
from ui.truths import funnel_tails, log_p_grid, open_group, theta1_density

ui.legacy_guard()  # a fresh server's first deep link: hand the run to the shell

SGRLD = samplers.REGISTRY["sgrld"]
# The settings each metric reads (the rest of the sampler's parameters do nothing here, or
# would change the target: nbeta and localization stay the potential's 1 and 0).
SETTINGS = {
    "identity": ("step_size",),
    "rmsprop": ("step_size", "decay", "epsilon"),
    "wenzel": ("step_size", "decay", "epsilon", "update_every"),
    "monge": ("step_size", "alpha2", "decay"),
    "shampoo": ("step_size", "decay", "epsilon", "update_every"),
}
NAMES = ["step", "position", "diverged"]
SCATTER = 1000  # the paper's figure: 1000 random draws
X_BINS = 56  # theta_1 on [-5, 9] in bins of 0.25: mu = 2 (the cusp) on an edge
CURVE_POINTS = 401
MAX_TRACE = 2000
HEIGHT = 380


# ---------------------------------------------------------------------------------------------
# Controls: the metrics, each with the paper's settings, and one budget.

store = ui.open_page(
    "The funnel: SGRLD's metrics in the neck",
    "The headline experiment of the SGRLD paper (Yu et al., Sec. 4.2): SGRLD on the softplus "
    "funnel from (1, 1), the gradient blurred by N(0, 1) noise, each metric at the paper's step "
    "size. The neck (v ≪ 0) is where x's variance softplus(v) vanishes and the gradient grows: "
    "does a metric get there?",
)

chosen = st.multiselect(
    "Metrics", list(METRICS), default=list(funnel.PROTOCOL), key=ui.kept("fun.metrics")
)
params: dict[str, dict | None] = {}
if chosen:
    for col, metric in zip(st.columns(len(chosen)), chosen, strict=True):
        with col, st.expander(f"{metric}: settings", expanded=False):
            skip = tuple(p.name for p in SGRLD.params if p.name not in SETTINGS[metric])
            params[metric] = ui.param_inputs(
                SGRLD, f"fun.{metric}", skip=skip, columns=1, defaults=funnel.parameters(metric)
            )
    st.caption(
        " · ".join(
            f"**{m}** h = {p['step_size']:g}"
            + (f", α² = {p['alpha2']:g}" if "alpha2" in p else "")
            + ("" if m in funnel.PROTOCOL else " (not in the paper's funnel runs)")
            for m, p in params.items()
            if p is not None
        )
        + ". Empty settings are the paper's (the expanders' help says which)."
    )
c1, c2, c3 = st.columns(3)
with c1:
    chains = ui.number_field(
        Param("chains", "int", funnel.CHAINS, "Chains per metric", 1, 4096), ui.kept("fun.chains")
    )
with c2:
    steps = ui.number_field(
        Param("steps", "int", funnel.PAGE_STEPS, "Steps of every chain", 100, 2_000_000),
        ui.kept("fun.steps"),
    )
with c3:
    seed = ui.number_field(
        Param("seed", "int", 1, "Seed of the noise, shared by the metrics", 0, 2**31 - 1),
        ui.kept("fun.seed"),
    )
st.caption(
    f"Burn-in: the first {funnel.BURN_FRACTION:.0%} of the steps. Every step is kept. The "
    f"default, {funnel.CHAINS} chains × {funnel.PAGE_STEPS:,} steps, fits the run budget. "
    f"{funnel.CHAINS} chains × {funnel.STEPS:,} steps reproduce the paper's statistics (it ran 1 "
    "chain × 2e6): type the steps and tick “Run anyway”, for a run 10 times longer. At the "
    "default length v's sd and lowest values fall short of the paper's rows (seed 1: identity's "
    "v sd 4.1, monge's 6.8, against 6.26 and 8.48); its probabilities already come close."
)
length_ok = None not in (chains, steps, seed)
ready = length_ok and all(p is not None for p in params.values())
specs = [funnel.spec(m, chains, steps, seed, **params[m]) for m in (chosen if ready else [])]
confirmed = ui.budget_gate(specs, "fun", thin=False)  # every step is kept

if st.button("Run", type="primary", key="fun.run"):
    if not chosen:
        st.error("**metrics**: choose at least one metric.", icon=ui.WARNING)
    elif any(p is None for p in params.values()):
        bad = ", ".join(m for m, p in params.items() if p is None)
        st.error(f"Fix the settings of {bad} first; nothing was queued.", icon=ui.WARNING)
    elif not length_ok:
        st.error(ui.FIX_FIRST, icon=ui.WARNING)
    elif not confirmed:
        st.error(ui.OVER_BUDGET, icon=ui.WARNING)
    else:
        ui.submit_group(specs, "fun.shown")


# ---------------------------------------------------------------------------------------------
# Live views of the shown experiment: a row of figures per metric, then the tail table.


def tail_table(basin: list, metrics=None, key: str = "fun.table") -> None:
    rows, flags = funnel.table(basin, metrics)
    st.dataframe(highlighted(rows, flags), hide_index=True, key=key)
    st.caption(
        "Tinted: far from the truth (an sd or the 1% quantile off by over 10%, a probability by "
        "over 0.03, KS above 0.05, a minimum never below the true 1% quantile −20.8). In the "
        "paper's protocol no metric reaches the neck: P(v < −10) stays well below the true "
        "0.132 in every row, the paper's own included. And part of the adaptive metrics' gain "
        f"is their Gamma bias: {GAMMA_OMITTED}."
    )


def live_group(shown: str, show: int) -> None:
    group = open_group(shown.split(","), "fun.polling")
    if group is None:
        return
    records, done, first, params_json, target = group
    burn = diagnostics.burn_records(first)
    named = compare.run_labels(records.values())
    labels = {i: x.removeprefix("sgrld · ") for i, x in named.items()}
    exact = exact_views(target, params_json)
    basin = []
    for run_id, record in records.items():
        label, sampler = labels[run_id], record.spec["sampler"]["params"]
        st.markdown(f"**{ui.plain(label)}** · h = {sampler['step_size']:g}")
        ui.progress_bar(record)
        data = ui.Live(store, run_id, names=NAMES).update()
        position = data.get("position")
        if position is None or not len(position):
            st.caption("Waiting for the first samples…")
            basin.append((sampler["metric"], "Basin: no draws yet", {}))
            continue
        sample, _, total = diagnostics.even_sample(position, data["diverged"], burn)
        draws = sample.reshape(-1, 2)
        run_figures(run_id, record, label, draws, data, show, exact)
        if record.status in FINAL:  # every kept draw, once
            tails, source = funnel_tails(run_id, burn), f"Basin ({total:,} draws)"
        else:
            tails = funnel.tails(draws[:, 1], draws[:, 0])
            source = f"Basin, live ({len(draws):,} of {total:,} draws)"
        basin.append((sampler["metric"], source, tails))

    st.subheader("Tails of the neck v")
    tail_table(basin, metrics=(), key=f"fun.table.{shown}")
    st.caption(
        "Live rows use an even subsample of at most "
        f"{diagnostics.MAX_STAT:,} kept draws; a finished run's row uses every kept draw."
    )
    if done:
        for run_id, record in records.items():
            if record.status != "completed" or (record.summary or {}).get("diverged_chains"):
                st.caption(f"**{ui.plain(labels[run_id])}**")
                ui.run_status(record)


def exact_views(target, params_json: str) -> dict:
    """What every run of the group is drawn against: log p on the grid, the v histogram's bins
    and v's exact density, the θ1 bins and θ1's exact bin averages."""
    grid = log_p_grid(target.name, params_json, (funnel.X_RANGE, funnel.V_RANGE))
    v = np.linspace(*funnel.V_RANGE, CURVE_POINTS)
    v_pdf = np.exp(target.marginals[1](torch.from_numpy(v)).numpy())
    x_edges = charts.histogram_edges(*funnel.X_RANGE, X_BINS)
    x_step = charts.step_curve(x_edges, theta1_density(target.name, params_json, tuple(x_edges)))
    return {
        "grid": grid,
        "v_edges": charts.histogram_edges(*funnel.V_RANGE, funnel.V_BINS),
        "v_curve": (v, v_pdf),
        "x_edges": x_edges,
        "x_step": x_step,
    }


def run_figures(run_id, record, label: str, draws, data: dict, show: int, exact: dict) -> None:
    """One run's row: its draws over log p with v's histogram, θ1's histogram, v's trace."""
    position = data["position"]
    pick = np.random.default_rng(0).choice(len(draws), min(SCATTER, len(draws)), False)
    left, middle, right = st.columns([5, 3, 3])
    left.plotly_chart(
        charts.funnel_figure(
            exact["grid"]["xs"],
            exact["grid"]["ys"],
            exact["grid"]["log_density"],
            funnel.CONTOURS,
            draws[pick],
            draws[:, 1],
            exact["v_edges"],
            exact["v_curve"],
            f"{label}: draws over log p, v against N(0, 80)",
            curve_name="N(0, 80)",
            height=HEIGHT,
        ),
        key=f"fun.neck.{run_id}",
    )
    middle.plotly_chart(
        charts.histogram_figure(
            draws[:, 0],
            *exact["x_step"],
            f"{label}: θ1",
            "θ1",
            edges=exact["x_edges"],
            exact_name="exact (bin averages)",
            height=HEIGHT,
        ),
        key=f"fun.theta1.{run_id}",
    )
    stride = max(1, len(position) // MAX_TRACE)
    right.plotly_chart(
        charts.trace_figure(
            data["step"][::stride],
            position[::stride, :show, 1],
            f"{label}: trace of v",
            "v",
            y_range=funnel.V_RANGE,
            burn_in=record.spec["burn_in"] or None,
            height=HEIGHT,
        ),
        key=f"fun.trace.{run_id}",
    )


def view_controls(shown: str) -> tuple:
    return shown, st.slider("chains drawn per trace", 1, 16, 4, key="fun.show")


groups = {
    ",".join(r.id for r in g): g for g in compare.run_groups(store.list(), funnel.is_protocol_run)
}
options = {
    o: f"{g[0].id} · "
    + ", ".join(compare.run_labels(g).values()).replace("sgrld · ", "")
    + f" · {g[0].spec['chains']} chains × {g[0].spec['steps']:,} steps · seed {g[0].spec['seed']}"
    for o, g in groups.items()
}
shown, _ = watch(
    "fun",
    "Experiment shown",
    options,
    "No funnel runs yet: pick the metrics above, then Run. The paper's values:",
    live_group,
    lambda o: all(r.status in FINAL for r in groups[o]),
    2.0,
    controls=view_controls,
)
if shown is None:
    tail_table([])

# ---------------------------------------------------------------------------------------------
# Explanation: the sampler and the protocol.

st.subheader("The sampler")
latex, text = explain("sgrld")
st.latex(latex)
st.markdown(text)
st.markdown(
    "**The protocol** (Yu et al., Sec. 4.2 and App. A.4): log p is the softplus funnel's with μ = "
    "2 and σ² = 80 (the authors' code; softplus(v) is x's variance); the gradient gets N(0, 1) "
    "noise added; every chain starts at (1, 1); the step sizes are the paper's (identity h = "
    "0.001; rmsprop 0.0025 with λ = 0.995, ε = 0; monge 0.003 with α² = 0.1, λ = 0.7; shampoo "
    "0.003 with λ = 0.9995, ε = 1e-6). The paper ran 1 chain × 2e6 steps and kept them all; 32 "
    "chains × 2e5 steps with a 10% burn-in reproduce its statistics, and its rows in the table are "
    "the authors' code rerun. The contours are log p = −10, −7.5, −5, −2.5, as in its Figure 2. "
    "wenzel was not in the paper's funnel experiment: it starts at identity's step."
)
