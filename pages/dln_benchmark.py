"""DLN benchmark: Hitchcock & Hoogland's local-sampling benchmark on generated deep linear networks.

K problems x samplers x step sizes, one LLC run each from the generating point (whose true LLC
is Aoyagi's formula), fanned out over the workers by ``studies.dln``; the paper's plots fill in
as runs finish: relative error and NaN fraction against the step size, mean against SD of the
relative error, and order preservation over problem pairs.
"""

from __future__ import annotations

import inspect
import time

import streamlit as st

import charts
import landscapes
import samplers
import ui
from charts import table
from studies import dln, sweeps

ui.legacy_guard()  # a fresh server's first deep link: hand the run to the shell

DEFAULTS = {k: p.default for k, p in inspect.signature(dln.specs).parameters.items()}
SAMPLERS = [name for name, spec in samplers.REGISTRY.items() if spec.kind == "sgmcmc"]
DLN = landscapes.REGISTRY["dln"]
STEP = samplers.REGISTRY["sgld"].param("step_size")
BATCH = samplers.REGISTRY["sgld"].param("batch_size")
MAX_RUNS = 2000  # a queue larger than this would outlive the session that launched it
MAX_STEP_SIZES = 12


store = ui.open_page(
    "DLN benchmark",
    "The local-sampling benchmark of Hitchcock & Hoogland (2025): LLC estimates on generated deep "
    "linear networks, whose true LLC is known, across samplers and step sizes.",
)

# ---------------------------------------------------------------------------------------------
# Launch.

c1, c2, c3 = st.columns(3)
size_param = DLN.param("size_class")
size_class = c1.selectbox(
    "size class",
    size_param.choices,
    index=size_param.choices.index(DEFAULTS["size_class"]),
    key="dln.size_class",
    help=size_param.doc,
)
# The paper draws 100 problems; 4 keeps a first sweep to minutes on a CPU.
problems = c2.number_input("problems", 1, 1000, 4, key="dln.problems")
steps = c3.number_input("steps per run", 10, 10_000_000, DEFAULTS["steps"], 100, key="dln.steps")
c1, c2 = st.columns(2)
chosen = c1.multiselect(
    "samplers", SAMPLERS, default=["sgld", "rmsprop-sgld"], key=ui.kept("dln.samplers")
)
step_text = c2.text_input(
    "step sizes ε (comma-separated, a log grid)",
    ", ".join(f"{s:g}" for s in DEFAULTS["step_sizes"]),
    key="dln.step_sizes",
)
step_sizes = ui.parse_grid(step_text, STEP, "step_sizes", MAX_STEP_SIZES, "sweep")
with st.expander("More settings"):
    c1, c2, c3, c4 = st.columns(4)
    chains = c1.number_input("chains per run", 1, 4096, DEFAULTS["chains"], key="dln.chains")
    batch_size = c2.number_input(
        "batch size", int(BATCH.low), int(BATCH.high), DEFAULTS["batch_size"], key="dln.batch"
    )
    n_param = DLN.param("n")
    n = c3.number_input(
        "n (training points)", int(n_param.low), int(n_param.high), DEFAULTS["n"], key="dln.n"
    )
    seed = c4.number_input("seed of problem 0", 0, 2**31 - 1, DEFAULTS["seed"], key="dln.seed")
    st.caption(
        f"Each run starts at the generating point, uses nβ = n / log n and localization 1, and "
        f"averages the last {1 - DEFAULTS['burn_fraction']:.0%} of its steps."
    )

runs = int(problems) * len(chosen) * len(step_sizes or ())
st.caption(f"{runs} runs of {int(steps)} steps, {int(chains)} chain(s) each.")
if not chosen:
    st.error("**samplers**: choose at least one", icon=ui.WARNING)
if runs > MAX_RUNS:
    st.error(
        f"**problems**: {runs} runs is over the limit of {MAX_RUNS}; fewer problems",
        icon=ui.WARNING,
    )


def build() -> tuple[dict, list]:
    """The sweep's (params, cells) from the fields above."""
    return dln.specs(
        size_class=size_class,
        problems=int(problems),
        samplers=tuple(chosen),
        step_sizes=step_sizes,
        steps=int(steps),
        chains=int(chains),
        batch_size=int(batch_size),
        n=int(n),
        seed=int(seed),
    )


# ---------------------------------------------------------------------------------------------
# Sweeps and results.


