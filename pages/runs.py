"""Runs: every run in the store, live; open some to see their spec, progress and summary, cancel,
delete (one, or every finished run listed), compare side by side, export (NetCDF, .npz, CSV of
traces).

Runs live in the store and are executed by worker processes, so they keep going when this tab
closes and are all here again when it reopens.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import pandas as pd
import streamlit as st

import ui
from charts import table
from runs.build import check_files
from runs.jsonsafe import json_safe
from runs.spec import SpecError, parse_spec
from runs.store import FINAL, RESUMABLE, STATUSES, DamagedStore, NotResumable

ui.legacy_guard()  # a fresh server's first deep link: hand the run to the shell

OPEN = "runs.open"  # the multiselect of opened run ids
CONFIRM_ALL = "runs.confirm_all"  # the finished runs' ids a bulk delete asks to confirm
EXPORTS = {
    "NetCDF (ArviZ)": ("nc", "application/x-netcdf"),
    ".npz (numpy)": ("npz", "application/octet-stream"),
    "CSV of traces": ("csv", "text/csv"),
}
CSV_MAX_ROWS = 2_000_000  # beyond this a CSV is too slow to build and to open: use .npz


def export_key(run_id: str, label: str) -> str:
    """Where the prepared bytes of one export live in the session (the tests read them too)."""
    return f"runs.export.{run_id}.{EXPORTS[label][0]}"


def prepare(run_id: str, label: str) -> tuple[bytes, int]:
    """The export's bytes and the records it holds; built only when asked (reads every record)."""
    store = ui.store()
    records = store.records(run_id)
    kind = EXPORTS[label][0]
    if kind == "csv":
        data = store.read(run_id)
        if table.trace_rows(data) > CSV_MAX_ROWS:
            raise ValueError(
                f"{table.trace_rows(data):,} rows is more than a CSV should hold "
                f"({CSV_MAX_ROWS:,}); export .npz or NetCDF instead"
            )
        full = store.get_array(run_id, "projection") is None  # else: projected coordinates
        return table.traces_csv(data, positions=full), records
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"run.{kind}"
        if kind == "nc":
            store.export_netcdf(run_id, path)
        else:
            store.export_npz(run_id, path)
        return path.read_bytes(), records


def cancel(run_id: str) -> None:
    with contextlib.suppress(KeyError):  # deleted meanwhile: nothing left to cancel
        ui.store().request_cancel(run_id)


def resume(run_id: str) -> None:
    """Back to the queue: a worker replays the run from its seed and records what is missing.
    Only from interrupted or cancelled: a second click or tab finds it queued (nothing to do)
    or running, and says so beside the button (``resume_refusal``)."""
    st.session_state.pop(f"runs.resume.error.{run_id}", None)
    try:
        record = ui.store().get(run_id)
        check_files(parse_spec(record.spec))  # a model run whose factory file is gone: say so
        ui.store().requeue(run_id, RESUMABLE)
    except KeyError:  # deleted meanwhile
        return
    except (NotResumable, SpecError) as exc:  # held with the status it saw, while it keeps it
        st.session_state[f"runs.resume.error.{run_id}"] = (str(exc), ui.store().get(run_id).status)
        return
    ui.ensure_pool()


def resume_refusal(record) -> None:
    """Why the last Resume of this run was refused, while the run's status is the one it had."""
    key = f"runs.resume.error.{record.id}"
    held = st.session_state.get(key)
    if held and held[1] == record.status:
        st.error(ui.plain(held[0]), icon=ui.WARNING)
    elif held:
        del st.session_state[key]


def delete(run_id: str) -> None:
    with contextlib.suppress(KeyError):  # already gone
        ui.store().delete(run_id)
    st.session_state[OPEN] = [i for i in st.session_state.get(OPEN, []) if i != run_id]
    for key in [k for k in st.session_state if str(k).startswith(f"runs.export.{run_id}.")]:
        del st.session_state[key]
    st.session_state.pop(f"runs.confirm.{run_id}", None)


def confirm(run_id: str, value: bool) -> None:
    st.session_state[f"runs.confirm.{run_id}"] = value


def delete_many(run_ids: list[str]) -> None:
    for run_id in run_ids:
        delete(run_id)
    st.session_state.pop(CONFIRM_ALL, None)


