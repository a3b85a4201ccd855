"""Wide networks: the repriorisation of Hron et al. (2022). At each chosen width an ntk-fcn network
is sampled twice by reprior-lmc from the same start, in its original parameters theta and in the
repriorised phi (theta = T(phi)), fanned out over the workers by ``studies.reprior``; the per-step
ESS against width (Fig. 7 left), the acceptance and the adapted steps fill in as the runs go. Below:
posterior slices through a finished run's draw in theta and in phi (Fig. 5,
``studies.wide.slices``), the KL of the posterior from the prior against width (Thm 2.1;
docs/methods/wide-networks.md, ``studies.wide.kl_table``), and when the map applies.
"""

from __future__ import annotations

import dataclasses
import inspect
import time

import streamlit as st

import charts
import landscapes
import samplers
import ui
from charts import table
from charts.wide import LABELS
from landscapes import Param, ParamError
from runs import verdict
from runs.spec import ESS_PROJECTIONS, SpecError, parse_spec
from runs.worker import torch_threads
from studies import reprior, wide

ui.legacy_guard()  # a fresh server's first deep link: hand the run to the shell

DEFAULTS = {k: p.default for k, p in inspect.signature(reprior.specs).parameters.items()}
NTK = landscapes.REGISTRY["ntk-fcn"]
LMC = samplers.REGISTRY["reprior-lmc"]
WIDTHS = [4, 8, 16, 32, 64, 128, 256, 512]
GRIDS = [11, 21, 31, 41, 61, 81]
KL_DRAWS = [250, 500, 1000, 2000]
KL_BUDGET_S = 20.0  # the KL is computed in the app's process while the page waits
QUANTITY = {"f": "f(X_test)", "theta": "θ"}

# Fields: a bad value is named under its field (``ui.number_field``) and never reaches Run.
# depth 0 is Bayesian linear regression: no hidden layer, so no width to vary
DEPTH = dataclasses.replace(NTK.param("depth"), low=1, default=DEFAULTS["depth"])
N = dataclasses.replace(NTK.param("n"), default=DEFAULTS["n"])
CHAINS = Param("chains", "int", DEFAULTS["chains"], "Chains per run", 1, 256)
STEPS = Param("steps", "int", DEFAULTS["steps"], "Steps per run, warm-up included", 10, 2_000_000)
WARMUP = dataclasses.replace(LMC.param("warmup"), default=DEFAULTS["warmup"])
SEED = Param(
    "seed",
    "int",
    DEFAULTS["seed"],
    "Seed of the chains at the first width (the i-th: seed + i); both parametrisations at a "
    "width share it, so they start from the same phi_0",
    0,
    2**31 - 1,
)
HALF_WIDTH = Param("half_width", "float", 1.0, "Half the side of the sliced square", 1e-3, 100.0)


store = ui.open_page(
    "Wide networks",
    "Repriorisation (Hron et al. 2022): sample a wide Bayesian network in "
    "coordinates whose posterior is nearly its prior, and watch the ESS grow with the width.",
)

# ---------------------------------------------------------------------------------------------
# Controls and Run.

c1, c2, c3, c4 = st.columns([2, 1, 1, 1])
with c1:
    widths = st.multiselect(
        "widths", WIDTHS, default=list(DEFAULTS["widths"]), key=ui.kept("wide.widths")
    )
    widths = sorted(widths)
with c2:
    depth = ui.number_field(DEPTH, ui.kept("wide.depth"), owner="ntk-fcn")
with c3:
    n = ui.number_field(N, ui.kept("wide.n"), owner="ntk-fcn", label="n (training points)")
with c4:
    data_param = NTK.param("data")
    data = st.selectbox(
        "data",
        data_param.choices,
        index=data_param.choices.index(DEFAULTS["data"]),
        key=ui.kept("wide.data"),
        help=f"{data_param.doc}. {NTK.doc.split('Data: ')[-1]}",
    )
c1, c2, c3, c4 = st.columns(4)
with c1:
    chains = ui.number_field(CHAINS, ui.kept("wide.chains"))
with c2:
    steps = ui.number_field(STEPS, ui.kept("wide.steps"))
with c3:
    warmup = ui.number_field(WARMUP, ui.kept("wide.warmup"), owner="reprior-lmc", label="warm-up")
