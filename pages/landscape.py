"""Landscape: the loss surface around a run's trajectory (TATi, Gottwald & Reich).

Pick a run that kept its trajectory (positions when d <= 64, else full snapshots), two directions
(principal components of the trajectory, random, or top Hessian eigenvectors), a grid and a zoom
domain; the full-data loss is evaluated on the plane through a reference point with the chains
projected on top. Computed by ``studies.surface.compute``, as ``python -m jobs surface`` does.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import streamlit as st

import ui
from charts import landscape as figures
from charts import table
from landscapes import ParamError
from landscapes.surface import COMPONENT_PRESETS, DIRECTIONS, REFERENCES, ZOOM_DOMAINS
from runs.jsonsafe import json_safe
from runs.spec import SpecError
from studies import surface as surfaces

ui.legacy_guard()  # a fresh server's first deep link: hand the run to the shell

CUSTOM = "custom"
REFERENCE_HELP = (
    "θ*, the grid's centre: auto (the run's trained w0 or the target's known point, else best), "
    "w0, mean of the draws after burn-in, last draw of the first chain, best (lowest-loss "
    "trajectory point)"
)
DIRECTION_HELP = (
    "pca: principal components of the trajectory; random: random directions (filter-normalised "
    "for networks, Li et al. 2018); hessian: top eigenvectors of the full-data loss's Hessian "
    "at θ*"
)


def trajectory_source(store, run_id: str) -> str | None:
    """Where a surface would get the run's trajectory from, or None when it kept none."""
    try:
        if store.records(run_id, series="snapshots"):
            return "snapshots"
        if store.get_array(run_id, "projection") is not None:
            return None  # only a random projection and no snapshots: no plane to draw
        end = store.records(run_id)
        # A read from the end costs no blobs but still names what was recorded.
        recorded = store.read(run_id, since=end, names=["position"])
    except KeyError:  # deleted meanwhile
        return None
    return "records" if "position" in recorded else None


@st.cache_data(max_entries=32, show_spinner=False)
def surface(home: str, run_id: str, version: tuple, options: tuple) -> tuple[dict, bytes]:
    """The surface and its .npz bytes, cached per run state (status, records) and options, so a
    rerun with the same choices is instant and a run that records more gets a fresh one."""
    out = surfaces.compute(ui.store(), run_id, **dict(options))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "surface.npz"
        surfaces.save(out, path)
        return out, path.read_bytes()


def domain_label(value) -> str:
    if value in ("auto", CUSTOM):
        return {"auto": "auto (smallest 10^i holding the path)", CUSTOM: "custom"}[value]
    return f"[-{value:g}, {value:g}]²"


def options_form() -> dict:
    """The surface options as ``studies.surface.compute`` takes them; raises SpecError for a value
    that cannot even be passed on (the rest is validated by compute, naming the field)."""
    left, middle, right = st.columns(3)
    with left:
        directions = st.radio(
            "directions",
            DIRECTIONS,
            horizontal=True,
            key="landscape.directions",
            help=DIRECTION_HELP,
        )
        if directions == "random":
            components = ("1", "2")
            st.caption("Two random directions (the components choice is for pca and hessian).")
        else:
            preset = st.selectbox(
                "components",
                [*COMPONENT_PRESETS, CUSTOM],
                key="landscape.preset",
                help="which pair of ranked directions spans the plane (1-based); TATi pairs the "
                "largest with a small one to show a flat valley next to a steep one",
            )
            if preset == CUSTOM:
                text = st.text_input("custom components", "1,3", key="landscape.components")
                components = tuple(part.strip() for part in text.split(","))
            else:
                components = tuple(str(c) for c in COMPONENT_PRESETS[preset])
    with middle:
        grid = st.number_input(
            "grid points per axis (odd)", 3, 201, 41, step=2, key="landscape.grid"
        )
        domain = st.selectbox(
            "zoom domain [-R, R]²",
            ["auto", *ZOOM_DOMAINS, CUSTOM],
            format_func=domain_label,
            key="landscape.domain",
        )
        half_width = None if domain == "auto" else domain
        if domain == CUSTOM:
            text = st.text_input("range R (half-width)", "0.5", key="landscape.range")
            try:
                half_width = float(text)
            except ValueError:  # raised below, once every widget is drawn: else the ones
                half_width = text  # not drawn lose their values
    with right:
        reference = st.selectbox(
            "reference point", REFERENCES, key="landscape.reference", help=REFERENCE_HELP
        )
        st.selectbox(
            "value scale",
            list(figures.SCALES),
            index=2,
            format_func=figures.SCALES.get,
            key="landscape.scale",
            help="loss L, ln L, or ln|L − L0| with L0 the lowest loss seen (TATi's zoom plots)",
        )
    if isinstance(half_width, str):
        raise SpecError("range", f"must be a number > 0, got {half_width!r}")
    return {
        "directions": directions,
        "components": components,
        "grid": int(grid),
        "half_width": half_width,
        "reference": reference,
    }


