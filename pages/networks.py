"""Networks & LLC: the local learning coefficient of a network at a trained point w0, live, a
step size x nbeta calibration grid that says which settings to trust, and the variational free
energy's n-scan (reference 004), whose slope bounds the learning coefficient from above.

Widgets -> RunSpec (observables ["llc"]) -> ui.submit; the store's "flushes" series (one row
per flush: running LLC, loss, distance |w - w0| and MALA acceptance per chain) -> charts.llc.
The VI tab: widgets -> runs.vi.specs (one vi run per n and source) -> the "vi" sweep;
runs.vi.results -> charts.vi.
"""

from __future__ import annotations

import math
import os

import streamlit as st

import charts
import landscapes
import samplers
import ui
from charts import table
from charts.table import number
from landscapes import ParamError
from runs import vi
from runs.spec import SpecError, parse_spec
from runs.store import FINAL
from studies import report
from studies import sweep as sweeps
from ui import models
from ui.live import delete_button, run_choices, watch
from ui.truths import network_facts
from ui.widgets import llc_inputs

NETWORKS = [name for name, spec in landscapes.REGISTRY.items() if spec.kind == "network"]
SAMPLERS = [name for name, spec in samplers.REGISTRY.items() if spec.kind == "sgmcmc"]
MAX_STEP_SIZES, MAX_NBETAS = 8, 6
MAX_NS = 8  # values of n in one VI scan
OWN_WEIGHTS = ""  # the checkpoint choice "the module's own weights" (no checkpoint)


# ---------------------------------------------------------------------------------------------
# The model target: a factory the operator put in BASIN_MODELS (listed, never uploaded) and a
# weights-only checkpoint (uploaded, checked against the module, kept in the store's home).


def factory_label(ref: str) -> str:
    where, _, attr = ref.rpartition(":")
    directory = models.models_dir()
    if where.endswith(".py") and directory is not None and where.startswith(f"{directory}/"):
        return f"{where.removeprefix(f'{directory}/')}:{attr}"
    return ref


def checkpoint_label(path: str, home) -> str:
    if path == OWN_WEIGHTS:
        return "the module's own weights (as the factory builds it)"
    directory = models.models_dir()
    if str(path).startswith(f"{models.checkpoint_root(home)}/"):
        return f"{os.path.basename(path)} (uploaded)"
    if directory is not None and str(path).startswith(f"{directory}/"):
        return f"{path.removeprefix(f'{directory}/')} (in BASIN_MODELS)"
    return path


def upload_checkpoint(factory: str, choice_key: str) -> None:
    """The uploader: a new file is checked once (``models.accept_checkpoint``) and, kept,
    becomes the checkpoint chosen; its outcome shows while the file stays in the uploader."""
    cap = models.MAX_CHECKPOINT_BYTES
    upload = st.file_uploader(
        "Upload a checkpoint (weights only)",
        type=list(models.UPLOAD_TYPES),
        key="net.model.upload",
        max_upload_size=max(1, math.ceil(cap / 2**20)),
        help=f"A state dict saved with torch.save (read weights-only: a pickle that would run "
        f"code is refused) or .safetensors, at most {models.size_text(cap)}. It is checked "
        "against the factory's module (every tensor's name and shape) before it is kept.",
    )
    if upload is None:
        return
    outcomes = st.session_state.setdefault("net.model.uploads", {})
    key = f"{upload.file_id}:{factory}"
    if key not in outcomes:
        try:
            path = models.accept_checkpoint(upload.getvalue(), upload.name, factory, store.home)
        except ParamError as exc:
            outcomes[key] = ("refused", exc.field, str(exc).removeprefix(f"{exc.field}: "))
        else:
            outcomes[key] = ("kept", path)
            st.session_state[choice_key] = path
            chosen = f"ckpt.chosen.{factory}"  # the LLC over training's choice takes it too
            if chosen in st.session_state and path not in st.session_state[chosen]:
                st.session_state[chosen] = models.by_step([*st.session_state[chosen], path])
    outcome = outcomes[key]
    if outcome[0] == "kept":
        st.success(
            f"Kept {ui.plain(os.path.basename(outcome[1]))}: weights only, and every tensor "
            "matches the module's.",
            icon=ui.DONE,
        )
    else:
        ui.spec_error(ParamError(outcome[1], outcome[2] + "; nothing was kept or queued"))


