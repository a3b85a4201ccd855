"""Compare: one target, two or more samplers side by side on the same budget (seed, chains,
steps), the view a teacher projects.

Widgets (from the registries) -> one RunSpec per sampler -> ui.submit; their records ->
charts.runs: histograms of one coordinate on shared bins with the exact marginal, traces side
by side, each sampler's IAT along the target's widest directions, and one diagnostics table
with a row per sampler. EQN's chains are its walkers, one coupled ensemble: it gets a count of
its own (``compare.WALKERS``); every other sampler runs the shared chains. Nested sampling runs at
its own settings (live points, stop) on the same target and seed: its resampled draws join the
histogram, the KS column and the table (with its evidence); it has no trace or IAT.
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
from charts.table import highlighted
from landscapes import Param, ParamError
from runs.nested_spec import box_error
from runs.store import FINAL
from samplers.explain import explain
from studies import compare, diagnostics
from studies.compare import NESTED, WALKERS, is_nested
from studies.diagnostics import EXACT_DRAWS, POTENTIALS, labels_of
from ui import animate, nested_view
from ui.live import watch
from ui.truths import (
    density_grid,
    exact_draws,
    open_group,
    run_length,
    sampler_defaults,
    tail_ess,
    target_of,
)

ui.legacy_guard()  # a fresh server's first deep link: hand the run to the shell

# Each sampler, and each variant of one: "sgrld · monge" runs sgrld with its metric widget hidden
ENTRIES = compare.sampler_entries()
SAMPLERS = list(ENTRIES)
CURVE_POINTS = 401
BINS = 60
MAX_TRACE = 2000
NAMES = ["step", "position", "accepted", "diverged"]
MAX_WALKERS = 256  # EQN's B_i: a d x d matrix per walker, rebuilt from all the others


def walkers_param(name: str) -> Param:
    return Param(
        "walkers",
        "int",
        WALKERS[name],
        f"The chains of the {name} run: its walkers, one ensemble whose covariance "
        "preconditions each walker (the other samplers run the shared chains)",
        2,
        MAX_WALKERS,
    )


def eqn_vs_baoab() -> None:
    """Where EQN's point shows (Heber et al. 2020, Fig. 10): a stretched, rotated Gaussian, and
    plain BAOAB beside EQN at the same step size."""
    st.session_state.update(
        {
            "cmp.target_name": "gaussian",
            "cmp.target.gaussian.dim": "4",
            "cmp.target.gaussian.scales": "1",
            "cmp.target.gaussian.condition": "10",
            "cmp.target.gaussian.rotate": True,
            "cmp.samplers": ["eqn", "baoab"],
        }
    )


def nested_settings(expanded: bool) -> dict | None:
    """Nested sampling's own settings (``samplers.nested.PARAMS``); None after an inline error."""
    with st.expander(f"nested: {nested_view.SPEC.paper}", expanded=expanded):
        st.latex(nested_view.explain()[0])
        params = ui.param_inputs(nested_view.SPEC, key="cmp.nested")
        st.caption(
            "Nested sampling runs until its evidence has converged, at these settings, on the "
            "comparison's potential and seed: the chains, steps and burn-in below are the "
            "kernels'. Its weighted dead points, resampled by weight, join the histogram and "
            "the KS column; it has no chains to trace."
        )
    return params


def spec_of(entry: str) -> dict:
    """The RunSpec of one chosen entry on the page's target and budget."""
    name, _ = ENTRIES[entry]
    if name == NESTED:
        chosen = {"nested": sampler_params[entry], "seed": length["seed"]}
        return nested_view.spec_of(target_name, target_params, chosen)
    return {
        "target": {"name": target_name, "params": target_params},
        "sampler": {"name": name, "params": sampler_params[entry]},
        **length,
        "chains": walkers.get(entry, length["chains"]),
        "record": {"animate": animate.traced_steps(length["steps"])},  # the animated view
    }


# ---------------------------------------------------------------------------------------------
# Controls: one target, several samplers, one budget.