with c4:
    seed = ui.number_field(SEED, ui.kept("wide.seed"))
c1, c2, c3, c4 = st.columns(4)
with c1:
    step_size = ui.number_field(
        LMC.param("step_size"), ui.kept("wide.step_size"), owner="reprior-lmc", label="initial step"
    )
with c2:
    refresh = ui.number_field(
        LMC.param("refresh"), ui.kept("wide.refresh"), owner="reprior-lmc", label="refresh β"
    )
with c3:
    target_accept = ui.number_field(
        LMC.param("target_accept"),
        ui.kept("wide.target_accept"),
        owner="reprior-lmc",
        label="target acceptance",
    )
with c4:
    st.write("")  # level with the fields' labels
    skip_mh = st.checkbox(
        "skip MH",
        value=not DEFAULTS["mh"],
        key=ui.kept("wide.skip_mh"),
        help="Accept every finite proposal, as the paper ran: the chain then carries the "
        "integrator's bias, which the paper keeps small by holding the mean acceptance "
        f"probability above {verdict.SKIP_MH_ACCEPTANCE}.",
    )

fields = (depth, n, chains, steps, warmup, seed, step_size, refresh, target_accept)
if widths and None not in (steps, warmup, chains):
    st.caption(
        f"{2 * len(widths)} runs (widths {', '.join(map(str, widths))} × standard and "
        f"repriorised) of {steps:,} steps × {chains} chains in float64, each pair from the same "
        f"start; the first {warmup:,} steps adapt each chain's step toward the target acceptance "
        "and are left out as burn-in. Every step is kept (thinning 1)."
    )
if skip_mh and target_accept is not None and target_accept < verdict.SKIP_MH_ACCEPTANCE:
    st.warning(
        f"With MH skipped the paper keeps the mean acceptance probability above "
        f"{verdict.SKIP_MH_ACCEPTANCE}; a target acceptance of {target_accept:g} adapts the "
        "step below that, and the result will be flagged. Raise the target acceptance, or "
        "keep MH on.",
        icon=ui.WARNING,
    )
if not widths:
    st.error("**widths**: choose at least one", icon=ui.WARNING)


def build() -> tuple[dict, list]:
    """The study's (params, cells) from the fields above."""
    return reprior.specs(
        widths=tuple(widths),
        depth=depth,
        n=n,
        data=data,
        chains=chains,
        steps=steps,
        warmup=warmup,
        step_size=step_size,
        refresh=refresh,
        mh=not skip_mh,
        target_accept=target_accept,
        seed=seed,
    )


# ---------------------------------------------------------------------------------------------
# The study, live.


def final_widths(cells: list[dict]) -> set[int]:
    """The widths whose two runs have both completed: their ratios are final."""
    done = [c["width"] for c in cells if c["status"] == "completed"]
    return {w for w in done if done.count(w) == 2}


def ess(of: str, stat: str):
    """A cell's per-step ESS ``stat`` (mean, min, max) of ``of`` (f, theta), None before any."""
    return lambda c: ((c["ess"] or {}).get(of) or {}).get(stat)


def speed_up(ratio: dict) -> float | None:
    """The ratio of f's ESS a second: the ESS ratio over the time ratio."""
    return ratio["f"] / ratio["cost"] if ratio["f"] is not None and ratio["cost"] else None


