"""Networks & LLC: the local learning coefficient of a network at a trained point w0, live, a step
size x nbeta calibration grid that says which settings to trust, and the variational free energy's
n-scan (VI via resolution of singularities; docs/methods/vi.md), whose slope bounds the learning
coefficient from above.

Widgets -> RunSpec (observables ["llc"]) -> ui.submit; the store's "flushes" series (one row
per flush: running LLC, loss, distance |w - w0| and MALA acceptance per chain) -> charts.llc.
The VI tab: widgets -> studies.vi_scan.specs (one vi run per n and source) -> the "vi" sweep;
its results -> charts.vi. Every sweep tab is a ``ui.SweepTab``.
"""

from __future__ import annotations

import streamlit as st

import charts
import landscapes
import samplers
import ui
from charts import table
from landscapes import ParamError
from runs import vi
from runs.spec import parse_spec
from runs.store import FINAL
from studies import calibrate, checkpoints, llc, vi_scan
from ui import models
from ui.live import run_choices, watch
from ui.llc_view import live_run
from ui.model_inputs import checkpoint_label, factory_label, loss_caption, model_inputs
from ui.truths import network_facts
from ui.widgets import llc_inputs

ui.legacy_guard()  # a fresh server's first deep link: hand the run to the shell

NETWORKS = [name for name, spec in landscapes.REGISTRY.items() if spec.kind == "network"]
SAMPLERS = [name for name, spec in samplers.REGISTRY.items() if spec.kind == "sgmcmc"]
MAX_STEP_SIZES, MAX_NBETAS = 8, 6
MAX_NS = 8  # values of n in one VI scan


# ---------------------------------------------------------------------------------------------
# Controls: the network, w0, the sampler and the run length, shared by both views.

store = ui.open_page(
    "Networks & LLC",
    "The local learning coefficient λ̂ = nβ (E[L_n] − L_n(w0)) of a network at a point w0, "
    "sampled in a background worker; the estimate fills in live.",
)

left, right = st.columns(2)
with left:
    target_name = st.selectbox("Network", NETWORKS, key=ui.kept("net.target_name"))
    target_spec = landscapes.REGISTRY[target_name]
    paper = f" — *{target_spec.paper}*" if target_spec.paper != "-" else ""
    st.caption(f"{target_spec.doc}{paper}")
    if target_name == "model":
        target_params = model_inputs(target_spec)
    else:
        target_params = ui.param_inputs(target_spec, key="net.target")
    facts = None
    if target_params is not None:
        facts = network_facts({"name": target_name, "params": target_params})
        if "error" in facts:
            ui.spec_error(ParamError(facts["field"], facts["error"].split(": ", 1)[-1]))
            facts = None
        else:
            true = facts["true_llc"]
            st.caption(
                f"d = {facts['dim']} parameters, n = {facts['n']} points, "
                f"default nβ = n / log n = {facts['nbeta']:.4g}, "
                + (f"true λ = {true:g}" if true is not None else "true λ unknown")
            )
            loss_caption(target_name, target_params, facts)
    # Each network keeps its own settings (keys name it), so its defaults show when picked.
    truth = None if facts is None else facts["truth"]
    w0_default = llc.W0_DEFAULTS.get(target_name)
    llc_opts, truth_error = llc_inputs(f"net.llc.{target_name}", target_name, truth, w0_default)
with right:
    sampler_name = st.selectbox("Sampler", SAMPLERS, key=ui.kept("net.sampler_name"))
    sampler_spec = samplers.REGISTRY[sampler_name]
    st.caption(f"{sampler_spec.paper}")
    step_size = llc.default_step_size(target_name, sampler_spec)
    defaults = llc.SAMPLER_DEFAULTS | {"step_size": step_size}
    sampler_params = ui.param_inputs(sampler_spec, f"net.sampler.{target_name}", defaults=defaults)
    c1, c2, c3, c4 = st.columns(4)
    chains = c1.number_input("chains", 1, 4096, 4, key="net.chains")
    steps = c2.number_input("steps", 1, 10_000_000, 2000, step=100, key="net.steps")
    burn_in = c3.number_input("burn-in", 0, 10_000_000, 500, step=100, key="net.burn_in")
    seed = c4.number_input("seed", 0, 2**31 - 1, 0, key="net.seed")
    predictive = False
    if facts is not None and facts["classes"]:  # a classification network: mlp, slp
        predictive = st.checkbox(
            "posterior-predictive metrics (test set)",
            key=ui.kept("net.predictive"),
            help="At the end of the run: the kept draws' ensemble log p, accuracy, calibration "
            "and input curvature on the test set (as in Yu et al., Sec. 4.1).",
        )

