"""Networks & LLC: the local learning coefficient of a network at a trained point w0, live, and
a step size x nbeta calibration grid that says which settings to trust.

Widgets -> RunSpec (observables ["llc"]) -> ui.submit; the store's "flushes" series (one row
per flush: running LLC, loss, distance |w - w0| and MALA acceptance per chain) -> charts.llc.
"""

from __future__ import annotations

import json
from typing import Literal, get_args, get_origin

import numpy as np
import streamlit as st

import charts
import landscapes
import samplers
import ui
from charts.llc import chain_stats
from charts.table import number
from jobs import sweep as sweeps
from jobs.spec import LLCOptions, SpecError, parse_spec
from jobs.store import FINAL
from landscapes import ParamError
from samplers import llc as llc_math

NETWORKS = [name for name, spec in landscapes.REGISTRY.items() if spec.kind == "network"]
SAMPLERS = [name for name, spec in samplers.REGISTRY.items() if spec.kind == "sgmcmc"]
# The registry's step size (1e-3) suits potentials; with nbeta = n / log n a network needs a
# far smaller one. Localization 1 is the RunSpec's LLC default, passed explicitly here since
# the widget always sends a value.
SAMPLER_DEFAULTS = {"step_size": 1e-5, "localization": 1.0}
# Where a network's true LLC is known, the step size at which SGLD's estimate lands near it in
# this page's default run (4 chains x 2,000 steps, seeds 0 and 1: dln 11.9/12.6 of 12 from its
# truth, rrr 8.05/7.84 of 8, polynomial 0.24/0.21 of 0.25, tanh 0.95/0.86 of 1). At 1e-5 every
# DLN chain diverges (reference 000: stable up to 1e-6) and the polynomial's and tanh's barely
# move (0.04 of 0.25, 0.36 of 1). SGHMC and SGNHT land near the truth at the same steps, except
# SGHMC on the polynomial, where 1 and 2 of the 4 chains diverged (seeds 0, 1; the page says so).
STEP_SIZES = {"dln": 1e-7, "rrr": 1e-4, "polynomial": 1e-3, "tanh": 1e-3}


def default_step_size(target_name: str, sampler: landscapes.Spec) -> float:
    """The network's step size; times ``a`` for RMSProp- and Adam-SGLD, whose step
    eps / (sqrt(v) + a) grows to eps / a where the loss gradient is small, as near w0: their
    largest step is then SGLD's. At SGLD's own step the same default run gave 13.5/13.8 of 12
    (dln), 17.4/16.7 of 8 (rrr), ~5,000 of 0.25 (polynomial) and 3.9 of 1 (tanh) for RMSProp,
    16.7/17.6, 20.8/21.4, 0.40/0.45 and 3.4/3.1 for Adam; at a x it, RMSProp 12.7/13.3,
    7.8/7.6, 0.21/0.27, 0.75/0.71 and Adam 12.9/12.0, 8.1/8.6, 0.14/0.55, 0.76/0.74: no
    estimate above d/2, no diverged chain, one loss-spike flag (RMSProp, polynomial, seed 0)."""
    step_size = STEP_SIZES.get(target_name, SAMPLER_DEFAULTS["step_size"])
    a = next((p.default for p in sampler.params if p.name == "a"), None)
    return step_size * a if a else step_size


# The DLN starts at its generating point, as the DLN benchmark's runs do: Adam's w0 on 100,000
# points stops above the minimum the chains then find: lambda-hat came out at -6 to -11.
W0_DEFAULTS = {"dln": "truth"}
MAX_STEP_SIZES, MAX_NBETAS = 8, 6