store = ui.open_page(
    "Compare samplers",
    "The same target, seed, chains and steps for every sampler: what differs is the sampler.",
)

left, right = st.columns(2)
with left:
    target_name = st.selectbox(
        "Potential", POTENTIALS, index=POTENTIALS.index("funnel"), key=ui.kept("cmp.target_name")
    )
    target_spec = landscapes.REGISTRY[target_name]
    st.caption(f"{target_spec.doc} — *{target_spec.paper}*")
    target_params = ui.param_inputs(target_spec, key="cmp.target")
    target_ok = False
    if target_params is not None:
        built = target_of(target_name, json.dumps(target_params, sort_keys=True))
        if isinstance(built, ParamError):
            ui.spec_error(built)
        else:
            target_ok = True
            st.caption(f"d = {built.dim}")
with right:
    chosen = st.multiselect(
        "Samplers", SAMPLERS, default=["mala", "hmc"], key=ui.kept("cmp.samplers")
    )
    st.button(
        "EQN vs BAOAB on a stretched Gaussian",
        key="cmp.eqn_demo",
        on_click=eqn_vs_baoab,
        help="Sets the target to a rotated Gaussian of condition number 10 (d = 4) and the "
        "samplers to eqn and baoab, at the same step size: see the IAT per direction below.",
    )
    sampler_params, walkers = {}, {}
    for entry in chosen:
        name, fixed = ENTRIES[entry]
        if name == NESTED:
            sampler_params[entry] = nested_settings(len(chosen) <= 2)
            continue
        expanded = len(chosen) <= 2 or name in WALKERS
        with st.expander(f"{entry}: {samplers.REGISTRY[name].paper}", expanded=expanded):
            latex, _ = explain(name)
            if latex:
                st.latex(latex)
            if name in WALKERS:
                walkers[entry] = ui.number_field(
                    walkers_param(name), ui.kept(f"cmp.sampler.{name}.walkers"), owner=name
                )
                st.caption(
                    "eta blends the walkers' covariance into the preconditioner "
                    "B = chol(I + eta cov); eta = 0 is plain BAOAB. B is first built from the "
                    "walkers' N(0, I) starts: on a curved target (banana, donut, funnel) or a "
                    "narrow one, steps stretched by up to sqrt(1 + eta) can blow walkers up "
                    "before the first rebuild; lower eta or the step size there."
                )
            params = ui.param_inputs(
                samplers.REGISTRY[name],
                key="cmp.sampler" + "".join(f".{v}" for v in fixed.values()),
                skip=tuple(fixed),
                defaults=sampler_defaults(samplers.REGISTRY[name]),
            )
            sampler_params[entry] = None if params is None else {**params, **fixed}

length = run_length("cmp")
nested_problem = box_error(target_name, target_params) if target_ok and NESTED in chosen else None
if nested_problem:
    st.error(f"**nested** · potential: {nested_problem}.", icon=ui.WARNING)
ready = (
    target_ok
    and nested_problem is None
    and length is not None
    and all(p is not None for p in sampler_params.values())
    and all(w is not None for w in walkers.values())
)
# The shared chains' runs first (the estimate below names the first run's chains); an ensemble
# runs its walkers, on the same target, steps, burn-in, thin and seed; nested sampling last.
queued = sorted(chosen, key=lambda entry: (entry in walkers, entry == NESTED))
specs = [spec_of(entry) for entry in (queued if ready else [])]
# nested sampling takes seconds on a potential (as on the Playground): the kernels' budget
confirmed = ui.budget_gate([spec for spec in specs if not is_nested(spec)], "cmp")

if st.button("Run all", type="primary", key="cmp.run"):
    if len(chosen) < 2:
        st.error("**samplers**: choose at least two samplers to compare.", icon=ui.WARNING)
    elif not ready:
        bad = [e for e in chosen if sampler_params[e] is None or walkers.get(e, 0) is None]
        where = f" (the parameters of {', '.join(bad)})" if bad else ""
        st.error(f"Fix the fields marked above first{where}; nothing was queued.", icon=ui.WARNING)
    elif not confirmed:
        st.error(ui.OVER_BUDGET, icon=ui.WARNING)
    else:
        ui.submit_group(specs, "cmp.shown")


