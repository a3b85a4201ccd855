"""What every page shares: the store, the worker pool, widgets from the registries, live data.

The one package besides ``pages/`` that imports Streamlit. Pages stay thin by calling these:
widgets -> RunSpec -> ``submit``; ``Live`` (new records only) -> ``charts`` figures.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import time

import streamlit as st

from runs.pool import ensure_supervisor, supervisor_pid
from runs.spec import SpecError, check_budget, parse_spec
from runs.store import Store
from runs.worker import cores

from .live import Live, poll, progress_bar, run_label, run_status, stop_polling, sweep_progress
from .widgets import (
    DONE,
    OVER_BUDGET,
    STEP_COLUMN,
    WARNING,
    budget_gate,
    formula_warning,
    keep_values,
    kept,
    number_field,
    param_inputs,
    parse_grid,
    plain,
    spec_error,
)

__all__ = [
    "DONE",
    "OVER_BUDGET",
    "STEP_COLUMN",
    "WARNING",
    "Live",
    "await_first_records",
    "backend_choice",
    "budget_gate",
    "device_name",
    "ensure_pool",
    "formula_warning",
    "keep_values",
    "kept",
    "number_field",
    "param_inputs",
    "parse_grid",
    "plain",
    "poll",
    "progress_bar",
    "run_label",
    "run_status",
    "sidebar",
    "spec_error",
    "stop_polling",
    "store",
    "submit",
    "submit_sweep",
    "sweep_progress",
]


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


RAY_INSTALLED = importlib.util.find_spec("ray") is not None


def backend_choice(key: str) -> tuple[str, str | None]:
    """Where a sweep's runs go: the local worker pool, or a Ray cluster at an address (offered
    when Ray is installed: requirements-ray.txt)."""
    if not RAY_INSTALLED:
        st.caption(
            "Runs go to the local worker pool (`pip install -r requirements-ray.txt` "
            "offers a Ray cluster too)."
        )
        return "local", None
    left, right = st.columns([1, 2])
    with left:
        backend = st.radio(
            "Run on",
            ("local", "ray"),
            horizontal=True,
            key=kept(f"{key}.backend"),
            format_func={"local": "local worker pool", "ray": "Ray cluster"}.get,
            help="A Ray cluster runs each cell as a Ray task; its records stream back into this "
            "store, so the sweep fills in here as a local one does (README: Scale out).",
        )
    address = None
    if backend == "ray":
        with right:
            address = (
                st.text_input(
                    "Ray address",
                    "auto",
                    key=kept(f"{key}.address"),
                    help="auto: the cluster this machine runs (or RAY_ADDRESS); host:port of "
                    "a head; ray://host:port for Ray Client",
                ).strip()
                or "auto"
            )
    return backend, address


def submit_sweep(kind: str, params: dict, cells: list, backend: str, address: str | None) -> str:
    """Queue a sweep's runs (every one checked first) on the local pool, or held for a Ray
    driver started beside the app (it outlives the page, as the pool does)."""
    from studies import sweep

    held = os.getpid() if backend == "ray" else None
    sweep_id = sweep.submit(store(), kind, params, cells, held_by=held)
    if backend == "ray":
        from runs.ray_backend import start_driver

        start_driver(store(), sweep_id, address)
    else:
        ensure_pool()
    return sweep_id


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