ready = None not in (target_params, sampler_params, facts) and not truth_error
spec = {
    "target": {"name": target_name, "params": target_params},
    "sampler": {"name": sampler_name, "params": sampler_params},
    "chains": int(chains),
    "steps": int(steps),
    "burn_in": int(burn_in),
    "seed": int(seed),
    "observables": ["llc", "predictive"] if predictive else ["llc"],
    "llc": llc_opts,
}


# ---------------------------------------------------------------------------------------------
# Live views.


def draw_calibration(sweep: dict, result: dict) -> None:
    """The step size x nbeta grid (running cells from their flushes) and each row's pick."""
    sweep_id = sweep["id"]
    base = sweep["spec"]["base"]
    nbeta_default = network_facts(base["target"])["nbeta"]

    def flushes(run_id: str) -> dict:  # new rows only, as the estimate's view reads them
        return ui.Live(store, run_id, series="flushes").update()

    cells = result["cells"] + calibrate.pending_cells(store, sweep, result, nbeta_default, flushes)
    metric = st.segmented_control(
        "Show",
        ["llc", "distance", "acceptance"],
        default="llc",
        format_func={"llc": "λ̂", "distance": "distance |w − w0|", "acceptance": "acceptance"}.get,
        key=f"cal.metric.{sweep_id}",
    )
    figure = charts.calibration_grid(
        cells,
        result["recommended"],
        step_sizes=sweep["spec"]["step_sizes"],
        nbetas=sweep["spec"]["nbetas"],
        metric=metric or "llc",
    )
    st.plotly_chart(figure, key=f"cal.grid.{sweep_id}")
    for nbeta, step_size in result["recommended"].items():
        if step_size is None:
            st.warning(
                f"nβ = {float(nbeta):.4g}: no step size in the grid passes every check; the "
                "flags on each cell say why (smaller steps, more steps or more chains).",
                icon=ui.WARNING,
            )
        else:
            st.success(f"nβ = {float(nbeta):.4g}: largest stable step size ε = {step_size:g}")
    if result["cells"]:
        st.dataframe(
            calibrate.rows(result["cells"]),
            hide_index=True,
            column_config={"step size": ui.STEP_COLUMN},
            key=f"cal.table.{sweep_id}",
        )


def draw_vi(sweep: dict, result: dict) -> None:
    """The fits' objective curves, -Psi against log n with its slopes, the flags, the table."""
    sweep_id = sweep["id"]
    if result["eta_s"]:
        st.caption(f"about {result['eta_s']:.0f} s left at the fits' speed so far")
    st.plotly_chart(charts.objective_curves(result["cells"]), key=f"vi.curves.{sweep_id}")
    st.plotly_chart(
        charts.free_energy_figure(
            result["cells"], result["slopes"], result["log_z_bar_fit"], result["true_lc"]
        ),
        key=f"vi.slope.{sweep_id}",
    )
    vi_metrics(sweep, result)
    if result["log_z_bar_fit"]:
        st.caption(
            f"The exact −log Z̄'s own slope over these n: {result['log_z_bar_fit']['slope']:.3f} "
            "(what a perfect fit would give on this data)."
        )
    for flag in result["flags"]:
        where, message, advice = (ui.plain(flag[k]) for k in ("where", "message", "try"))
        text = f"**{where}**: {message}; try {advice}"
        (st.error if flag["level"] == "fail" else st.warning)(text, icon=ui.WARNING)
    st.dataframe(vi_scan.rows(result["cells"]), hide_index=True, key=f"vi.table.{sweep_id}")