# ---------------------------------------------------------------------------------------------
# Live views of the shown comparison.


def truth_curve(target, exact, i: int, edges: np.ndarray):
    """The exact marginal of coordinate i: closed form where known, else binned exact draws."""
    if i in target.marginals:
        x = np.linspace(edges[0], edges[-1], CURVE_POINTS)
        return x, np.exp(target.marginals[i](torch.from_numpy(x)).numpy()), "exact (closed form)"
    if exact is not None:
        centers = 0.5 * (edges[1:] + edges[:-1])
        density = charts.histogram_density(exact[:, i], edges)
        return centers, density, f"exact ({EXACT_DRAWS:,} draws)"
    return None, None, ""


def shared_edges(target, exact, draws: dict, i: int) -> np.ndarray:
    """One set of bins for every sampler: the exact law's central 99%, else the bounds of a
    2-D target, else the pooled draws' central 99%."""
    if exact is not None:
        lo, hi = np.quantile(exact[:, i], [0.005, 0.995])
    elif target.dim == 2 and target.bounds is not None:
        lo, hi = target.bounds[i]
    else:
        pooled = np.concatenate([d[..., i].ravel() for d in draws.values()] or [np.zeros(1)])
        pooled = pooled[np.isfinite(pooled)]
        lo, hi = np.quantile(pooled, [0.005, 0.995]) if pooled.size else (0.0, 1.0)
    return charts.histogram_edges(lo, hi, BINS)


def live_group(ids: list[str], coord: int, show: int) -> None:
    group = open_group(ids, "cmp.polling")
    if group is None:
        return
    records, _, _, params_json, target = group
    kernels = {i: r for i, r in records.items() if not is_nested(r.spec)}
    first = next(iter(kernels.values())).spec  # a comparison has a kernel's run (``comparisons``)
    label = labels_of(target)[coord]
    burn = diagnostics.burn_records(first)
    exact_all = exact_draws(target.name, params_json)

    labels = compare.run_labels(records.values())  # "sgrld · monge": a name is not enough
    animated(kernels, labels, target, first, params_json)
    for run_id, record in records.items():
        st.caption(f"**{ui.plain(labels[run_id])}**")
        ui.progress_bar(record)
    draws, data, exact_ok = {}, {}, {}
    for run_id, record in records.items():
        name = labels[run_id]
        if is_nested(record.spec):  # its draws come at its end
            exact_ok[name] = diagnostics.targets_exact(record.spec.get("nested") or {})
            found = store.get_array(run_id, "draws") if record.status in FINAL else None
            if found is not None and len(found):
                draws[name] = found
            continue
        data[name] = ui.Live(store, run_id, names=NAMES).update()
        exact_ok[name] = diagnostics.targets_exact(record.spec["sampler"]["params"])
        position = data[name].get("position")
        if position is not None and len(position):  # an even subsample: reruns stay flat
            draws[name] = diagnostics.even_sample(position, data[name]["diverged"], burn)[0]
    if not draws:
        st.caption("Waiting for the first samples…")
        return

    exact = exact_all if all(exact_ok.values()) else None
    edges = shared_edges(target, exact, draws, coord)
    x = y = None
    curve = "exact"
    if all(exact_ok.values()):
        x, y, curve = truth_curve(target, exact, coord, edges)
    else:
        st.caption(
            "Some runs sample another density (nβ ≠ 1, localization or temperature): no exact "
            "curve or KS."
        )
    histogram = charts.histogram_figure(
        {name: d[..., coord].ravel() for name, d in draws.items()},
        x,
        y,
        f"Marginal of {label}: every sampler on the same bins",
        f"{label} (coordinate {coord})",
        edges=edges,
        exact_name=curve,
    )
    st.plotly_chart(histogram, key=f"cmp.hist.{ids[0]}")

    traces(data, ids[0], coord, show, label, edges, first["burn_in"])
    if len(kernels) < len(records):
        st.caption(
            "nested has no chains to trace or IAT to read: its draws are its dead and last "
            "live points resampled by their weights, worth about the weights' effective "
            "sample size of independent draws."
        )
    iat_chart(target, kernels, labels, data, burn, all(exact_ok.values()))
    summary_table(records, labels, data, draws, exact, coord, label, burn, ids[0])