@st.cache_data(max_entries=32, show_spinner="Building the target…")
def target_facts(name: str, params_json: str) -> dict:
    """d, n, the default nbeta, whether a true w0 and the true LLC are known (numbers only: the
    target and its data are not kept), or {"error": ...} for parameters its builder refuses."""
    try:
        target = landscapes.make(name, device="cpu", **json.loads(params_json))
    except ParamError as exc:
        return {"error": str(exc), "field": exc.field}
    true = target.true_llc
    return {
        "dim": target.dim,
        "n": target.n,
        "nbeta": float(target.nbeta),
        "truth": target.w0 is not None,
        "true_llc": None if not true else float(true[0]),
        "multiplicity": None if not true else int(true[1]),
    }


def facts_of(spec: dict) -> dict:
    return target_facts(spec["target"]["name"], json.dumps(spec["target"]["params"]))


def llc_option(name: str, key: str, default=None):
    """One LLCOptions field as a widget (``default``: instead of the field's): choices from its
    Literal, numbers as text (checked by the RunSpec on Run, which names the field)."""
    info = LLCOptions.model_fields[name]
    label = name.removeprefix("train_").replace("_", " ")
    if get_origin(info.annotation) is Literal:
        choices = list(get_args(info.annotation))
        index = choices.index(default or info.default)
        return st.selectbox(label, choices, index=index, key=key, help=info.description)
    shown = "" if info.default is None else f"{info.default:g}"
    help_ = (info.description or "") + (" Empty: auto." if info.default is None else "")
    return st.text_input(label, shown, key=key, help=help_ or None).strip() or None


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
    st.caption(f"{target_spec.doc} — *{target_spec.paper}*")
    target_params = ui.param_inputs(target_spec, key="net.target")
    facts = None
    if target_params is not None:
        facts = target_facts(target_name, json.dumps(target_params))
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
    # Each network keeps its own settings (keys name it), so its defaults show when picked.
    llc_key = f"net.llc.{target_name}"
    st.markdown("**Where the chains start (w0)**")
    c1, c2 = st.columns(2)
    with c1:
        w0 = llc_option("w0", f"{llc_key}.w0", W0_DEFAULTS.get(target_name))
    with c2:
        baseline = llc_option("baseline", f"{llc_key}.baseline")
    llc_opts = {"w0": w0, "baseline": baseline}
    if w0 in ("auto", "train"):
        with st.expander("Training to w0", expanded=False):
            t1, t2 = st.columns(2)
            train_fields = [f for f in LLCOptions.model_fields if f.startswith("train_")]
            for i, field in enumerate(train_fields):
                with (t1, t2)[i % 2]:
                    llc_opts[field] = llc_option(field, f"{llc_key}.{field}")
    truth_error = w0 == "truth" and facts is not None and not facts["truth"]
    if truth_error:
        st.error(
            f"**llc.w0**: {target_name} has no known truth; use 'train' or 'init'",
            icon=ui.WARNING,
        )
with right:
    sampler_name = st.selectbox("Sampler", SAMPLERS, key=ui.kept("net.sampler_name"))
    sampler_spec = samplers.REGISTRY[sampler_name]
    st.caption(f"{sampler_spec.paper}")
    step_size = default_step_size(target_name, sampler_spec)
    defaults = SAMPLER_DEFAULTS | {"step_size": step_size}
    sampler_params = ui.param_inputs(sampler_spec, f"net.sampler.{target_name}", defaults=defaults)
    c1, c2, c3, c4 = st.columns(4)
    chains = c1.number_input("chains", 1, 4096, 4, key="net.chains")
    steps = c2.number_input("steps", 1, 10_000_000, 2000, step=100, key="net.steps")
    burn_in = c3.number_input("burn-in", 0, 10_000_000, 500, step=100, key="net.burn_in")
    seed = c4.number_input("seed", 0, 2**31 - 1, 0, key="net.seed")