def vi_metrics(sweep: dict, result: dict) -> None:
    """The slope of each source beside the true λ and the latest sampling estimate."""
    target = {"name": sweep["spec"]["target"], "params": sweep["spec"]["target_params"]}
    llc_run = llc.latest_llc(store, target)
    columns = st.columns(len(result["slopes"]) + 2)
    for col, (source, fit) in zip(columns, result["slopes"].items(), strict=False):
        se = "" if not fit or fit["slope_se"] is None else f" ± {fit['slope_se']:.3f}"
        shown = "–" if not fit else f"{fit['slope']:.3f}{se}"
        col.metric(f"slope of −Ψ, {vi.NAMES[source]}", shown)
    true = result["true_lc"]
    columns[-2].metric("true λ", "unknown" if not true else f"{true['lambda']:g}")
    if llc_run is None:
        columns[-1].metric("λ̂ (sampling)", "–", help="no finished LLC run on this network yet")
    else:
        est = llc_run.summary["observables"]["llc"]
        columns[-1].metric(
            "λ̂ (sampling)",
            f"{est['mean']:.3g} ± {est['se']:.2g}",  # short: the column is a quarter wide
            help=f"run {llc_run.id}, n = {llc_run.spec['target']['params'].get('n')}",
        )
        verdict = llc_run.summary.get("verdict") or {}
        if verdict.get("status") in ("warn", "fail"):
            columns[-1].caption(f"its verdict: **{verdict['status']}** (see the LLC tab)")


def draw_checkpoints(sweep: dict, result: dict) -> None:
    """The LLC at each checkpoint against its training step, and each run's row."""
    sweep_id = sweep["id"]
    cells = result["cells"]
    st.plotly_chart(charts.checkpoint_llc_figure(cells), key=f"ckpt.figure.{sweep_id}")
    rows, flags = models.checkpoint_rows(cells)
    if rows:
        st.dataframe(
            table.highlighted(rows, flags),
            hide_index=True,
            key=f"ckpt.table.{sweep_id}",
        )
    if any(flags):
        st.caption(
            "Amber: the run's verdict is warn or its LLC warned (the code in warnings); red: "
            "its verdict is fail. Each run's page on the LLC (sampling) tab or Runs says why."
        )


# ---------------------------------------------------------------------------------------------
# The views.

names = ["LLC (sampling)", "Calibrate", "Free energy (VI)"]
if target_name == "model":
    names.append("LLC over training")
estimate_tab, calibrate_tab, vi_tab, *more = st.tabs(names)

with estimate_tab:
    if st.button("Run", type="primary", key="net.run"):
        if not ready:
            st.error(ui.FIX_FIRST, icon=ui.WARNING)
        elif run_id := ui.submit(spec):
            st.session_state["net.shown"] = run_id
    runs = {r.id: r for r in llc.llc_runs(store)}
    watch(
        "net",
        "Run",
        run_choices(runs.values()),
        "No LLC runs yet: pick a network and a sampler above, then Run.",
        live_run,
        lambda i: runs[i].status in FINAL,
        1.0,
        aside=lambda i, side: side.segmented_control(
            "Band", ["SE", "SD"], default="SE", key="net.band"
        ),
    )

with calibrate_tab:
    st.markdown(
        "The setup above over a grid of step sizes ε and nβ values, one run per cell. A cell is "
        "**stable** when no chain diverged, the loss did not spike, λ̂ lies in (0, d/2] within "
        "2 standard errors, its running estimate is stationary, a Langevin step of the size the "
        "chains take (preconditioning included) would be accepted by MALA at least 90% of the "
        "time, its SE is within 10% of λ̂, and the cell with a step 10× smaller agrees with it "
        "(within 10% plus 2 SE; the grid's smallest step has none: unconfirmed). A step that is "
        "too large biases every draw alike, so a settled curve alone proves nothing. The "
        "recommendation is the largest stable ε for each nβ."
    )
    c1, c2 = st.columns(2)
    with c1:
        grid = f"{step_size / 10:g}, {step_size:g}, {step_size * 10:g}"  # around the default
        step_text = st.text_input(
            "step sizes ε", grid, key=f"cal.step_sizes.{target_name}.{sampler_name}"
        )
    with c2:
        nbeta_text = st.text_input("nβ values (empty: n / log n)", "", key="cal.nbetas")
    step_size_param = sampler_spec.param("step_size")
    step_grid = ui.parse_grid(step_text, step_size_param, "step_sizes", MAX_STEP_SIZES, "calibrate")
    nbeta_grid = (None,)
    if nbeta_text.strip():
        nbeta_param = sampler_spec.param("nbeta")
        nbeta_grid = ui.parse_grid(nbeta_text, nbeta_param, "nbetas", MAX_NBETAS, "calibrate")

    def build_calibration() -> tuple[dict, list]:
        base = parse_spec({**spec, "observables": ["llc"]})  # no predictive per cell
        return calibrate.specs(base, step_grid, nbeta_grid)

    ui.SweepTab(
        kind="calibrate",
        prefix="cal",
        button="Calibrate",
        button_key="cal.run",
        picker="Calibration",
        label=lambda s: (
            f"{s['id']} · {s['spec']['base']['target']['name']} · "
            f"{s['spec']['base']['sampler']['name']} · {len(s['cells'])} cells"
        ),
        empty="No calibrations yet.",
        delete="Delete this calibration",
        draw=draw_calibration,
    ).show(
        build_calibration,
        None if ready and step_grid is not None and nbeta_grid is not None else ui.FIX_FIRST,
    )