def animated(records: dict, labels: dict, target, first: dict, params_json: str) -> None:
    """The samplers' first steps, animated side by side, on a 2-D target."""
    if target.dim == 2 and target.bounds is not None:
        sp = first["sampler"]["params"]
        grid = density_grid(target.name, params_json, float(sp.get("nbeta") or target.nbeta), 1.0)
        animate.player(
            list(records.values()),
            [labels[run_id] for run_id in records],
            grid,
            target.bounds,
            labels_of(target),
            True,
        )
    else:
        st.caption(
            f"The animated view draws 2-D targets; this one has d = {target.dim} "
            "(the funnels take dim = 2)."
        )


def traces(data: dict, first_id: str, coord: int, show: int, label: str, edges, burn_in) -> None:
    """Each sampler's trace of the coordinate, three to a row, on the histogram's range."""
    names = list(data)
    per_row = min(3, len(names))
    for start in range(0, len(names), per_row):
        cols = st.columns(per_row)
        for col, name in zip(cols, names[start : start + per_row], strict=False):
            if "position" not in data[name] or not len(data[name]["position"]):
                continue
            step, position = data[name]["step"], data[name]["position"]
            stride = max(1, len(step) // MAX_TRACE)
            col.plotly_chart(
                charts.trace_figure(
                    step[::stride],
                    position[::stride, :show, coord],
                    f"{name}: trace of {label}",
                    f"{label} (position)",
                    y_range=(edges[0], edges[-1]),
                    burn_in=burn_in or None,
                ),
                key=f"cmp.trace.{first_id}.{name}",
            )


def summary_table(
    records: dict, labels: dict, data: dict, draws: dict, exact, coord: int, label: str, burn, key
) -> None:
    """One row per sampler, its failing cells in colour, then each finished run's verdict."""
    rows = []
    for run_id, record in records.items():
        name = labels[run_id]
        if is_nested(record.spec):
            rows.append(compare.nested_row(record, draws.get(name), exact, coord, label))
            continue
        tail = tail_ess(run_id, burn) if diagnostics.final_coordinates(record) else None
        rows.append(
            compare.compare_row(record, data[name], draws.get(name), exact, coord, label, tail)
            | {"sampler": name}
        )
    flags = [
        diagnostics.cell_flags(row, (record.spec.get("sampler") or {}).get("name"))
        for row, record in zip(rows, records.values(), strict=True)
    ]
    st.dataframe(highlighted(rows, flags), hide_index=True, key=f"cmp.table.{key}")
    for run_id, record in records.items():
        if record.status in FINAL:  # each run's verdict in colour, as soon as it ends
            st.caption(f"**{ui.plain(labels[run_id])}**")
            ui.run_status(record)


def budget_label(group: list) -> str:
    """The group's budget, "32 chains × 2000 steps", and an ensemble's own walkers after it:
    "(eqn: 8 walkers)"."""
    own = [r for r in group if compare.sampler_label(r.spec) in WALKERS]
    nested = [r for r in group if is_nested(r.spec)]
    shared = [r for r in group if r not in own and r not in nested] or group
    walkers = ", ".join(
        [f"{compare.sampler_label(r.spec)}: {r.spec['chains']} walkers" for r in own]
        + [f"nested: {r.spec['nested']['live']} live points" for r in nested]
    )
    return f"{shared[0].spec['chains']} chains × {shared[0].spec['steps']} steps" + (
        f" ({walkers})" if walkers else ""
    )


def iat_chart(target, records: dict, labels: dict, data: dict, burn: int, exact: bool) -> None:
    """Each sampler's IAT along the target's widest directions (``compare.iat_by_direction``)."""
    if target.dim > compare.IAT_MAX_DIM:
        st.caption(f"The IAT per direction is drawn for d ≤ {compare.IAT_MAX_DIM}.")
        return
    runs = {}
    for run_id, record in records.items():
        live = data[labels[run_id]]
        if live.get("position") is not None and len(live["position"]) > burn:
            runs[labels[run_id]] = (live["position"], live["diverged"], record.spec["thin"])
    if not runs:
        return
    found = compare.iat_by_direction(target, runs, burn, exact)
    k = len(found["variance"])
    st.plotly_chart(
        charts.iat_direction_figure(
            found["variance"],
            found["iat"],
            f"IAT per direction: the {k} widest of {found['source']}",
        ),
        key=f"cmp.iat.{next(iter(records))}",
    )
    ensemble = [labels[i] for i, r in records.items() if r.spec["sampler"]["name"] in WALKERS]
    why = (
        f" {' and '.join(ensemble)} rescales its kicks and drifts by B = chol(I + η cov) of the "
        "other walkers, so along the wide, slow directions it steps √(1 + η var) times further "
        "at the step size the narrow ones allow, and mixes them faster."
        if ensemble
        else ""
    )
    st.caption(
        "IAT τ: how many steps each sampler takes to forget where it was along each "
        "direction (the mean over its chains, of at most its last "
        f"{compare.IAT_RECORDS:,} records after burn-in; 1 = independent draws): the widest "
        "directions are the slowest to mix." + why + " Read per chain, so an ensemble of a few "
        "walkers and a run of many chains compare fairly (the table's ESS counts every chain)."
    )


def view_controls(shown: str) -> tuple:
    """The comparison's coordinate and chains per trace: ``live_group``'s arguments."""
    first = groups[options.index(shown)][0].spec
    target = target_of(first["target"]["name"], diagnostics.params_json(first))
    coord_labels = labels_of(target) if not isinstance(target, ParamError) else ["w0"]
    d1, d2 = st.columns(2)
    coord = d1.selectbox(
        "coordinate",
        range(len(coord_labels)),
        index=len(coord_labels) - 1,  # the funnels' neck v is last
        format_func=lambda i: coord_labels[i],
        key=f"cmp.coord.{first['target']['name']}.{len(coord_labels)}",
    )
    show = d2.slider("chains drawn per trace", 1, 16, 4, key="cmp.show")
    return shown.split(","), coord, show


groups = compare.comparisons(store.list())
options = [",".join(r.id for r in g) for g in groups]
shown, _ = watch(
    "cmp",
    "Comparison shown",
    {
        o: f"{g[0].id} · {g[0].spec['target']['name']} · "
        + " vs ".join(compare.run_labels(g).values())
        + f" · {budget_label(g)}"
        for o, g in zip(options, groups, strict=True)
    },
    "No comparisons yet: pick a target and two or more samplers above, then Run all.",
    live_group,
    lambda o: all(r.status in FINAL for r in groups[options.index(o)]),
    1.0,
    controls=view_controls,
)

# ---------------------------------------------------------------------------------------------
# Explanation: of the samplers shown (else of those picked above).

if shown:
    explained = [
        NESTED if is_nested(r.spec) else r.spec["sampler"]["name"]
        for r in groups[options.index(shown)]
    ]
else:
    explained = [ENTRIES[entry][0] for entry in chosen]
explained = list(dict.fromkeys(explained))  # sgrld once, whatever its metrics
if explained:
    st.subheader("The samplers")
    for name in explained:
        if name in samplers.REGISTRY:
            st.markdown(f"**{name}**: {explain(name)[1]}")
        elif name == NESTED:
            st.markdown(f"**{name}**: {nested_view.explain()[1]}")