def draw_study(sweep: dict, result: dict) -> None:
    """ESS, acceptance and adapted step against width, the ratios and the flags, so far."""
    sweep_id = sweep["id"]
    mh = sweep["spec"]["mh"]
    cells = result["cells"]
    if not any(c["ess"] for c in cells):
        st.info(
            "The ESS points appear once a run has recorded a few steps past its warm-up "
            "(hollow while it runs, filled when it has finished)."
        )
        return
    c1, c2 = st.columns(2)
    c1.plotly_chart(charts.ess_figure(cells, "f"), key=f"wide.ess_f.{sweep_id}")
    c2.plotly_chart(charts.ess_figure(cells, "theta"), key=f"wide.ess_theta.{sweep_id}")
    st.plotly_chart(
        charts.acceptance_figure(cells, mh, result["band"], result["skip_mh_floor"]),
        key=f"wide.accept.{sweep_id}",
    )
    final = final_widths(cells)
    ratios = result["ratios"]
    st.dataframe(
        table.columns(
            ratios,
            {
                "width": "width",
                "ESS ratio f(X_test)": "f",
                "ESS ratio θ": "theta",
                "time a step ratio": "cost",
                "f ESS a second ratio": speed_up,
                "numbers": lambda r: "final" if r["width"] in final else "so far",
            },
        ),
        hide_index=True,
        key=f"wide.ratios.{sweep_id}",
    )
    st.caption(
        f"Per-step ESS: ESS / draws after the warm-up, of {ESS_PROJECTIONS} random projections "
        "of θ and of "
        "f(X_test) (the paper's Fig. 7 left); points are the mean over projections, bars span "
        "the smallest to the largest. "
        "Ratios: repriorised / standard, of the mean per-step ESS over the projections; the "
        "time ratio is a step's wall-clock cost (the map's Cholesky factorisation: the paper "
        "reports at most 1.5× on accelerators); the last column is the speed-up per second."
    )
    for flag in result["flags"]:  # studies.reprior.flags: the CLI prints the same
        text = f"**{flag['where']}**: {flag['message']}. *Try:* {flag['try']}."
        (st.error if flag["level"] == "fail" else st.warning)(text, icon=ui.WARNING)
    finished = [c for c in cells if c["status"] == "completed"]
    if finished and not result["flags"]:
        lo, hi = result["band"]
        band = f"in [{lo}, {hi}]" if mh else f"at least {result['skip_mh_floor']}"
        st.success(
            f"Every finished run's acceptance is {band}, and every finished width's "
            "repriorised ESS is above the standard one's.",
            icon=ui.DONE,
        )
    with st.expander("Every run"):
        st.dataframe(
            table.columns(
                cells,
                {
                    "width": "width",
                    "parametrisation": lambda c: LABELS[c["parametrisation"]],
                    "status": "status",
                    "steps done": "steps_done",
                    "ESS/step f (mean)": ess("f", "mean"),
                    "f min": ess("f", "min"),
                    "f max": ess("f", "max"),
                    "ESS/step θ (mean)": ess("theta", "mean"),
                    "θ min": ess("theta", "min"),
                    "θ max": ess("theta", "max"),
                    "acceptance": "acceptance",
                    "adapted step": "step",
                    "run": "run_id",
                },
            ),
            hide_index=True,
            column_config={"adapted step": ui.STEP_COLUMN},
            key=f"wide.cells.{sweep_id}",
        )


def study_label(s: dict) -> str:
    return (
        f"{time.strftime('%H:%M', time.localtime(s['created']))} · widths "
        f"{', '.join(map(str, s['spec']['widths']))} · depth {s['spec']['depth']} · n "
        f"{s['spec']['n']} {s['spec']['data']} · {s['spec']['steps']} steps"
        f"{'' if s['spec']['mh'] else ' · MH skipped'}"
    )


shown = ui.SweepTab(
    kind="reprior",
    prefix="wide",
    button="Run the study",
    button_key="wide.run",
    picker="Study",
    label=study_label,
    empty="No study yet: choose the widths above and run one.",
    delete="Delete this study and its runs",
    draw=draw_study,
    noun="study",
).show(
    build,
    None if widths and None not in fields else ui.FIX_FIRST,
    listing=lambda studies: st.subheader("ESS against width"),
)

# ---------------------------------------------------------------------------------------------
# Posterior slices (Fig. 5).


@st.cache_data(max_entries=16, show_spinner=False)
def cached_slices(_store, home: str, run_id: str, grid: int, half_width: float) -> dict:
    return wide.slices(_store, run_id, grid=grid, half_width=half_width)


st.subheader("Posterior slices")
st.caption(
    "−log p (up to its evidence) on a random plane through a finished run's last draw θ*, in "
    "the original coordinates θ = θ* + a u + b v and in the repriorised ones φ = φ* + a u + "
    "b v (φ* = T⁻¹(θ*)), each minus its value at the centre. **θ**: a valley whose walls the "
    "data set: steep (read the colour bars and the line below), stretched where the data pins "
    "the weights down least. **φ**: close to the prior's round bowl ½|φ|², curvature 1 in "
    "every direction, and more so as the width grows: the smoother geometry a chain in φ "
    "mixes in. Colours run from a slice's lowest value to its 95th percentile (higher values "
    "share the top colour): each panel its own bar, to compare shapes, or one bar for both, "
    "to compare heights."
)
sweep = None
if shown is not None:
    try:
        sweep = store.get_sweep(shown)
    except KeyError:
        sweep = None