def confirm_all(run_ids: list[str] | None) -> None:
    """Hold the ids shown when asked: the confirmation deletes those, not runs that finished
    since."""
    st.session_state[CONFIRM_ALL] = run_ids


def bulk_delete(records: list) -> None:
    """Delete every finished run listed (the status filter narrows them), after a confirmation."""
    held = st.session_state.get(CONFIRM_ALL)
    if held:
        st.warning(
            f"Delete the {len(held)} finished run(s) listed and every record of them? This "
            "cannot be undone.",
            icon=ui.WARNING,
        )
        yes, no = st.columns(2)
        yes.button(
            f"Delete {len(held)} runs permanently",
            key="runs.delete_all.yes",
            type="primary",
            on_click=delete_many,
            args=(held,),
        )
        no.button("Keep them", key="runs.delete_all.no", on_click=confirm_all, args=(None,))
        return
    finished = [r.id for r in records if r.status in FINAL]
    if finished:
        st.button(
            f"Delete the {len(finished)} finished run(s) listed…",
            key="runs.delete_all",
            on_click=confirm_all,
            args=(finished,),
            help="completed, cancelled, failed and interrupted runs that the status filter "
            "shows; queued and running ones are kept",
        )


def actions(record) -> None:
    """Cancel (queued or running), delete with a confirmation, export on request."""
    rid = record.id
    left, right = st.columns(2)
    with left:
        if record.status in ("queued", "running"):
            if record.cancel_requested:
                st.caption("Cancel requested: the worker stops at its next check.")
            else:
                st.button("Cancel run", key=f"runs.cancel.{rid}", on_click=cancel, args=(rid,))
        if record.status in ("interrupted", "cancelled"):
            st.button(
                "Resume",
                key=f"runs.resume.{rid}",
                on_click=resume,
                args=(rid,),
                help="Continue where its records end: the run replays its first steps from the "
                "same seed (the same draws) without writing them again, then records the rest.",
            )
        resume_refusal(record)
        if st.session_state.get(f"runs.confirm.{rid}"):
            still = " It is still running: its worker stops when it finds it gone." * (
                record.status not in FINAL
            )
            shown = ui.plain(rid)  # the store's: shown as typed
            st.warning(f"Delete run {shown} and every record of it? This cannot be undone.{still}")
            yes, no = st.columns(2)
            yes.button(
                "Delete permanently",
                key=f"runs.delete.yes.{rid}",
                type="primary",
                on_click=delete,
                args=(rid,),
            )
            no.button("Keep it", key=f"runs.delete.no.{rid}", on_click=confirm, args=(rid, False))
        else:
            st.button("Delete…", key=f"runs.delete.{rid}", on_click=confirm, args=(rid, True))
    with right:
        # a vi run records its objective per epoch, a nested run weighted points, not chains of
        # draws: only the arrays carry them
        formats = [".npz (numpy)"] if record.spec.get("kind") in ("vi", "nested") else list(EXPORTS)
        label = st.selectbox("Export as", formats, key=f"runs.format.{rid}")
        key = export_key(rid, label)
        failed = f"{key}.error"  # kept: the fragment reruns every 2 s and would wipe it
        if st.button("Prepare export", key=f"runs.prepare.{rid}"):
            st.session_state.pop(failed, None)
            with st.spinner("Reading the records…"):
                try:
                    st.session_state[key] = prepare(rid, label)
                except Exception as exc:  # a failed export must not take the page down
                    st.session_state[failed] = f"Export failed: {type(exc).__name__}: {exc}"
        if failed in st.session_state:
            st.error(ui.plain(st.session_state[failed]), icon=ui.WARNING)
        if key in st.session_state:
            data, records = st.session_state[key]
            extension, mime = EXPORTS[label]
            st.download_button(
                f"Download {label} ({len(data) / 1e6:.2f} MB, {records} records)",
                data=data,
                file_name=f"{rid}.{extension}",
                mime=mime,
                key=f"runs.download.{rid}.{extension}",
                on_click="ignore",
            )


