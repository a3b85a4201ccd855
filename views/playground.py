"""Playground: one sampler on a 2-D potential, watched live against the exact answer.

Widgets (from the registries) -> RunSpec -> ui.submit; the run's records -> charts.runs: the
density with each chain's recent path and the cloud of draws, traces, marginal histograms with
the exact marginal, tail probabilities, KS, ESS and R-hat; a step-by-step replay for class.
The target is built here only to draw its closed-form density and marginals, never sampled.
"""

from __future__ import annotations

import json
import math

import numpy as np
import scipy.integrate
import streamlit as st
import torch

import charts
import landscapes
import samplers
import ui
from charts.table import number
from jobs.store import FINAL
from landscapes import ParamError
from samplers import diagnostics
from samplers.explain import POSTERIOR, explain
from ui.truths import (
    DEFAULTS,
    EXACT_DRAWS,
    POTENTIALS,
    even_sample,
    exact_draws,
    ks_bound,
    labels_of,
    run_length,
    tail_ess,
    target_of,
    targets_exact,
)

SAMPLERS = list(samplers.REGISTRY)
GRID = 161  # grid points per axis of the density contours
CURVE_POINTS = 401  # odd: the grid of a symmetric range holds its midpoint
BINS = 60
MAX_CLOUD = 2000  # draws shown as markers (SVG: each costs the browser ~40 us to draw)
MAX_TRACE = 1000  # points per chain in a trace (more than a chart of this width shows)
NAMES = ["step", "position", "loss", "accepted", "diverged"]


def fixed_params(name: str) -> dict:
    """Parameters the playground pins: its potentials are drawn in the plane."""
    return {"dim": 2} if any(p.name == "dim" for p in landscapes.REGISTRY[name].params) else {}


@st.cache_data(max_entries=32, show_spinner=False)
def density_grid(name: str, params_json: str, nbeta: float, temperature: float) -> dict:
    """-U = -(nbeta L + prior) / T on a GRID x GRID grid over the target's bounds."""
    target = target_of(name, params_json)
    (x0, x1), (y0, y1) = target.bounds
    xs, ys = np.linspace(x0, x1, GRID), np.linspace(y0, y1, GRID)
    yy, xx = np.meshgrid(ys, xs, indexing="ij")
    w = torch.from_numpy(np.stack([xx.ravel(), yy.ravel()], -1))
    with torch.no_grad():
        # A custom formula may be constant in w: broadcast to one value per grid point.
        energy = torch.broadcast_to(nbeta * target.loss(w) + target.prior_energy(w), (len(w),))
    return {"xs": xs, "ys": ys, "log_density": (-energy / temperature).reshape(GRID, GRID).numpy()}


def exact_tail(target: landscapes.Target, exact: np.ndarray | None, i: int, t: float):
    """P(w_i < t) by quadrature of the closed-form marginal, else from exact draws."""
    if i in target.marginals:

        def pdf(x: float) -> float:
            return math.exp(float(target.marginals[i](torch.tensor([x], dtype=torch.float64))))

        return scipy.integrate.quad(pdf, -np.inf, t)[0]
    return None if exact is None else float(np.mean(exact[:, i] < t))


def exact_moments(target: landscapes.Target, exact: np.ndarray | None, i: int) -> tuple:
    """Mean and sd of coordinate i: the target's closed forms, else from exact draws."""
    if target.mean is not None and target.cov is not None:
        return float(target.mean[i]), math.sqrt(float(target.cov[i, i]))
    if exact is not None:
        return float(exact[:, i].mean()), float(exact[:, i].std(ddof=1))
    return None, None


def is_playground_run(spec: dict) -> bool:
    target = spec["target"]
    return (
        target["name"] in POTENTIALS
        and not spec.get("observables")
        and target["params"].get("dim", 2) == 2
        and len(target["params"].get("k", (0, 0))) == 2
    )


# ---------------------------------------------------------------------------------------------
# Controls.

st.title("Playground")
st.caption(
    "Sample a 2-D potential with any sampler, in a background worker, and watch the chains "
    "against the exact answer."
)
ui.ensure_pool()
store = ui.store()

left, right = st.columns(2)
with left:
    target_name = st.selectbox("Potential", POTENTIALS, key=ui.kept("pg.target_name"))
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
with right:
    sampler_name = st.selectbox("Sampler", SAMPLERS, key=ui.kept("pg.sampler_name"))
    sampler_spec = samplers.REGISTRY[sampler_name]
    sampler_params = ui.param_inputs(sampler_spec, key="pg.sampler", defaults=DEFAULTS)
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
            labels=labels_of(target),
            title=f"{target_name}: the density sampled (log scale)",
            height=300,
        ),
        key="pg.preview",
    )

