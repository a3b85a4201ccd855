"""What every page shares: the store, the worker pool, widgets from the registries, live data.

The one package besides ``pages/`` that imports Streamlit. Pages stay thin by calling these:
widgets -> RunSpec -> ``submit``; ``Live`` (new records only) -> ``charts`` figures.
"""

from __future__ import annotations

import os

import streamlit as st

from jobs.pool import ensure_supervisor, supervisor_pid
from jobs.spec import SpecError, check_budget, parse_spec
from jobs.store import Store

from .live import Live, progress_bar, run_status
from .widgets import param_inputs, spec_error

__all__ = [
    "Live",
    "device_name",
    "ensure_pool",
    "param_inputs",
    "progress_bar",
    "run_status",
    "sidebar",
    "spec_error",
    "store",
    "submit",
]


@st.cache_resource
def _store(home: str) -> Store:
    return Store(home)


def store() -> Store:
    """The app's Store ($BASIN_HOME, default ./.basin); one per home, shared by sessions."""
    return _store(os.environ.get("BASIN_HOME") or ".basin")


def ensure_pool() -> int | None:
    """Start (or find) the worker supervisor; the app itself never runs a sampler."""
    if os.environ.get("BASIN_NO_WORKERS") == "1":  # a store served by someone else's workers
        return supervisor_pid(store())
    return ensure_supervisor(store())


@st.cache_resource
def device_name() -> str:
    import torch

    if torch.cuda.is_available():
        return f"GPU: {torch.cuda.get_device_name(0)}"
    return f"CPU ({len(os.sched_getaffinity(0))} cores)"


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


def sidebar() -> None:
    """Device, worker pool and runs in flight, refreshed every 2 s on their own."""

    @st.fragment(run_every=2.0)
    def badge() -> None:
        s = store()
        running, queued = len(s.list("running")), len(s.list("queued"))
        pid = supervisor_pid(s)
        st.caption(f"**Device** {device_name()}")
        st.caption(f"**Workers** {'running (pid ' + str(pid) + ')' if pid else 'stopped'}")
        st.caption(f"**Runs** {running} running, {queued} queued")

    with st.sidebar:
        badge()
