"""Integrators: TATi's order study for class (Heber et al. 2020, Figs. 2-4). Pick a potential, the
Langevin integrators and step sizes; each (integrator, step) is one run of many chains whose
<virial> or <K> is compared with its exact value (d T, d T / 2), fanned out over the workers by
``studies.order``; the log-log error lines and their fitted slopes appear as runs finish.
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
from studies import order
from studies.diagnostics import POTENTIALS

ui.legacy_guard()  # a fresh server's first deep link: hand the run to the shell

DEFAULTS = {k: p.default for k, p in inspect.signature(order.specs).parameters.items()}
TWO_CLUSTERS = "two clusters (SLP, TATi §3.1.2)"
TARGETS = ["harmonic", TWO_CLUSTERS, *[p for p in POTENTIALS if p != "harmonic"]]
STEP = samplers.REGISTRY["baoab"].param("step_size")
MAX_STEP_SIZES = 10
MAX_CELLS = 40  # a class waits for these: minutes on a 2-core machine at the defaults


store = ui.open_page(
    "Integrators",
    "How fast does each Langevin integrator's bias vanish as the step shrinks? TATi's order "
    "study (Heber et al. 2020, Figs. 2–4): the error of ⟨w·∇U⟩ or ⟨K⟩ against the step size h.",
)

c1, c2 = st.columns(2)
with c1:
    choice = st.selectbox("Potential", TARGETS, key=ui.kept("ord.target"))
    if choice == TWO_CLUSTERS:
        target, target_params = "slp", {"dataset": "two-clusters"}
        st.caption(
            "500 points from two Gaussian clusters, a linear unit and squared error: 3 "
            "parameters, a quadratic loss whose curvatures span 38 to 7981 (stable below "
            "h ≈ 2⁻⁵·⁵). Try h = 2⁻⁶ … 2⁻⁹ and friction 10, as the paper."
        )
    else:
        target = choice
        spec = landscapes.REGISTRY[target]
        st.caption(f"{spec.doc} — *{spec.paper}*")
        defaults = order.HARMONIC_DEFAULT if target == "harmonic" else None
        target_params = ui.param_inputs(
            spec, key="ord.target", skip=("gradient_noise",), defaults=defaults
        )
with c2:
    chosen = st.multiselect(
        "Integrators",
        list(order.ORDER_SAMPLERS),
        default=list(DEFAULTS["samplers"]),
        key=ui.kept("ord.samplers"),
    )
    observable = st.radio(
        "Observable",
        order.ORDER_OBSERVABLES,
        format_func={"virial": "⟨w·∇U⟩ (virial)", "kinetic": "⟨K⟩ (kinetic energy)"}.get,
        horizontal=True,
        key=ui.kept("ord.observable"),
    )
    step_text = st.text_input(
        "step sizes h (comma-separated)",
        ", ".join(f"{s:g}" for s in DEFAULTS["step_sizes"]),
        key=ui.kept("ord.step_sizes"),
    )
    step_sizes = ui.parse_grid(step_text, STEP, "step_sizes", MAX_STEP_SIZES, "order")

with st.expander("More settings", expanded=False):
    c1, c2, c3, c4 = st.columns(4)
    beta = c1.number_input("β (inverse temperature)", 1e-3, 1e6, DEFAULTS["beta"], key="ord.beta")
    friction = c2.number_input("friction γ", 1e-3, 1e6, DEFAULTS["friction"], key="ord.friction")
    chains = c3.number_input(
        "chains per run", 16, 65_536, DEFAULTS["chains"], 256, key="ord.chains"
    )
    steps = c4.number_input("steps per run", 100, 10_000_000, 5000, 500, key="ord.steps")
    st.caption(
        "Each run averages every step after the first 10%, over its chains (the paper's seeds): "
        "the error bars are the SE over chains. TATi's units: exp(−βL), p ~ N(0, 1/β); SGLD at "
        "TATi's w − h∇L + √(2h/β) ξ."
    )

cells = len(chosen) * len(step_sizes or ())
st.caption(f"{cells} runs of {int(steps)} steps × {int(chains)} chains.")
problems = []
if not chosen:
    problems.append("**integrators**: choose at least one")
if observable == "kinetic" and "sgld" in chosen:
    problems.append("**integrators**: SGLD has no momentum, so no ⟨K⟩: drop it or pick the virial")
if cells > MAX_CELLS:
    problems.append(f"**step sizes**: {cells} runs is over {MAX_CELLS}; fewer steps or integrators")
for problem in problems:
    st.error(problem, icon=ui.WARNING)


def build() -> tuple[dict, list]:
    """The study's (params, cells) from the fields above."""
    return order.specs(
        target=target,
        target_params=target_params,
        samplers=tuple(chosen),
        step_sizes=tuple(sorted(step_sizes, reverse=True)),
        observable=observable,
        beta=float(beta),
        friction=float(friction),
        chains=int(chains),
        steps=int(steps),
    )