length = run_length("pg")

if st.button("Run", type="primary", key="pg.run"):
    if target is None or sampler_params is None:
        st.error("Fix the fields marked above first; nothing was queued.", icon=ui.WARNING)
    else:
        spec = {
            "target": {"name": target_name, "params": target_params},
            "sampler": {"name": sampler_name, "params": sampler_params},
            **length,
        }
        if run_id := ui.submit(spec):
            st.session_state["pg.shown"] = run_id
            ui.await_first_records([run_id])


# ---------------------------------------------------------------------------------------------
# Live views of the shown run.


def context(record) -> dict | None:
    """What every view of a run needs: its target, truths and records so far."""
    spec = record.spec
    params_json = json.dumps(spec["target"]["params"], sort_keys=True)
    target = target_of(spec["target"]["name"], params_json)
    if isinstance(target, ParamError):
        ui.spec_error(target)
        return None
    sp = spec["sampler"]["params"]
    nbeta = sp.get("nbeta") or target.nbeta
    grid = density_grid(target.name, params_json, float(nbeta), float(sp.get("temperature", 1.0)))
    data = ui.Live(store, record.id, names=NAMES).update()
    exact = exact_draws(target.name, params_json) if targets_exact(sp) else None
    return {
        "target": target,
        "labels": labels_of(target),
        "grid": grid,
        "data": data,
        "exact": exact,
        "truths": targets_exact(sp),
        "mh": "accepted" in data,
        "burn": math.ceil(spec["burn_in"] / spec["thin"]),
    }


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
        name = f"exact ({EXACT_DRAWS:,} exact draws)"
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


def diagnostics_rows(ctx: dict, record, draws: np.ndarray, tails: list[float]) -> list[dict]:
    target, exact, labels = ctx["target"], ctx["exact"], ctx["labels"]
    coords = ((record.summary or {}).get("coordinates") or {}) if record.status in FINAL else {}
    tail = tail_ess(record.id, ctx["burn"]) if coords else None
    rows = []
    for i, label in enumerate(labels):
        x = draws[..., i].ravel()
        ks = ks_limit = None
        if exact is not None and x.size:
            ks = float(diagnostics.ks_distance(x, exact[:, i])[0])
            ess = coords["ess_bulk"][i] if coords else None
            ks_limit = ks_bound(ess, x.size, len(exact))
        exact_p = exact_tail(target, exact, i, tails[i]) if ctx["truths"] else None
        mean, sd = exact_moments(target, exact, i) if ctx["truths"] else (None, None)
        rows.append(
            {
                "coordinate": label,
                "mean": float(x.mean()) if x.size else None,
                "exact mean": mean,
                "sd": float(x.std(ddof=1)) if x.size > 1 else None,
                "exact sd": sd,
                "t": tails[i],
                "P(< t)": float(np.mean(x < tails[i])) if x.size else None,
                "exact P(< t)": exact_p,
                "KS distance": ks,
                "KS bound (α = 0.001)": ks_limit,
                "ESS bulk": coords["ess_bulk"][i] if coords else None,
                "ESS tail": tail[i] if tail else None,
                "R-hat": coords["rhat"][i] if coords else None,
            }
        )
    return rows


