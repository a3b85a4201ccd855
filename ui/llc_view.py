"""An LLC run on the Networks page, live: its training to w0, the running estimate with its
band, each chain's loss and distance from w0 and the warnings so far; once it has ended, its
verdict, the estimate's details and the posterior-predictive metrics."""

from __future__ import annotations

import streamlit as st

import charts
from charts.table import number
from runs.store import FINAL
from studies import llc
from studies.predictive import predictive_rows

from .live import Live, progress_bar, run_status, stop_polling
from .pool import store
from .truths import network_facts
from .widgets import WARNING, plain


def live_run(run_id: str) -> None:
    try:
        record = store().get(run_id)
    except KeyError:
        st.info("This run was deleted.")
        return
    stop_polling("net.polling", run_id, record.status in FINAL)
    progress_bar(record)
    info = network_facts(record.spec["target"])
    train = store().get_array(run_id, "train_loss")
    if train is not None and len(train):
        st.plotly_chart(
            charts.loss_curve(train[:, 0], train[:, 1], "Training to w0"), key=f"net.train.{run_id}"
        )
    data = Live(store(), run_id, series="flushes").update()
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
        for w in llc.llc_warnings_so_far(record, data, info["dim"]):
            st.warning(f"**{plain(w['code'])}** (so far): {plain(w['message'])}", icon=WARNING)
    elif record.status not in FINAL:
        st.caption("Waiting for the first samples…")
    if record.status in FINAL:
        run_status(record)
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
        st.warning(f"**{plain(w['code'])}**: {plain(w['message'])}", icon=WARNING)
    details = llc.llc_details(est)
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
        predictive_rows(block),
        hide_index=True,
        column_config={"meaning": st.column_config.TextColumn(width="large")},
        key=f"net.predictive.{record.id}",
    )