def details(record) -> None:
    """One opened run: progress, outcome, key numbers, spec and summary, actions."""
    spec = record.spec
    with st.container(border=True):
        st.subheader(ui.plain(f"{record.id}: {table.target(spec)} / {table.method(spec)}"))
        ui.progress_bar(record)
        ui.run_status(record)
        if record.summary:
            facts = table.summary_facts(record.summary)
            shown = [(name, value) for name, value in facts.items() if value is not None]
            for col, (name, value) in zip(st.columns(max(len(shown), 1)), shown, strict=False):
                col.metric(name, table.number(value))
        spec_col, summary_col = st.columns(2)
        with spec_col:
            st.caption("Spec (the RunSpec it was submitted with)")
            st.json(spec, expanded=False)
        with summary_col:
            st.caption("Summary")
            if record.summary:
                st.json(json_safe(record.summary), expanded=False)
            else:
                st.caption("None yet: the summary is written when the run ends.")
        actions(record)


@st.fragment(run_every=2.0)
def runs_view() -> None:
    """Re-run every 2 s on its own: the table, the opened runs' progress and the actions."""
    store = ui.store()
    status = st.selectbox("Status", ["all", *STATUSES], key="runs.status")
    entries = store.entries()
    everything = [e for e in entries if not isinstance(e, DamagedStore)]
    for damaged in (e for e in entries if isinstance(e, DamagedStore)):  # the others still show
        text = f"Run {damaged.run_id} is damaged: {damaged}. `python -m jobs check` lists all."
        st.warning(ui.plain(text), icon=ui.WARNING)
    records = [r for r in everything if status in ("all", r.status)]
    if not records:
        st.info(
            "No runs" + ("" if status == "all" else f" with status {status}") + " in the store "
            f"({ui.plain(str(store.home))}). Start one on the Playground, Compare or Networks "
            "page, or with `python -m jobs submit ...`."
        )
    else:
        st.dataframe(
            pd.DataFrame(table.run_rows(vars(r) for r in records), columns=table.RUN_COLUMNS),
            hide_index=True,
            column_config={
                "progress (%)": st.column_config.ProgressColumn(
                    "progress (%)", min_value=0, max_value=100, format="%.0f%%"
                )
            },
            key="runs.table",
        )
        bulk_delete(records)
    by_id = {r.id: r for r in everything}
    before = st.session_state.get(OPEN, [])
    kept = [i for i in before if i in by_id]
    if kept != before:  # deleted since they were opened (here or by another process)
        st.session_state[OPEN] = kept
    # The filter narrows the choice, but never closes a run that is open.
    options = [r.id for r in records] + [i for i in kept if by_id[i] not in records]
    opened = st.multiselect(
        "Open runs (two or more to compare)",
        options,
        key=OPEN,
        format_func=lambda i: ui.run_label(by_id[i]),
    )
    if len(opened) >= 2:
        st.markdown("**Compared** (after each run's burn-in)")
        rows = table.compare_rows({i: by_id[i].summary for i in opened})
        st.dataframe(pd.DataFrame(rows).set_index("quantity"), key="runs.compare")
    for run_id in opened:
        details(by_id[run_id])


st.title("Runs")
st.caption(
    "Every run in the store, refreshed every 2 s. Runs execute in worker processes: they keep "
    "going when this tab closes and are listed here again when it reopens."
)
ui.ensure_pool()
ui.pool.worker_notice()  # queued runs that no worker will take (BASIN_NO_WORKERS=1, nobody serves)
runs_view()
with st.expander("About exports"):
    st.markdown(
        "- **NetCDF**: ArviZ's layout (positions in `posterior`, loss, acceptance and the "
        "kernel's scalars in `sample_stats`); `xarray.open_datatree(path)` opens it as a "
        "DataTree, which arviz-stats takes as it is.\n"
        "- **.npz**: every recorded array, chain-major (`position` [chains, draws, d], `loss` "
        "[chains, draws], `step` [draws]), for `numpy.load`.\n"
        "- A run with more than 64 parameters records its positions' coordinates on a fixed "
        "random orthonormal basis: `position` [chains, draws, k], with the basis as "
        "`projection` [d, k] (NetCDF: `projected_dim`, the basis in `constant_data`).\n"
        "- **CSV**: long format, one row per recorded step and chain: step, chain, loss, every "
        "recorded scalar, and the positions' coordinates when a run has at most 64 of them.\n\n"
        "Every record is exported, burn-in included: filter on `step`. Exports are built when "
        "you press *Prepare export*, so listing runs never waits on them."
    )