# ---------------------------------------------------------------------------------------------
# The study, live.


def draw_study(sweep: dict, result: dict) -> None:
    """The log-log error lines with their fitted slopes, as the runs finish."""
    sweep_id = sweep["id"]
    if not result["cells"]:
        st.info("The error lines appear as the first runs finish.")
        return
    observable = sweep["spec"]["observable"]
    st.plotly_chart(
        charts.order_figure(result["cells"], result["fits"], observable),
        key=f"ord.figure.{sweep_id}",
    )
    st.dataframe(
        table.columns(
            result["fits"],
            {
                "integrator": "sampler",
                "fitted slope": "slope",
                "± SE": "slope_se",
                "expected order": "expected",
                "points fitted": "points",
                "runs done": "cells",
            },
        ),
        hide_index=True,
        key=f"ord.fits.{sweep_id}",
    )
    diverged = [c for c in result["cells"] if c["diverged_chains"]]
    if diverged:
        where = ", ".join(f"{c['sampler']} at h = {c['step_size']:g}" for c in diverged)
        st.warning(
            f"Chains diverged ({where}): the step is past the integrator's stability limit; "
            "their averages leave those chains out.",
            icon=ui.WARNING,
        )
    with st.expander("Every run"):
        st.dataframe(
            table.columns(
                result["cells"],
                {
                    "integrator": "sampler",
                    "h": "step_size",
                    "mean": "mean",
                    "exact": "exact",
                    "relative error": "error",
                    "± SE": "error_se",
                    "diverged chains": "diverged_chains",
                    "run": "run_id",
                },
            ),
            hide_index=True,
            key=f"ord.cells.{sweep_id}",
        )


def study_label(s: dict) -> str:
    return (
        f"{time.strftime('%H:%M', time.localtime(s['created']))} · {s['spec']['target']} · "
        f"{', '.join(s['spec']['samplers'])} · {s['spec']['observable']}"
    )


ui.SweepTab(
    kind="order",
    prefix="ord",
    button="Run the study",
    button_key="ord.launch",
    picker="Study",
    label=study_label,
    empty="No study yet: choose the settings above and run one.",
    delete="Delete this study and its runs",
    draw=draw_study,
    noun="study",
).show(
    build,
    None if not problems and step_sizes is not None and target_params is not None else ui.FIX_FIRST,
)

with st.expander("How to read this plot"):
    st.markdown(
        """
A discretised Langevin sampler does not sample exp(−U/T) exactly: its long-run averages carry
a bias that shrinks like hᵖ, p the integrator's **order**. On log-log axes that is a line of
slope p. Each point is one run (many chains; bars: ± SE over chains); hollow points are within
2 SE of zero, noise rather than bias, and are left out of the fit, which weighs each point by
its precision.

- **GLA1** (B A O, the Geometric Langevin Algorithm): first order.
- **GLA2** (B O B A, velocity Verlet around the O step): second order.
- **BAOAB**: second order in ⟨K⟩ (⟨p²⟩β = 1 − h²ω²/4 on a harmonic mode), and *exact* in the
  configuration on a quadratic U, so its ⟨w·∇U⟩ error is at the noise floor there.
- **SGLD**: first order in its own step; its step corresponds to h²/2 of the momentum samplers
  (TATi: "SGLD appears second order" when plotted against √ε).

The exact values come from the virial theorem, ⟨w·∇U⟩ = d T for a confining U, and
equipartition, ⟨K⟩ = d T / 2. The slope is asymptotic: at large h the curve bends (GLA1 on the
two clusters changes sign near h = 2⁻⁷·⁵), so read it where the points line up.
"""
    )