def model_inputs(spec) -> dict | None:
    """The model target's params: a listed factory and a checkpoint (or the module's own
    weights); None after showing what is wrong."""
    offered = models.factories()
    directory = models.models_dir()
    if directory is None:
        st.caption(
            "Factories: the bundled example only. To offer your own, start the app with "
            "`BASIN_MODELS=/path/to/dir`: every top-level `make` or `make_*` function of the "
            "`.py` files in it is listed (found by parsing, not importing), and checkpoint files "
            "under it (.pt, .pth, .safetensors) are offered below. Uploaded code is never run."
        )
    if not offered:
        st.error(
            f"**model.factory**: no `make` or `make_*` function in the .py files of "
            f"{ui.plain(str(directory))} (BASIN_MODELS)",
            icon=ui.WARNING,
        )
        return None
    factory = st.selectbox(
        "factory",
        offered,
        format_func=factory_label,
        key=ui.kept("net.model.factory"),
        help="A function of no arguments returning (module, (inputs, targets), loss).",
    )
    choice_key = ui.kept(f"net.model.checkpoint.{factory}")
    upload_checkpoint(factory, choice_key)
    choices = [OWN_WEIGHTS, *models.checkpoint_choices(store.home, factory)]
    if st.session_state.get(choice_key) not in choices:
        st.session_state.pop(choice_key, None)
    checkpoint = st.selectbox(
        "checkpoint (w0)",
        choices,
        format_func=lambda p: checkpoint_label(p, store.home),
        key=choice_key,
        help="The weights the chains start from and are localised at: the LLC is measured there.",
    )
    try:
        return spec.validate({"factory": factory, "checkpoint": checkpoint or None})
    except ParamError as exc:
        ui.spec_error(exc)
        return None


def loss_caption(name: str, params: dict, facts: dict) -> None:
    """The loss in words under the network: the convention chosen for a regression network,
    the factory's loss and what eval mode does for a model."""
    if name == "model":
        try:
            described = models.describe_model(params["factory"])
        except ParamError:
            return  # said above, under the facts
        st.caption(f"{described['loss']}. Modes: {described['modes']}.")
    elif "loss_convention" in params:
        task = "classification" if facts.get("classes") else "regression"
        st.caption(models.loss_text(task, params["loss_convention"]))


# ---------------------------------------------------------------------------------------------
# Controls: the network, w0, the sampler and the run length, shared by both views.

st.title("Networks & LLC")
st.caption(
    "The local learning coefficient λ̂ = nβ (E[L_n] − L_n(w0)) of a network at a point w0, "
    "sampled in a background worker; the estimate fills in live."
)
ui.ensure_pool()
store = ui.store()

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
    w0_default = report.W0_DEFAULTS.get(target_name)
    llc_opts, truth_error = llc_inputs(f"net.llc.{target_name}", target_name, truth, w0_default)
with right:
    sampler_name = st.selectbox("Sampler", SAMPLERS, key=ui.kept("net.sampler_name"))
    sampler_spec = samplers.REGISTRY[sampler_name]
    st.caption(f"{sampler_spec.paper}")
    step_size = report.default_step_size(target_name, sampler_spec)
    defaults = report.SAMPLER_DEFAULTS | {"step_size": step_size}
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
            "and input curvature on the test set (reference 001, section 3).",
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


def live_run(run_id: str) -> None:
    try:
        record = store.get(run_id)
    except KeyError:
        st.info("This run was deleted.")
        return
    ui.stop_polling("net.polling", run_id, record.status in FINAL)
    ui.progress_bar(record)
    info = network_facts(record.spec["target"])
    train = store.get_array(run_id, "train_loss")
    if train is not None and len(train):
        st.plotly_chart(
            charts.loss_curve(train[:, 0], train[:, 1], "Training to w0"), key=f"net.train.{run_id}"
        )
    data = ui.Live(store, run_id, series="flushes").update()
    if len(data.get("step", ())):
        step = data["step"]
        band = st.session_state.get("net.band") or "SE"
        figure = charts.llc_figure(step, data["llc"], info.get("true_llc"), band=band.lower())
        st.plotly_chart(figure, key=f"net.llc.{run_id}")
        c1, c2 = st.columns(2)
        loss_axis = "loss L_n per chain, mean since the last flush (linear)"
        c1.plotly_chart(
            charts.chain_traces(step, data["loss"], loss_axis, "Loss per chain"),
            key=f"net.loss.{run_id}",
        )
        c2.plotly_chart(
            charts.chain_traces(
                step, data["distance"], "distance |w − w0| (parameter units, linear)", "Distance"
            ),
            key=f"net.distance.{run_id}",
        )
        for w in report.llc_warnings_so_far(record, data, info["dim"]):
            st.warning(f"**{w['code']}** (so far): {w['message']}", icon=ui.WARNING)
    elif record.status not in FINAL:
        st.caption("Waiting for the first samples…")
    if record.status in FINAL:
        ui.run_status(record)
        final_summary(record)
        predictive_summary(record)