with vi_tab:
    st.markdown(
        'A normalizing flow on a generalized-gamma source (after the paper "Variational '
        'inference via resolution of singularities") fitted to the '
        "network's posterior at each n: its objective Ψ = ELBO + n S_n is a lower bound on "
        "log Z̄(n), and the slope of −Ψ against log n estimates the learning coefficient from "
        "above. The network is the one chosen above, with a prior N(μ, σ² I); every n is the "
        "first n points of one dataset of max(n) points."
    )
    c1, c2, c3 = st.columns(3)
    ns_text = c1.text_input("values of n", "500, 1000, 2000, 5000", key="vi.ns")
    sources = c2.multiselect(
        "sources",
        list(vi.SOURCES),
        default=list(vi.SOURCES),
        format_func=vi.NAMES.get,
        key="vi.sources",
        help="nf_gamma: the generalized gamma, learned; nf_gaussian: a fixed Gaussian of the "
        "same mean and variance (the paper's baseline)",
    )
    epochs = c3.number_input("epochs", 1, 100_000, 300, step=50, key="vi.epochs")
    c1, c2, c3 = st.columns(3)
    prior_mean = c1.number_input("prior mean μ", -1e6, 1e6, 5.0, key="vi.prior_mean")
    prior_variance = c2.number_input(
        "prior variance σ²", 1e-6, 1e12, 100.0, format="%g", key="vi.prior_variance"
    )
    c3.caption(
        "Adam: 1e-3 for the flow and k, 1e-1 for λ and β; minibatches of n/10, 5 draws a "
        "step; the final Ψ from 100 draws with the analytic entropy."
    )
    sized = any(p.name == "n" for p in target_spec.params)  # a model's data is its factory's
    ns = ui.parse_grid(ns_text, target_spec.param("n"), "ns", MAX_NS, "vi") if sized else None
    if not sized:
        st.info(
            f"The n-scan takes the first n points of a dataset it generates; {target_name} has "
            "no n (its data is the factory's): pick another network for it."
        )

    def build_scan() -> tuple[dict, list]:
        given = {k: v for k, v in target_params.items() if k != "n"}
        options = {
            "epochs": int(epochs),
            "prior_mean": float(prior_mean),
            "prior_variance": float(prior_variance),
        }
        scan = tuple(int(n) for n in ns)
        return vi_scan.specs(target_name, given, scan, tuple(sources), options, seed=int(seed))

    ui.SweepTab(
        kind="vi",
        prefix="vi",
        button="Run the n-scan",
        button_key="vi.run",
        picker="n-scan",
        label=lambda s: (
            f"{s['id']} · {s['spec']['target']} · n "
            f"{', '.join(map(str, s['spec']['ns']))} · "
            f"{', '.join(vi.NAMES[x] for x in s['spec']['sources'])}"
        ),
        empty="No n-scans yet.",
        delete="Delete this scan",
        draw=draw_vi,
        noun="scan",
        every=1.0,
    ).show(
        build_scan,
        None if target_params is not None and ns is not None else ui.FIX_FIRST,
        disabled=not sized,
    )
    with st.expander("What these numbers are"):
        st.markdown(
            """
**Ψ** = ELBO + n S_n, with n S_n = −Σ log p(y_i | x_i, w0) at the true parameter w0: the ELBO of
the flow's distribution q, shifted so that it is comparable across n. It is a lower bound on
**log Z̄(n)** = log ∫ exp(−n K_n(w)) φ(w) dw, the normalised evidence, whatever the flow
(eq. 2 of the VI paper); Basin computes log Z̄ exactly where it can (the H = 1 tanh network, by
quadrature), and a Ψ above it is flagged as impossible.

**The slope.** Singular learning theory gives −log Z̄(n) = λ log n − (m − 1) log log n + O(1),
with λ the learning coefficient (RLCT) and m its multiplicity. The best Ψ a variational family
reaches grows like λ_vb log n with λ_vb ≥ λ, because Ψ ≤ log Z̄ at every n: so the slope of −Ψ
against log n estimates λ_vb, an **upper bound** on λ (equal when the family captures the
singularity's scaling, which the generalized gamma, the standard form of a singular posterior,
is built to do). Sampling's λ̂ (the LLC tab) estimates λ itself at one n.

**Read with care.** At small n the log log n term bends the line and one dataset's
fluctuations move each point by about a nat: the exact −log Z̄'s own slope (where known) shows
how far a perfect fit would be from λ on this data. A fit still rising at its last epochs, a
diverged fit, or a slope below λ by more than 2 SE are flagged above.
"""
        )

