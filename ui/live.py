"""Live views of a run: its records fetched incrementally, its progress and its outcome."""

from __future__ import annotations

import numpy as np
import streamlit as st

from jobs.store import RunRecord, Store

FINAL = ("completed", "cancelled", "failed", "interrupted")


class Live:
    """A run's records so far, kept in the session and extended with only what is new at each
    rerun (``Store.read(since=k)``), so a fragment polling every half second stays cheap."""

    def __init__(self, store: Store, run_id: str, series: str = "records", names=None):
        self.store, self.run_id, self.series = store, run_id, series
        key = f"live:{run_id}:{series}:{names}"
        if key not in st.session_state:
            st.session_state[key] = {"since": 0, "parts": {}}
        self.cache = st.session_state[key]
        self.names = names

    def update(self) -> dict[str, np.ndarray]:
        """Everything recorded so far, per name ([draws, ...]); {} before the first chunk."""
        new = self.store.read(
            self.run_id, since=self.cache["since"], names=self.names, series=self.series
        )
        if new:
            count = len(next(iter(new.values())))
            for name, array in new.items():
                self.cache["parts"].setdefault(name, []).append(array)
            self.cache["since"] += count
            # One array per name from now on: the concatenation happens once per new chunk.
            self.cache["parts"] = {k: [np.concatenate(v)] for k, v in self.cache["parts"].items()}
        return {k: v[0] for k, v in self.cache["parts"].items()}


def progress_bar(record: RunRecord) -> None:
    """Steps done, rate and ETA (or the training phase of an LLC run)."""
    p = record.progress or {}
    total, done = p.get("steps_total") or 0, p.get("steps_done") or 0
    fraction = min(1.0, done / total) if total else (1.0 if record.status in FINAL else 0.0)
    phase = "training to w0" if p.get("phase") == "train" else "sampling"
    eta = p.get("eta_s")
    text = f"{record.status}: {phase} {done}/{total} steps"
    if p.get("steps_per_second"):
        text += f", {p['steps_per_second']:.0f} steps/s"
    if eta is not None and record.status == "running":
        text += f", ETA {eta:.0f} s"
    st.progress(fraction, text=text)


HINTS = {
    "failed": "The run stopped with an error. Check the parameters; if the loss overflowed, "
    "lower the step size.",
    "interrupted": "Its worker died (killed or out of memory). Every flushed record is kept; "
    "submit it again, with fewer chains or steps if memory was the cause.",
    "cancelled": "Cancelled; the records up to the cancel are kept.",
}


def run_status(record: RunRecord) -> None:
    """The outcome of a finished run, with what to try when it went wrong."""
    if record.status == "completed":
        summary = record.summary or {}
        diverged = summary.get("diverged_chains") or 0
        if diverged:
            st.warning(
                f"{diverged} chain(s) diverged (NaN/Inf) and were frozen; the others are shown. "
                "Lower the step size (or raise friction) and run again.",
                icon="⚠️",
            )
        else:
            st.success("Run completed.", icon="✅")
    elif record.status in HINTS:
        message = HINTS[record.status]
        if record.error:
            st.error(f"{record.status}: {record.error}", icon="⚠️")
        st.info(message)