def draw_sweep(sweep: dict, result: dict) -> None:
    """The paper's four plots and the metrics table, as the runs finish."""
    metrics = result["metrics"]
    if not metrics:
        st.info("The plots appear as the first runs finish.")
        return
    sweep_id = sweep["id"]
    c1, c2 = st.columns(2)
    c1.plotly_chart(charts.dln_error_figure(metrics), key=f"dln.error.{sweep_id}")
    c2.plotly_chart(charts.nan_fraction_figure(metrics), key=f"dln.nan.{sweep_id}")
    c1, c2 = st.columns(2)
    c1.plotly_chart(charts.mean_vs_sd_figure(metrics), key=f"dln.meansd.{sweep_id}")
    c2.plotly_chart(charts.order_preservation_figure(metrics), key=f"dln.order.{sweep_id}")
    st.dataframe(
        table.columns(
            metrics,
            {
                "sampler": "sampler",
                "step size": "step_size",
                "problems": "problems",
                "relative error (mean)": "relative_error_mean",
                "relative error (SD)": "relative_error_sd",
                "NaN fraction (chains)": "nan_fraction",
                "runs with a NaN chain": "nan_run_fraction",
                "order preservation": "order_preservation",
            },
        ),
        hide_index=True,
        column_config={"step size": ui.STEP_COLUMN},
        key=f"dln.metrics.{sweep_id}",
    )
    with st.expander("Every run"):
        st.dataframe(
            table.columns(
                result["cells"],
                {
                    "problem": "problem",
                    "sampler": "sampler",
                    "step size": "step_size",
                    "λ̂": "llc",
                    "true λ": "true",
                    "d": "dim",
                    "relative error": "relative_error",
                    "NaN chains": "nan_chains",
                    "warnings": lambda c: ", ".join(c["warnings"]),
                    "run": "run_id",
                },
            ),
            hide_index=True,
            column_config={"step size": ui.STEP_COLUMN},
            key=f"dln.cells.{sweep_id}",
        )


def sweep_table(dln_sweeps: list[dict]) -> None:
    """Every DLN sweep, with its settings and how many of its runs are done."""
    st.subheader("Sweeps")
    if not dln_sweeps:
        return
    progress = [sweeps.progress(store, s) for s in dln_sweeps]
    st.dataframe(
        {
            "sweep": [s["id"] for s in dln_sweeps],
            "created": [
                time.strftime("%Y-%m-%d %H:%M", time.localtime(s["created"])) for s in dln_sweeps
            ],
            "class": [s["spec"]["size_class"] for s in dln_sweeps],
            "problems": [s["spec"]["problems"] for s in dln_sweeps],
            "samplers": [", ".join(s["spec"]["samplers"]) for s in dln_sweeps],
            "step sizes": [
                ", ".join(f"{v:g}" for v in s["spec"]["step_sizes"]) for s in dln_sweeps
            ],
            "steps": [s["spec"]["steps"] for s in dln_sweeps],
            "runs done": [f"{p['done']}/{p['runs']}" for p in progress],
        },
        hide_index=True,
        key="dln.sweeps",
    )


ui.SweepTab(
    kind="dln",
    prefix="dln",
    button="Launch sweep",
    button_key="dln.launch",
    picker="Watch",
    label=lambda s: s["id"],
    empty="No DLN sweeps yet: choose the settings above and launch one.",
    delete="Delete this sweep and its runs",
    draw=draw_sweep,
).show(
    build,
    None if chosen and step_sizes is not None and runs <= MAX_RUNS else ui.FIX_FIRST,
    spinner="Checking every run against the memory budget…",
    listing=sweep_table,
)

with st.expander("How to read these plots"):
    st.markdown(
        """
Each problem is a DLN drawn from the size class (depth and widths at random, some layers
reduced in rank, App. D.1), with n points X ~ U[−10, 10], Y = W0 X + N(0, 1/4). Every run starts
at the generating point W0, whose true LLC λ is Aoyagi's formula, and estimates λ̂ from the last
10% of its steps.

- **Relative error** (λ̂ − λ) / λ, mean over problems with SD bars: every sampler reaches ≈ 0 at
  some step size; the paper finds RMSProp-SGLD and Adam-SGLD accurate over a wider range.
- **NaN fraction**: chains that diverged. SGLD often diverges where its error is near 0.
- **Mean vs SD** of the relative error, only where fewer than 10% of chains diverged: the
  accuracy/variance trade-off, best near (0, 0).
- **Order preservation**: over problem pairs with λ1 < λ2, the fraction with λ̂1 < λ̂2 (needs
  two problems or more). Good ordering appears at smaller step sizes than good accuracy.
"""
    )