def live_run(run_id: str, show: int, trail: int, log_scale: bool, tails: list[float]) -> None:
    try:
        record = store.get(run_id)
    except KeyError:
        st.info("This run was deleted.")
        return
    ui.stop_polling("pg.polling", run_id, record.status in FINAL)
    ui.progress_bar(record)
    ctx = context(record)
    if ctx is None:
        return
    data, labels, grid = ctx["data"], ctx["labels"], ctx["grid"]
    if not len(data.get("step", ())):
        if record.status in FINAL:
            ui.run_status(record)
        else:
            st.caption("Waiting for the first samples…")
        return
    position, step = data["position"], data["step"]
    good = ~data["diverged"][-1]
    # The views below read an even subsample after burn-in: a rerun's cost stays flat.
    draws, every, total = even_sample(position, data["diverged"], ctx["burn"])
    sample = draws.reshape(-1, 2)
    cloud = sample[:: max(1, len(sample) // MAX_CLOUD)]
    shown = min(show, position.shape[1])
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
    if not ctx["truths"]:
        st.caption(
            "Exact marginals hold for nβ = 1, localization 0 and temperature 1; this run "
            "samples another density, so no exact curve, exact tail or KS is shown."
        )
    summary = record.summary or {}
    accepted = data.get("accepted")
    acceptance = summary.get("acceptance")
    if acceptance is None and accepted is not None and total:  # live, until the summary
        acceptance = float(accepted[ctx["burn"] :: every][:, good].mean())
    m1, m2, m3, m4 = st.columns(4)
    m1.metric("acceptance", number(acceptance, 3) if ctx["mh"] else "no MH step")
    m2.metric("diverged chains", int((~good).sum()))
    m3.metric("draws after burn-in", f"{total:,}")
    m4.metric("seconds", number(summary.get("seconds"), 3))
    st.dataframe(
        diagnostics_rows(ctx, record, sample, tails), hide_index=True, key=f"pg.diag.{run_id}"
    )
    lo, hi = np.array(ctx["target"].bounds).T
    outside = float(np.mean(((sample < lo) | (sample > hi)).any(-1))) if len(sample) else 0.0
    if every > 1:
        st.caption(
            f"Histograms, tails, KS and the live acceptance use one record in {every}: "
            f"{len(sample):,} of the {total:,} draws."
        )
    if outside > 0.01:
        st.caption(f"{outside:.1%} of the draws lie outside the plotted range.")
    if record.status in FINAL:
        ui.run_status(record)


def around(positions: np.ndarray, bounds) -> tuple:
    """Axes that frame ``positions`` [..., 2] with a margin (at least 5% of the bounds)."""
    out = []
    for i, (lo, hi) in enumerate(bounds):
        x = positions[..., i][np.isfinite(positions[..., i])]
        if not x.size:
            out.append((lo, hi))
            continue
        pad = max(0.3 * (x.max() - x.min()), 0.05 * (hi - lo))
        out.append((x.min() - pad, x.max() + pad))
    return tuple(out)


def replay(run_id: str, show: int, trail: int, log_scale: bool) -> None:
    """Recorded steps one at a time: each chain's move and, for MH kernels, its verdict."""
    try:  # a fragment that may rerun every few tenths of a second while another tab deletes
        record = store.get(run_id)
        ctx = context(record)
    except KeyError:
        st.info("This run was deleted.")
        return
    if ctx is None or not len(ctx["data"].get("step", ())):
        st.caption("No recorded steps yet.")
        return
    data, grid, labels = ctx["data"], ctx["grid"], ctx["labels"]
    last = len(data["step"]) - 1
    key, play_key, acted = f"pg.replay.{run_id}", "pg.playing", "pg.replay_acted"
    playing = st.session_state.get(play_key) == run_id
    # The timer's tick moves one record on, stopping (and the timer) at the end. A rerun the
    # user caused (Back, Step, Pause, the slider) is not a tick: it once moved on as well, so
    # Back while playing did nothing and Pause went one record further.
    user = st.session_state.pop(acted, None)
    if playing and not user:
        st.session_state[key] = min(st.session_state.get(key, 0) + 1, last)
        if st.session_state[key] >= last:
            st.session_state[play_key] = None
            st.rerun()
    if user == "play":  # the timer starts or stops with a full rerun (it is set outside)
        st.rerun()

    def nudge(delta: int) -> None:
        st.session_state[key] = int(np.clip(st.session_state.get(key, 0) + delta, 0, last))
        st.session_state[acted] = "move"

    def play() -> None:
        now = st.session_state.get(play_key) == run_id
        st.session_state[play_key] = None if now else run_id
        st.session_state[acted] = "play"

    def slide() -> None:
        st.session_state[acted] = "move"

    b1, b2, b3, b4, b5 = st.columns([1, 1, 1, 4, 1.5])
    b1.button("◀ Back", key=f"pg.back.{run_id}", on_click=nudge, args=(-1,))
    b2.button("Step ▶", key=f"pg.step.{run_id}", on_click=nudge, args=(1,))
    b3.button("⏸ Pause" if playing else "▶ Play", key=f"pg.play.{run_id}", on_click=play)
    k = b4.slider("record", 0, last, key=key, label_visibility="collapsed", on_change=slide)
    zoom = b5.toggle("zoom in", True, key="pg.replay_zoom", help="Axes around the chains")
    shown = min(show, data["position"].shape[1])
    positions = data["position"][max(0, k - trail) : k + 1, :shown]
    accepted = data["accepted"][k, :shown] > 0.5 if ctx["mh"] else None
    thin, step = record.spec["thin"], int(data["step"][k]) + 1  # steps count from 1 here
    st.plotly_chart(
        charts.density_figure(
            grid["xs"],
            grid["ys"],
            grid["log_density"],
            np.moveaxis(positions, 0, 1),
            None,
            labels,
            accepted=accepted,
            log_scale=log_scale,
            title=f"After step {step} of {record.spec['steps']}",
            height=560,
            view=around(positions, ctx["target"].bounds) if zoom else None,
        ),
        key=f"pg.replay_fig.{run_id}",
    )
    if accepted is not None:
        st.markdown(
            f"**Step {step}**: {int(accepted.sum())} of {shown} chains accepted "
            f"their proposal (green circles); {shown - int(accepted.sum())} rejected it and "
            "stayed (red crosses)."
        )
    else:
        st.markdown(
            f"**Step {step}**: {record.spec['sampler']['name']} has no "
            "accept/reject step; every chain moves."
        )
    if thin > 1:
        st.caption(
            f"Recorded every {thin} steps: each move spans {thin} steps, and the verdict is "
            "that of the last of them."
        )
    before = data["position"][k - 1, :shown] if k else np.full((shown, 2), np.nan)
    after = data["position"][k, :shown]
    rows = {
        "chain": list(range(shown)),
        f"{labels[0]} before": before[:, 0],
        f"{labels[1]} before": before[:, 1],
        f"{labels[0]} after": after[:, 0],
        f"{labels[1]} after": after[:, 1],
        "move length": np.linalg.norm(after - before, axis=-1),
        "L after": data["loss"][k, :shown],
    }
    if accepted is not None:
        rows["accepted"] = accepted
    st.dataframe(rows, hide_index=True, key=f"pg.replay_table.{run_id}")


runs = [r for r in store.list() if is_playground_run(r.spec)][:30]
ids = [r.id for r in runs]
if st.session_state.get("pg.shown") not in ids:
    st.session_state.pop("pg.shown", None)
if not runs:
    st.info("No playground runs yet: pick a potential and a sampler above, then Run.")
else:
    labels = {
        r.id: f"{r.id} · {r.spec['target']['name']} · {r.spec['sampler']['name']} · "
        f"{r.spec['chains']} chains × {r.spec['steps']} steps"
        for r in runs
    }
    shown_id = st.selectbox("Run shown", ids, format_func=labels.get, key="pg.shown")
    shown_record = store.get(shown_id)
    shown_target = target_of(
        shown_record.spec["target"]["name"],
        json.dumps(shown_record.spec["target"]["params"], sort_keys=True),
    )
    d1, d2, d3 = st.columns(3)
    show = d1.slider("chains drawn", 1, 16, 8, key="pg.show")
    trail = d2.slider("recent steps per path", 1, 500, 50, key="pg.trail")
    log_scale = d3.toggle("contours of log density −U", True, key="pg.log_scale")
    tails = []
    if not isinstance(shown_target, ParamError):
        cols = st.columns(2)
        for i, label in enumerate(labels_of(shown_target)[:2]):
            lo, hi = shown_target.bounds[i]
            tails.append(
                cols[i].number_input(
                    f"tail threshold t for P({label} < t)",
                    value=round(lo + (hi - lo) / 3, 2),
                    key=f"pg.tail.{shown_record.spec['target']['name']}.{i}",
                )
            )
    args = (shown_id, show, trail, log_scale, tails)
    ui.poll(live_run, "pg.polling", shown_id, shown_record.status in FINAL, 0.5, *args)

    st.subheader("Step by step")
    if st.toggle("Replay the recorded steps one at a time", key="pg.replay_on"):
        pace = st.select_slider(
            "slow motion: seconds per step when playing",
            options=[0.3, 0.6, 1.0, 2.0, 4.0],
            value=0.6,
            key="pg.pace",
        )
        playing = st.session_state.get("pg.playing") == shown_id
        every = pace if playing else None
        st.fragment(replay, run_every=every)(shown_id, show, trail, log_scale)

# ---------------------------------------------------------------------------------------------
# Explanation: of the run shown (else of the sampler picked above).

explained = shown_record.spec["sampler"]["name"] if runs else sampler_name
explained = explained if explained in samplers.REGISTRY else sampler_name
latex, paragraph = explain(explained)
st.subheader(f"How {explained} works")
st.latex(POSTERIOR)
if latex:
    st.latex(latex)
st.markdown(paragraph)