finished = []
for cell in (sweep or {}).get("cells", []):
    try:
        if store.get(cell["run_id"]).status == "completed":
            finished.append(cell)
    except KeyError:
        continue
if sweep is None:
    st.info("Run a study first: the slices go through its finished runs' draws.")
elif not finished:
    st.info(
        "The slices need a finished run: its draw appears here once the study has finished, "
        "or at your next change on this page after its first run has."
    )
else:
    finished.sort(key=lambda c: (-c["width"], c["parametrisation"] != "reprior"))  # widest 1st
    choices = {
        c["run_id"]: f"width {c['width']} · {LABELS[c['parametrisation']]}" for c in finished
    }
    if st.session_state.get("wide.slice.run") not in choices:
        st.session_state.pop("wide.slice.run", None)
    c1, c2, c3, c4 = st.columns(4)
    run_id = c1.selectbox("run", list(choices), format_func=choices.get, key="wide.slice.run")
    with c2:
        half_width = ui.number_field(HALF_WIDTH, ui.kept("wide.slice.half"), label="half-width")
    with c3:
        grid = st.select_slider(
            "grid points a side", GRIDS, value=41, key=ui.kept("wide.slice.grid")
        )
    with c4:
        colours = st.radio(
            "colour bars",
            ["each its own", "one for both"],
            horizontal=True,
            key=ui.kept("wide.slice.colours"),
        )
    if half_width is not None:
        try:
            with st.spinner("Slicing the posterior…"):
                s = cached_slices(store, str(store.home), run_id, int(grid), float(half_width))
        except SpecError as exc:
            ui.spec_error(exc)
        else:
            shared = colours == "one for both"
            st.plotly_chart(charts.slice_figure(s, shared), key="wide.slice.planes")
            st.plotly_chart(charts.slice_line_figure(s), key="wide.slice.lines")

# ---------------------------------------------------------------------------------------------
# KL from prior draws (the check of docs/methods/wide-networks.md).


@st.cache_data(max_entries=32, show_spinner=False)
def cached_kl(widths: tuple, depth: int, n: int, data: str, draws: int) -> list[dict]:
    # small factorisations: one thread is ~10x faster (docs/methods/wide-networks.md)
    with torch_threads(1):
        return wide.kl_table(widths, depth=depth, n=n, draws=draws, data=data)


st.subheader("KL from prior draws")
st.caption(
    "How far is the posterior from the prior N(0, I)? From prior draws of the hidden layers: "
    "in φ, KL(q ‖ p_φ) = log E_q[Z] − E_q[log Z], Z the marginal likelihood of a GP with the "
    "draw's empirical NNGP kernel; it falls toward 0 as the width grows (Thm 2.1). In θ the "
    "readout's own posterior adds a term that does not vanish (Prop. 2.3). Widths and data "
    "from the controls above."
)
draws = st.select_slider("prior draws", KL_DRAWS, value=1000, key=ui.kept("wide.kl.draws"))
plan, left_out, total, ready = [], [], 0.0, False
if not widths:
    st.error("**widths**: choose at least one above", icon=ui.WARNING)
elif depth is None or n is None:
    st.error("Fix the depth and n above first.", icon=ui.WARNING)
else:
    try:
        for width in widths:
            seconds = wide.kl_seconds(width, depth, n, draws, data)
            if total + seconds <= KL_BUDGET_S:
                plan.append(width)
                total += seconds
            else:
                left_out.append((width, seconds))
        ready = True
    except ParamError as exc:  # n over the digits' training set, say: named as Run names it
        ui.spec_error(exc)
if ready and not plan:
    st.error(
        f"**depth / n**: even width {widths[0]} would take ~{left_out[0][1]:.0f} s here, over "
        f"the {KL_BUDGET_S:.0f} s this page waits; use fewer prior draws, a smaller n or depth, "
        "or compute it outside the app with studies.wide.kl_table.",
        icon=ui.WARNING,
    )