ready = None not in (target_params, sampler_params, facts) and not truth_error
spec = {
    "target": {"name": target_name, "params": target_params},
    "sampler": {"name": sampler_name, "params": sampler_params},
    "chains": int(chains),
    "steps": int(steps),
    "burn_in": int(burn_in),
    "seed": int(seed),
    "observables": ["llc"],
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
    info = facts_of(record.spec)
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
        if record.status not in FINAL and step[-1] >= record.spec["burn_in"]:
            # The same health checks the summary will make, on the latest flush.
            est = llc_math.summarise(data["llc"][-1], 0)
            last = data["acceptance"][-1]
            acceptance = float(np.nanmean(last)) if np.isfinite(last).any() else None
            for w in llc_math.health(est, info["dim"], acceptance=acceptance):
                st.warning(f"**{w['code']}** (so far): {w['message']}", icon=ui.WARNING)
    elif record.status not in FINAL:
        st.caption("Waiting for the first samples…")
    if record.status in FINAL:
        ui.run_status(record)
        final_summary(record)


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
    training = est.get("training") or {}
    details = {
        "λ̂ mean": est["mean"],
        "SE": est["se"],
        "SD": est["std"],
        "chains (diverged)": f"{est['chains']} ({est['nan_chains']})",
        "draws per chain": est["draws"],
        "nβ": est["nbeta"],
        "localization γ": est["localization"],
        "w0": est["w0"],
        "baseline L_n(w0)": est["baseline_loss"],
        "baseline": est["baseline"],
        "MALA acceptance of an SGLD step": est["acceptance"],
        "gradient noise / injected noise": est["noise_ratio"],
        "WBIC": est["wbic"],
        "training steps": training.get("steps"),
    }
    if training.get("cancelled"):
        details["training steps"] = f"{training['steps']} (cancelled)"
    shown = [
        "–" if v is None else f"{v:.6g}" if isinstance(v, float) else str(v)
        for v in details.values()
    ]
    c1, c2 = st.columns(2)
    c1.dataframe(
        {"quantity": list(details), "value": shown},
        hide_index=True,
        height=35 * (len(details) + 1) + 3,  # every row (35 px each, as Streamlit draws them)
        key=f"net.details.{record.id}",
    )
    c2.dataframe(
        {"chain": list(range(est["chains"])), "λ̂": est["per_chain"]},
        hide_index=True,
        key=f"net.chains.{record.id}",
    )


def pending_cells(sweep: dict, finished: set[str], nbeta_default: float) -> list[dict]:
    """Cells still running (their live curve from the flushes series) or queued/failed."""
    out = []
    for cell in sweep["cells"]:
        if cell["run_id"] in finished:
            continue
        try:
            status = store.get(cell["run_id"]).status
        except KeyError:
            continue
        curve = {}
        data = ui.Live(store, cell["run_id"], series="flushes").update()
        if len(data.get("step", ())):
            mean = {k: chain_stats(data[k])[0].tolist() for k in ("llc", "distance", "acceptance")}
            step = data["step"].tolist()
            curve = {"step": step, "flush_step": step, **mean}
        nbeta = cell["nbeta"] if cell["nbeta"] is not None else nbeta_default
        out.append({**cell, "status": status, "nbeta_value": nbeta, "curve": curve})
    return out


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
    nbeta_default = facts_of(base)["nbeta"]
    finished = {c["run_id"] for c in result["cells"]}
    cells = result["cells"] + pending_cells(sweep, finished, nbeta_default)
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
            st.warning(f"nβ = {float(nbeta):.4g}: no stable step size in the grid; go smaller.")
        else:
            st.success(f"nβ = {float(nbeta):.4g}: largest stable step size ε = {step_size:g}")
    if result["cells"]:
        st.dataframe(
            {
                "step size": [c["step_size"] for c in result["cells"]],
                "nβ": [c["nbeta_value"] for c in result["cells"]],
                "λ̂": [c["llc"] for c in result["cells"]],
                "SE": [c["se"] for c in result["cells"]],
                "acceptance": [c["acceptance"] for c in result["cells"]],
                "flags": [", ".join(c["flags"]) or "stable" for c in result["cells"]],
            },
            hide_index=True,
            column_config={"step size": ui.STEP_COLUMN},
            key=f"cal.table.{sweep_id}",
        )


def llc_runs() -> list:
    """LLC runs that belong to no sweep, newest first."""
    swept = {c["run_id"] for s in store.list_sweeps() for c in s["cells"]}
    return [r for r in store.list() if "llc" in r.spec.get("observables", ()) and r.id not in swept]


# ---------------------------------------------------------------------------------------------
# The two views.

estimate_tab, calibrate_tab = st.tabs(["Estimate", "Calibrate"])

with estimate_tab:
    if st.button("Run", type="primary", key="net.run"):
        if not ready:
            st.error("Fix the fields marked above first; nothing was queued.", icon=ui.WARNING)
        elif run_id := ui.submit(spec):
            st.session_state["net.shown"] = run_id
    runs = llc_runs()
    ids = [r.id for r in runs]
    if st.session_state.get("net.shown") not in ids:
        st.session_state.pop("net.shown", None)
    if runs:
        labels = {
            # No status here: a selectbox keeps its first label, so it would stay "queued".
            r.id: f"{r.id} · {r.spec['target']['name']} · {r.spec['sampler']['name']} · "
            f"{r.spec['chains']} chains × {r.spec['steps']} steps"
            for r in runs
        }
        c1, c2 = st.columns([3, 1])
        shown = c1.selectbox("Run", ids, format_func=labels.get, key="net.shown")
        c2.segmented_control("Band", ["SE", "SD"], default="SE", key="net.band")
        status = store.get(shown).status
        ui.poll(live_run, "net.polling", shown, status in FINAL, 1.0, shown)
    else:
        st.info("No LLC runs yet: pick a network and a sampler above, then Run.")

with calibrate_tab:
    st.markdown(
        "The setup above over a grid of step sizes ε and nβ values, one run per cell. A cell is "
        "**stable** when no chain diverged, the loss did not spike, λ̂ lies in (0, d/2] within "
        "2 standard errors and has plateaued; the recommendation is the largest stable ε for "
        "each nβ."
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
    if st.button("Calibrate", type="primary", key="cal.run"):
        if not ready or step_grid is None or nbeta_grid is None:
            st.error("Fix the fields marked above first; nothing was queued.", icon=ui.WARNING)
        else:
            try:
                params, cells = sweeps.calibration_specs(parse_spec(spec), step_grid, nbeta_grid)
                sweep_id = sweeps.submit(store, "calibrate", params, cells)
            except SpecError as exc:
                ui.spec_error(exc)
            else:
                ui.ensure_pool()
                st.session_state["cal.shown"] = sweep_id
    calibrations = [s for s in store.list_sweeps() if s["kind"] == "calibrate"]
    ids = [s["id"] for s in calibrations]
    if st.session_state.get("cal.shown") not in ids:
        st.session_state.pop("cal.shown", None)
    if calibrations:
        labels = {
            s["id"]: f"{s['id']} · {s['spec']['base']['target']['name']} · "
            f"{s['spec']['base']['sampler']['name']} · {len(s['cells'])} cells"
            for s in calibrations
        }
        c1, c2 = st.columns([3, 1])
        shown = c1.selectbox("Calibration", ids, format_func=labels.get, key="cal.shown")
        if c2.button("Delete this calibration", key="cal.delete"):
            store.delete_sweep(shown)
            st.rerun()
        sweep = store.get_sweep(shown)
        progress = sweeps.progress(store, sweep)
        done = progress["done"] == progress["runs"]
        ui.poll(live_calibration, "cal.polling", shown, done, 2.0, shown)
    else:
        st.info("No calibrations yet.")

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
loss spikes mean the step size is too large; a low MALA acceptance of an SGLD step means the
discretisation biases the chains; minibatch gradient noise comparable to the injected noise
heats the posterior. The calibration grid shows all of these across step sizes at once.
"""
    )
