"""The Playground's step-by-step replay for class: a recorded run's steps one at a time, each
chain's move and, for MH kernels, its verdict. The state machine is ``jobs.report.Replay``;
this draws its buttons, slider, figure and table."""

from __future__ import annotations

import numpy as np
import streamlit as st

import charts
from jobs import report

from . import store
from .truths import run_context


def replay_section(run_id: str, show: int, trail: int, log_scale: bool) -> None:
    """The replay's heading, its switch and pace, and the replay itself while switched on
    (a fragment rerun by a timer of the chosen pace while it plays)."""
    st.subheader("Step by step")
    if st.toggle("Replay the recorded steps one at a time", key="pg.replay_on"):
        pace = st.select_slider(
            "slow motion: seconds per step when playing",
            options=[0.3, 0.6, 1.0, 2.0, 4.0],
            value=0.6,
            key="pg.pace",
        )
        every = pace if st.session_state.get("pg.playing") == run_id else None
        st.fragment(replay, run_every=every)(run_id, show, trail, log_scale)


def replay(run_id: str, show: int, trail: int, log_scale: bool) -> None:
    """Recorded steps one at a time: each chain's move and, for MH kernels, its verdict."""
    try:  # a fragment that may rerun every few tenths of a second while another tab deletes
        record = store().get(run_id)
        ctx = run_context(record)
    except KeyError:
        st.info("This run was deleted.")
        return
    if ctx is None or not len(ctx["data"].get("step", ())):
        st.caption("No recorded steps yet.")
        return
    data, grid, labels = ctx["data"], ctx["grid"], ctx["labels"]
    state = report.Replay(st.session_state, run_id, len(data["step"]) - 1)
    if state.begin():
        st.rerun()
    b1, b2, b3, b4, b5 = st.columns([1, 1, 1, 4, 1.5])
    b1.button("◀ Back", key=f"pg.back.{run_id}", on_click=state.move, args=(-1,))
    b2.button("Step ▶", key=f"pg.step.{run_id}", on_click=state.move, args=(1,))
    label = "⏸ Pause" if state.playing else "▶ Play"
    b3.button(label, key=f"pg.play.{run_id}", on_click=state.toggle)
    k = b4.slider(
        "record",
        0,
        state.last,
        key=state.record_key,
        label_visibility="collapsed",
        on_change=state.slid,
    )
    zoom = b5.toggle("zoom in", True, key="pg.replay_zoom", help="Axes around the chains")
    shown = min(show, data["position"].shape[1])
    now = report.replay_step(data, k, shown, trail, labels, ctx["mh"])
    accepted, step, thin = now["accepted"], now["step"], record.spec["thin"]
    st.plotly_chart(
        charts.density_figure(
            grid["xs"],
            grid["ys"],
            grid["log_density"],
            np.moveaxis(now["positions"], 0, 1),
            None,
            labels,
            accepted=accepted,
            log_scale=log_scale,
            title=f"After step {step} of {record.spec['steps']}",
            height=560,
            view=report.around(now["positions"], ctx["target"].bounds) if zoom else None,
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
    st.dataframe(now["rows"], hide_index=True, key=f"pg.replay_table.{run_id}")