elif ready:
    took = "under a second" if total < 1 else f"~{total:.0f} s"
    text = f"Estimate: {took} for widths {', '.join(map(str, plan))}."
    if left_out:
        text += (
            f" Left out: {', '.join(f'{w} (~{s:.0f} s)' for w, s in left_out)}, which would "
            f"take the page past {KL_BUDGET_S:.0f} s; fewer prior draws, a smaller n or depth "
            "bring them in."
        )
    st.caption(text)
if st.button("Compute the KL", key="wide.kl.run", disabled=not plan):
    st.session_state["wide.kl.request"] = (tuple(plan), depth, n, data, draws)
request = st.session_state.get("wide.kl.request")
if request:
    try:
        with st.spinner("Drawing from the prior…"):
            rows = cached_kl(*request)
    except (ParamError, SpecError) as exc:
        ui.spec_error(exc)
    else:
        st.plotly_chart(charts.kl_figure(rows), key="wide.kl.figure")
        st.dataframe(
            table.columns(
                rows,
                {
                    "width": "width",
                    "KL(q ‖ p_φ) repriorised": "reprior",
                    "KL(q ‖ p_θ) standard": "standard",
                    "sd of log Z": "log_z_std",
                    "prior draws": "draws",
                },
            ),
            hide_index=True,
            key="wide.kl.table",
        )
        st.caption(
            f"Depth {request[1]}, n = {request[2]} {request[3]}, seed 0. An independent "
            "check (docs/methods/wide-networks.md) found 289, 52, 22, 7.7, 1.9 in φ over widths 8 "
            "… 2048 (n = 32, depth 1, its own synthetic data) and a plateau near 3000 in θ at "
            "every width."
        )

# ---------------------------------------------------------------------------------------------
# When it applies.


@st.cache_data(show_spinner=False)
def refusals() -> list[tuple[str, str, str]]:
    """What the RunSpec says to repriorised runs elsewhere: (what, field, message)."""
    target = {"name": "ntk-fcn", "params": {"width": 8, "n": 16, "parametrisation": "reprior"}}
    asks = {
        "an LLC run (SGLD, localised at w0)": {
            "sampler": {"name": "sgld", "params": {}},
            "observables": ["llc"],
        },
        "a minibatch of 4 of 16 points": {
            "sampler": {"name": "sgld", "params": {"batch_size": 4}},
        },
        "a pull toward the start (localization 1)": {
            "sampler": {"name": "reprior-lmc", "params": {"localization": 1.0}},
        },
        "the thermo observable": {
            "sampler": {"name": "reprior-lmc", "params": {}},
            "observables": ["thermo"],
        },
    }
    out = []
    for what, ask in asks.items():
        try:
            parse_spec({"target": target, "steps": 100, **ask})
        except SpecError as exc:
            out.append((what, exc.field, getattr(exc, "message", None) or str(exc)))
    return out


st.subheader("When repriorisation applies")
st.markdown(
    """
Repriorisation changes the coordinates a sampler moves in, not the posterior. Given the hidden
layers θ_≤L, a network with a **linear readout**, a **Gaussian N(0, 1) prior** and a **Gaussian
likelihood** is Bayesian linear regression on the top-layer features Ψ, whose readout posterior
is exactly N(μ, Σ) with Σ = (I + σ⁻²ΨᵀΨ)⁻¹ and μ = σ⁻²ΣΨᵀy. So the sampler moves φ and sets
θ_o = μ(θ_≤L) + Σ(θ_≤L)^½ φ_o (the hidden layers unchanged): φ_o's conditional is then exactly
N(0, I), and as the width grows the features' kernel concentrates, the whole φ-posterior
approaches the prior (its KL above falls toward 0), and a chain in φ mixes like one on the prior:
a larger stable step and a per-step ESS near 1. It holds for the **full batch** at
**temperature 1** (nβ = n / 2σ²) and nothing else, so Basin refuses it elsewhere, naming the
field: LLC runs (tempered, and localised at w0: the pull would act in φ, not θ), minibatches
(the map reads every training point at every step), and the thermo observable (its virial
would be taken in φ). Runs record θ = T(φ), never φ: the Runs page, the Landscape page and
every export show the original parameters, comparable across the two parametrisations.
"""
)
with st.expander("What Basin says when asked elsewhere"):
    for what, field, message in refusals():
        st.markdown(f"- {what}: **{field}**: {ui.plain(message)}")