def final_summary(record) -> None:
    est = ((record.summary or {}).get("observables") or {}).get("llc")
    if not est:
        return
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("λ̂ (mean ± SE over chains)", f"{number(est['mean'])} ± {number(est['se'], 2)}")
    c2.metric("SD over chains", number(est["std"]))
    c3.metric("true λ", number(est["true"]))
    c4.metric("d / 2 (largest possible λ)", number(est["dim"] / 2))
    for w in est["warnings"]:
        st.warning(f"**{w['code']}**: {w['message']}", icon=ui.WARNING)
    details = report.llc_details(est)
    c1, c2 = st.columns(2)
    rows = len(details["quantity"]) + 1  # every row (35 px each, as Streamlit draws them)
    c1.dataframe(details, hide_index=True, height=35 * rows + 3, key=f"net.details.{record.id}")
    c2.dataframe(
        {"chain": list(range(est["chains"])), "λ̂": est["per_chain"]},
        hide_index=True,
        key=f"net.chains.{record.id}",
    )


def predictive_summary(record) -> None:
    block = ((record.summary or {}).get("observables") or {}).get("predictive")
    if not block:
        return
    st.markdown(f"**Posterior predictive** on the {block.get('split', 'test')} set")
    st.dataframe(
        report.predictive_rows(block),
        hide_index=True,
        column_config={"meaning": st.column_config.TextColumn(width="large")},
        key=f"net.predictive.{record.id}",
    )


def live_calibration(sweep_id: str) -> None:
    try:
        sweep = store.get_sweep(sweep_id)
    except KeyError:
        st.info("This sweep was deleted.")
        return
    result = sweeps.calibration_results(store, sweep)
    progress = result["progress"]
    ui.stop_polling("cal.polling", sweep_id, progress["done"] == progress["runs"])
    ui.sweep_progress(progress)
    base = sweep["spec"]["base"]
    nbeta_default = network_facts(base["target"])["nbeta"]

    def flushes(run_id: str) -> dict:  # new rows only, as the estimate's view reads them
        return ui.Live(store, run_id, series="flushes").update()

    cells = result["cells"] + report.pending_cells(store, sweep, result, nbeta_default, flushes)
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
            report.calibration_rows(result["cells"]),
            hide_index=True,
            column_config={"step size": ui.STEP_COLUMN},
            key=f"cal.table.{sweep_id}",
        )


def live_vi(sweep_id: str) -> None:
    try:
        sweep = store.get_sweep(sweep_id)
    except KeyError:
        st.info("This scan was deleted.")
        return
    result = sweeps.results(store, sweep_id)
    progress = result["progress"]
    ui.stop_polling("vi.polling", sweep_id, progress["done"] == progress["runs"])
    ui.sweep_progress(progress)
    if result["eta_s"]:
        st.caption(f"about {result['eta_s']:.0f} s left at the fits' speed so far")
    st.plotly_chart(charts.objective_curves(result["cells"]), key=f"vi.curves.{sweep_id}")
    st.plotly_chart(
        charts.free_energy_figure(
            result["cells"], result["slopes"], result["log_z_bar_fit"], result["true_lc"]
        ),
        key=f"vi.slope.{sweep_id}",
    )
    target = {"name": sweep["spec"]["target"], "params": sweep["spec"]["target_params"]}
    llc_run = report.latest_llc(store, target)
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
    if result["log_z_bar_fit"]:
        st.caption(
            f"The exact −log Z̄'s own slope over these n: {result['log_z_bar_fit']['slope']:.3f} "
            "(what a perfect fit would give on this data)."
        )
    for flag in result["flags"]:
        text = f"**{ui.plain(flag['where'])}**: {ui.plain(flag['message'])}; try {flag['try']}"
        (st.error if flag["level"] == "fail" else st.warning)(text, icon=ui.WARNING)
    st.dataframe(report.vi_rows(result["cells"]), hide_index=True, key=f"vi.table.{sweep_id}")


def live_checkpoints(sweep_id: str) -> None:
    try:
        store.get_sweep(sweep_id)
    except KeyError:
        st.info("This sweep was deleted.")
        return
    result = sweeps.results(store, sweep_id)
    progress = result["progress"]
    ui.stop_polling("ckpt.polling", sweep_id, progress["done"] == progress["runs"])
    ui.sweep_progress(progress)
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
            st.error("Fix the fields marked above first; nothing was queued.", icon=ui.WARNING)
        elif run_id := ui.submit(spec):
            st.session_state["net.shown"] = run_id
    runs = {r.id: r for r in report.llc_runs(store)}
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
    backend, address = ui.backend_choice("cal")
    if st.button("Calibrate", type="primary", key="cal.run"):
        if not ready or step_grid is None or nbeta_grid is None:
            st.error("Fix the fields marked above first; nothing was queued.", icon=ui.WARNING)
        else:
            try:
                base = parse_spec({**spec, "observables": ["llc"]})  # no predictive per cell
                params, cells = sweeps.calibration_specs(base, step_grid, nbeta_grid)
                sweep_id = ui.submit_sweep("calibrate", params, cells, backend, address)
            except SpecError as exc:
                ui.spec_error(exc)
            else:
                st.session_state["cal.shown"] = sweep_id
    calibrations = {s["id"]: s for s in store.list_sweeps() if s["kind"] == "calibrate"}
    watch(
        "cal",
        "Calibration",
        {
            i: f"{i} · {s['spec']['base']['target']['name']} · "
            f"{s['spec']['base']['sampler']['name']} · {len(s['cells'])} cells"
            for i, s in calibrations.items()
        },
        "No calibrations yet.",
        live_calibration,
        lambda i: report.sweep_done(store, calibrations[i]),
        2.0,
        aside=delete_button("Delete this calibration", "cal.delete", store.delete_sweep),
    )