def show(out: dict, npz: bytes, directions: str) -> None:
    scale = st.session_state["landscape.scale"]
    half = float(out["range"])
    st.caption(
        f"{out['label0']} × {out['label1']} around the **{out['reference']}** point; "
        f"{len(out['c0'])}² grid on [-{half:g}, {half:g}]², trajectory from the run's "
        f"{out['source']} ({out['path'].shape[0]} chains drawn), {out['seconds']:.2f} s. "
        f"The red square is the next zoom domain, [-{half / 10:g}, {half / 10:g}]²."
    )
    if out["diverged_chains"]:
        st.warning(
            f"{out['diverged_chains']} chain(s) diverged (NaN/Inf) and are left out of the "
            "directions and the overlay.",
            icon=ui.WARNING,
        )
    cols = st.columns(5)
    cols[0].metric("centre loss L(θ*)", table.number(out["centre_loss"]))
    cols[1].metric("lowest loss seen L0", table.number(out["lowest_loss"]))
    cols[2].metric("grid min", table.number(out["grid_min"]))
    cols[3].metric("grid max", table.number(out["grid_max"]))
    cols[4].metric("non-finite grid points", int(out["nonfinite"]))

    ratio = out["explained_variance_ratio"]
    if len(ratio):
        highlight = tuple(int(c) for c in out["components"]) if directions == "pca" else ()
        st.plotly_chart(
            figures.spectrum_figure(ratio, highlight, title="Explained variance of the trajectory"),
            key="landscape.spectrum",
        )
    inner = half / 10  # the next zoom domain, marked in red
    left, right = st.columns(2)
    surface = figures.surface_figure(out, scale, inner=inner, title="Loss surface")
    # The contour plot beside it names the same chains in the same colours: without a second
    # legend the 3-D scene gets the column's height.
    left.plotly_chart(surface.update_layout(showlegend=False), key="landscape.surface")
    right.plotly_chart(
        figures.contour_figure(out, scale, inner=inner, title="Contours and chains"),
        key="landscape.contour",
    )
    st.plotly_chart(
        figures.sweep_figure(out, scale, title="1-D sweeps over 5x the domain"),
        key="landscape.sweep",
    )
    with st.expander("Facts (JSON)", expanded=False):
        st.json(json_safe(surfaces.summary(out)))
    st.download_button(
        "Download the surface (.npz)",
        data=npz,
        file_name=f"surface-{out['run_id']}.npz",
        mime="application/octet-stream",
        on_click="ignore",
    )


st.title("Landscape")
st.caption(
    "The loss around a run's trajectory on a plane through a reference point, with the chains on "
    "top (TATi). Needs a run that kept its trajectory: positions (d <= 64) or snapshots."
)
store = ui.store()
runs = [r for r in store.list() if r.status != "queued"]
runs = [r for r in runs if trajectory_source(store, r.id)]
if not runs:
    st.info(
        "No run with a recorded trajectory yet. Start one on the Playground or the Networks page: "
        "runs keep their positions when d <= 64, and full snapshots of larger models."
    )
else:
    by_id = {r.id: r for r in runs}
    run_id = st.selectbox(
        "run",
        list(by_id),
        key="landscape.run",
        format_func=lambda i: ui.run_label(by_id[i]),
    )
    record = by_id[run_id]
    if record.status == "running":
        st.caption("Still running: the surface uses the draws recorded so far.")
        st.button("Refresh with the newest draws", key="landscape.refresh")
    try:
        options = options_form()
        version = (record.status, store.records(run_id))
        with st.spinner("Evaluating the loss on the grid…"):
            out, npz = surface(str(store.home), run_id, version, tuple(sorted(options.items())))
    except SpecError as exc:
        ui.spec_error(exc)
    except ParamError as exc:
        ui.spec_error(exc)
    except KeyError:
        st.error(f"Run {run_id} is gone from the store (deleted meanwhile).", icon=ui.WARNING)
    else:
        show(out, npz, options["directions"])

st.markdown(
    """
**Reading it.** The surface is the full-data loss L(θ* + c0 v0 + c1 v1) on a plane through the
reference point θ*. With **pca** the directions are principal components of the trajectory:
where the sampler actually moved, so they find the flat valleys that **random** directions
(almost always orthogonal to them in high dimension) miss; pairing PC1 with a small component
shows a flat and a steep direction side by side (TATi). **hessian** takes the steepest
curvatures at θ*. Each trajectory point is drawn at its own loss, not the plane's: where the
chains left the plane they sit above or below the surface. On the **ln |L − L0|** scale
(L0 the lowest loss seen) the tiny differences near the minimum become visible; the red square
marks the next, 10x smaller zoom domain.
"""
)
