"""The app's store and worker pool, and queueing runs on them: how every page reaches runs/."""

from __future__ import annotations

import contextlib
import os
import time

import streamlit as st

from runs.budget import check_budget
from runs.pool import NO_WORKER, ensure_supervisor, supervisor_pid, unserved
from runs.spec import SpecError, parse_spec
from runs.store import Store
from runs.worker import cores

from .live import run_label
from .widgets import DONE, WARNING, plain, spec_error


def open_page(title: str, caption: str) -> Store:
    """How every page that runs samplers opens: its title and what it does, then the worker
    pool started (or found); returns the store its runs go to."""
    st.title(title)
    st.caption(caption)
    ensure_pool()
    return store()


@st.cache_resource
def _store(home: str) -> Store:
    return Store(home)


def store() -> Store:
    """The app's Store ($BASIN_HOME, default ./.basin); one per home, shared by sessions."""
    return _store(os.environ.get("BASIN_HOME") or ".basin")


def ensure_pool() -> int | None:
    """Start (or find) the worker supervisor; the app itself never runs a sampler. Workers the
    app starts stop with it (their runs end interrupted, resumable) unless BASIN_KEEP_WORKERS=1
    keeps them running after the app stops."""
    if os.environ.get("BASIN_NO_WORKERS") == "1":  # a store served by someone else's workers
        return supervisor_pid(store())
    return ensure_supervisor(store(), owned=os.environ.get("BASIN_KEEP_WORKERS") != "1")


@st.cache_resource
def device_name() -> str:
    import torch

    if torch.cuda.is_available():
        return f"GPU: {torch.cuda.get_device_name(0)}"
    return f"CPU ({cores()} cores)"


def submit(spec: dict) -> str | None:
    """Validate ``spec`` as a RunSpec, check its budget and queue it; returns the run id, or
    None after showing the error inline (nothing is queued then)."""
    try:
        run = parse_spec(spec)
        check_budget(run)
    except SpecError as exc:
        spec_error(exc)
        return None
    ensure_pool()
    run_id = store().create(run.model_dump(mode="json"))
    confirm([run_id])
    return run_id


def submit_group(specs: list[dict], shown_key: str) -> list[str]:
    """Queue runs that belong together (Compare's samplers, the Funnel's metrics): every spec is
    checked first, so one bad spec queues none; the ids go to ``st.session_state[shown_key]``
    (the group the page shows) and the page waits briefly for their first records."""
    try:
        runs = [parse_spec(spec) for spec in specs]
        for run in runs:
            check_budget(run)
    except SpecError as exc:
        spec_error(exc)
        return []
    ensure_pool()
    ids = [store().create(run.model_dump(mode="json")) for run in runs]
    confirm(ids)
    st.session_state[shown_key] = ",".join(ids)
    await_first_records(ids)
    return ids


QUEUED = "pool.queued"  # what this tab's Run buttons queued: {"count", "last", "at"}


def confirm(run_ids: list[str]) -> None:
    """Say that a click queued runs, at once (a toast) and until the next one (the sidebar):
    a click sent while the browser was disconnected never reaches the server, so no page can
    report it; a click with no confirmation, or a count that did not grow, is one that was lost.
    """
    if not run_ids:
        return
    shown = st.session_state.get(QUEUED) or {"count": 0}
    at = time.strftime("%H:%M:%S")
    count = shown["count"] + len(run_ids)
    st.session_state[QUEUED] = {"count": count, "last": run_ids[-1], "at": at}
    what = f"run {run_ids[0]}" if len(run_ids) == 1 else f"{len(run_ids)} runs"
    st.toast(f"Queued {what} at {at} ({count} from this tab)", icon=DONE)


def worker_notice() -> None:
    """A warning when runs are queued and no worker runs to take them (the app's server was
    killed, or BASIN_NO_WORKERS=1 and nobody serves the store)."""
    waiting = unserved(store())
    if waiting:
        st.warning(f"{waiting} run{'s' if waiting > 1 else ''} {NO_WORKER}", icon=WARNING)


FIRST_RECORDS_S = 0.6  # how long a page waits, right after Run, for a run's first records


def await_first_records(run_ids: list[str], timeout: float = FIRST_RECORDS_S) -> None:
    """Wait briefly, in the rerun that submitted them, until every run has records or has ended.

    A warm worker records a run's first steps within ~0.2 s of the click; waiting for them here
    shows them in this rerun instead of at the live view's next poll (0.5 s later, plus a rerun
    when the run has already ended by then). Bounded: a run still compiling or training shows
    its progress bar after ``timeout``, as before."""
    s, deadline = store(), time.monotonic() + timeout
    pending = set(run_ids)
    while pending and time.monotonic() < deadline:
        for run_id in list(pending):
            with contextlib.suppress(KeyError):  # deleted meanwhile: nothing to wait for
                if s.records(run_id) == 0 and s.get(run_id).status in ("queued", "running"):
                    continue
            pending.discard(run_id)
        if pending:
            time.sleep(0.02)


def sidebar() -> None:
    """Device, worker pool and runs in flight, refreshed every 2 s on their own."""

    @st.fragment(run_every=2.0)
    def badge() -> None:
        s = store()
        if unserved(s) and os.environ.get("BASIN_NO_WORKERS") != "1":
            ensure_pool()  # the pool died while the app lives: a new one takes the queue
        running, queued = s.list("running"), len(s.list("queued"))
        pid = supervisor_pid(s)
        st.caption(f"**Device** {device_name()}")
        st.caption(f"**Workers** {'running (pid ' + str(pid) + ')' if pid else 'stopped'}")
        st.caption(f"**Runs** {len(running)} running, {queued} queued")
        worker_notice()
        if mine := st.session_state.get(QUEUED):
            runs = f"{mine['count']} run{'s' if mine['count'] > 1 else ''}"
            st.caption(f"**Queued from this tab** {runs}, the last {mine['last']} at {mine['at']}")
        for record in running[:8]:  # side by side: one per core
            done = record.progress.get("steps_done") or 0
            total = record.progress.get("steps_total") or record.spec.get("steps") or 1
            st.caption(f"{plain(run_label(record))} · {min(100, 100 * done // total)}%")

    with st.sidebar:
        badge()