with vi_tab:
    st.markdown(
        "A normalizing flow on a generalized-gamma source (reference 004) fitted to the "
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
    backend, address = ui.backend_choice("vi")
    if st.button("Run the n-scan", type="primary", key="vi.run", disabled=not sized):
        if target_params is None or ns is None:
            st.error("Fix the fields marked above first; nothing was queued.", icon=ui.WARNING)
        else:
            try:
                given = {k: v for k, v in target_params.items() if k != "n"}
                options = {
                    "epochs": int(epochs),
                    "prior_mean": float(prior_mean),
                    "prior_variance": float(prior_variance),
                }
                params, cells = vi.specs(
                    target_name,
                    given,
                    tuple(int(n) for n in ns),
                    tuple(sources),
                    options,
                    seed=int(seed),
                )
                sweep_id = ui.submit_sweep("vi", params, cells, backend, address)
            except SpecError as exc:
                ui.spec_error(exc)
            else:
                st.session_state["vi.shown"] = sweep_id
    scans = {s["id"]: s for s in store.list_sweeps() if s["kind"] == "vi"}
    watch(
        "vi",
        "n-scan",
        {
            i: f"{i} · {s['spec']['target']} · n {', '.join(map(str, s['spec']['ns']))} · "
            f"{', '.join(vi.NAMES[x] for x in s['spec']['sources'])}"
            for i, s in scans.items()
        },
        "No n-scans yet.",
        live_vi,
        lambda i: report.sweep_done(store, scans[i]),
        1.0,
        aside=delete_button("Delete this scan", "vi.delete", store.delete_sweep),
    )
    with st.expander("What these numbers are"):
        st.markdown(
            """
**Ψ** = ELBO + n S_n, with n S_n = −Σ log p(y_i | x_i, w0) at the true parameter w0: the ELBO of
the flow's distribution q, shifted so that it is comparable across n. It is a lower bound on
**log Z̄(n)** = log ∫ exp(−n K_n(w)) φ(w) dw, the normalised evidence, whatever the flow
(reference 004, eq. 2); Basin computes log Z̄ exactly where it can (the H = 1 tanh network, by
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
        backend, address = ui.backend_choice("ckpt")
        if st.button("Run over training", type="primary", key="ckpt.run"):
            if not ready:
                st.error("Fix the fields marked above first; nothing was queued.", icon=ui.WARNING)
            elif not chosen:
                st.error(
                    "**checkpoints**: choose one or more; nothing was queued.", icon=ui.WARNING
                )
            else:
                try:
                    base = parse_spec({**spec, "observables": ["llc"]})
                    params, cells = sweeps.checkpoint_specs(base, models.by_step(chosen))
                    sweep_id = ui.submit_sweep("checkpoints", params, cells, backend, address)
                except (SpecError, ParamError) as exc:
                    ui.spec_error(exc)
                else:
                    st.session_state["ckpt.shown"] = sweep_id
        over_training = {s["id"]: s for s in store.list_sweeps() if s["kind"] == "checkpoints"}
        watch(
            "ckpt",
            "Sweep",
            {
                i: f"{i} · {s['spec']['base']['sampler']['name']} · "
                f"{len(s['cells'])} checkpoints · "
                f"{factory_label(s['spec']['base']['target']['params']['factory'])}"
                for i, s in over_training.items()
            },
            "No LLC-over-training sweeps yet.",
            live_checkpoints,
            lambda i: report.sweep_done(store, over_training[i]),
            2.0,
            aside=delete_button("Delete this sweep", "ckpt.delete", store.delete_sweep),
        )

with st.expander("What is shown here"):
    st.markdown(
        """
**The LLC.** λ̂(w0) = nβ (E[L_n(w)] − L_n(w0)), the expectation over the tempered posterior
localised at w0, ∝ exp(−nβ L_n(w) − (γ/2)|w − w0|²), with nβ = n / log n and γ = 1 by default
(reference 000, Def. 3.1). Each chain gives its own estimate from the losses it saw after the
burn-in; the reported value is their mean with the standard error SD / √chains. A chain that
diverged (NaN) is left out and counted.

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