if more:
    with more[0]:
        st.markdown(
            "The setup above (sampler, chains, steps, nβ) at each checkpoint of a training "
            "run, one LLC run per checkpoint with w0 = its weights and the same seed, so the "
            "cells differ only in w0: λ̂ against the training step as the runs finish, with "
            "the training loss at each checkpoint."
        )
        factory = target_params["factory"] if target_params else None
        offered = [] if factory is None else models.checkpoint_choices(store.home, factory)
        chosen = st.multiselect(
            "checkpoints",
            offered,
            default=offered,
            format_func=lambda p: checkpoint_label(p, store.home),
            key=f"ckpt.chosen.{factory}",
            help="Uploaded above, or found under BASIN_MODELS; run in the order of the step in "
            "their file names.",
        )
        if not offered:
            st.info(
                "No checkpoints for this factory yet: upload some above (or put them under "
                "BASIN_MODELS)."
            )

        def build_over_training() -> tuple[dict, list]:
            base = parse_spec({**spec, "observables": ["llc"]})
            return checkpoints.specs(base, models.by_step(chosen))

        blocked = None
        if not ready:
            blocked = ui.FIX_FIRST
        elif not chosen:
            blocked = "**checkpoints**: choose one or more; nothing was queued."
        ui.SweepTab(
            kind="checkpoints",
            prefix="ckpt",
            button="Run over training",
            button_key="ckpt.run",
            picker="Sweep",
            label=lambda s: (
                f"{s['id']} · {s['spec']['base']['sampler']['name']} · "
                f"{len(s['cells'])} checkpoints · "
                f"{factory_label(s['spec']['base']['target']['params']['factory'])}"
            ),
            empty="No LLC-over-training sweeps yet.",
            delete="Delete this sweep",
            draw=draw_checkpoints,
        ).show(build_over_training, blocked)

with st.expander("What is shown here"):
    st.markdown(
        """
**The LLC.** λ̂(w0) = nβ (E[L_n(w)] − L_n(w0)), the expectation over the tempered posterior
localised at w0, ∝ exp(−nβ L_n(w) − (γ/2)|w − w0|²), with nβ = n / log n and γ = 1 by default
(Hitchcock & Hoogland 2025, Def. 3.1). Each chain gives its own estimate from the losses it saw
after the burn-in; the reported value is their mean with the standard error SD / √chains. A chain
that diverged (NaN) is left out and counted.

**w0.** *train* runs Adam (or SGD) to a loss plateau first (the training curve above), *truth*
starts at the generating parameters where the target knows them, *init* at a random
initialisation.

**Health.** λ̂ can never exceed d/2 nor be negative at a true local minimum (flagged when it
does by more than 2 standard errors, since at a regular point the truth is d/2); NaN chains and
loss spikes mean the step size is too large; a low MALA acceptance of a Langevin step of the
size the chains take (preconditioning included) means the discretisation biases the chains;
minibatch gradient noise comparable to the injected noise heats the posterior. Every chain
draws its own minibatches, so the SE over chains is honest. A running estimate that settled is
not enough: a step too large biases every draw alike, which only a 10× smaller step giving the
same λ̂ rules out; the calibration grid checks that, and all of the above, at once.
"""
    )
