"""The app's store and worker pool, and queueing runs on them: how every page reaches runs/."""

from __future__ import annotations

import contextlib
import os
import time

import streamlit as st

from runs.budget import check_budget
from runs.pool import ensure_supervisor, supervisor_pid
from runs.spec import SpecError, parse_spec
from runs.store import Store
from runs.worker import cores

from .live import run_label
from .widgets import spec_error


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
    return store().create(run.model_dump(mode="json"))


def submit_group(specs: list[dict], shown_key: str) -> list[str]:
    """Queue runs that belong together (Compare's samplers, the Funnel's metrics): every spec is
    checked first, so one bad spec queues none; the ids go to ``st.session_state[shown_key]``
    (the group the page shows) and the page waits briefly for their first records."""
    try:
        for spec in specs:
            check_budget(parse_spec(spec))
    except SpecError as exc:
        spec_error(exc)
        return []
    ids = [i for i in (submit(spec) for spec in specs) if i]
    st.session_state[shown_key] = ",".join(ids)
    await_first_records(ids)
    return ids


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
        running, queued = s.list("running"), len(s.list("queued"))
        pid = supervisor_pid(s)
        st.caption(f"**Device** {device_name()}")
        st.caption(f"**Workers** {'running (pid ' + str(pid) + ')' if pid else 'stopped'}")
        st.caption(f"**Runs** {len(running)} running, {queued} queued")
        for record in running[:8]:  # side by side: one per core
            done = record.progress.get("steps_done") or 0
            total = record.progress.get("steps_total") or record.spec.get("steps") or 1
            st.caption(f"{run_label(record)} · {min(100, 100 * done // total)}%")

    with st.sidebar:
        badge()
