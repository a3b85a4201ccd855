"""Live views of a run: its records fetched incrementally, its progress and its outcome."""

from __future__ import annotations

import numpy as np
import streamlit as st

from charts import table
from runs.store import RunRecord, Store

from .widgets import DONE, WARNING, plain

FINAL = ("completed", "cancelled", "failed", "interrupted")


class Live:
    """A run's records so far, kept in the session and extended with only what is new at each
    rerun (``Store.read(since=k)``), so a fragment polling every half second stays cheap: new
    rows go into buffers that double when full, so a long run is never copied whole per poll."""

    def __init__(self, store: Store, run_id: str, series: str = "records", names=None):
        self.store, self.run_id, self.series = store, run_id, series
        key = f"live:{run_id}:{series}:{names}"
        if key not in st.session_state:
            st.session_state[key] = {"since": 0, "buffers": {}}
        self.cache = st.session_state[key]
        self.names = names

    def update(self) -> dict[str, np.ndarray]:
        """Everything recorded so far, per name ([draws, ...]); {} before the first chunk."""
        cache = self.cache
        new = self.store.read(
            self.run_id, since=cache["since"], names=self.names, series=self.series
        )
        count = len(next(iter(new.values()))) if new else 0
        if count:
            end = cache["since"] + count
            for name, rows in new.items():
                buffer = cache["buffers"].get(name)
                if buffer is None or len(buffer) < end:
                    grown = np.empty(
                        (max(end, 2 * cache["since"], 64), *rows.shape[1:]), rows.dtype
                    )
                    if buffer is not None:
                        grown[: cache["since"]] = buffer[: cache["since"]]
                    buffer = cache["buffers"][name] = grown
                buffer[cache["since"] : end] = rows
            cache["since"] = end
        return {name: buffer[: cache["since"]] for name, buffer in cache["buffers"].items()}


def poll(view, key: str, ident: str, done: bool, every: float, *args) -> None:
    """Draw ``view(*args)`` as a fragment that reruns itself every ``every`` s until ``done``.

    ``view`` calls ``stop_polling(key, ident, done)`` first: when what it watches has ended, a
    single full rerun redraws the page without the timer (a fragment cannot drop its own)."""
    st.session_state[key] = None if done else ident
    st.fragment(view, run_every=None if done else every)(*args)


def stop_polling(key: str, ident: str, done: bool) -> None:
    """Inside a ``poll`` view: rerun the page once when ``ident`` is done (see ``poll``)."""
    if done and st.session_state.get(key) == ident:
        st.session_state[key] = None
        st.rerun()


def watch(
    prefix: str,
    label: str,
    choices: dict[str, str],
    empty: str,
    view,
    done,
    every: float,
    controls=None,
    aside=None,
) -> tuple[str | None, tuple]:
    """What every live page repeats: pick one of ``choices`` (id -> label, newest first) in
    the selectbox ``{prefix}.shown``, then draw ``view(*args)`` polled every ``every`` s
    (``poll`` under ``{prefix}.polling``) until ``done(id)``. ``aside(id, column)`` fills a
    narrow column beside the selectbox; ``controls(id)`` draws the view's own widgets below it
    and returns its args (default: the id). A choice that is gone (deleted) is forgotten, and
    ``empty`` is shown when there is none. Returns (the id or None, the args)."""
    key = f"{prefix}.shown"
    if st.session_state.get(key) not in choices:
        st.session_state.pop(key, None)
    if not choices:
        st.info(empty)
        return None, ()
    box, side = st.columns([3, 1]) if aside else (st, None)
    shown = box.selectbox(label, list(choices), format_func=choices.get, key=key)
    if aside:
        aside(shown, side)
    args = controls(shown) if controls else (shown,)
    poll(view, f"{prefix}.polling", shown, done(shown), every, *args)
    return shown, args


def run_label(record: RunRecord) -> str:
    """A run in a selectbox or multiselect: id, target and sampler. No status: the browser
    matches a selection on its label, so a run that finished or was cancelled while chosen
    was dropped from the choice (the Runs page closed it under the user's eyes)."""
    return f"{record.id} · {table.target(record.spec)} / {table.method(record.spec)}"


def run_choices(records) -> dict[str, str]:
    """Runs for ``watch``: id -> id, target, sampler, chains x steps. No status, as in
    ``run_label``: a selectbox keeps its first label, so it would stay "queued"."""
    return {
        r.id: f"{r.id} · {table.target(r.spec)} · {table.method(r.spec)} · " + _size(r.spec)
        for r in records
    }


def _size(spec: dict) -> str:
    """A run's size in its own units: epochs of a fit, live points of nested sampling, chains
    and steps of a sampling run."""
    kind = spec.get("kind")
    if kind == "vi":
        return f"{spec['vi']['epochs']} epochs"
    if kind == "nested":
        return f"{(spec.get('nested') or {}).get('live', '?')} live points"
    return f"{spec['chains']} chains × {spec['steps']} steps"


def delete_button(label: str, key: str, delete):
    """An ``aside`` for ``watch``: a button that deletes the item shown (``delete(id)``)."""

    def aside(ident: str, side) -> None:
        if side.button(label, key=key):
            delete(ident)
            st.rerun()

    return aside


def progress_bar(record: RunRecord) -> None:
    """Steps done, rate and ETA (or the training phase of an LLC run)."""
    p = record.progress or {}
    total, done = p.get("steps_total") or 0, p.get("steps_done") or 0
    fraction = min(1.0, done / total) if total else (1.0 if record.status in FINAL else 0.0)
    phase = "training to w0" if p.get("phase") == "train" else "sampling"
    if record.status == "queued":
        phase = "waiting for a worker,"
    eta = p.get("eta_s")
    text = f"{record.status}: {phase} {done}/{total} steps"
    if p.get("steps_per_second"):
        text += f", {p['steps_per_second']:.0f} steps/s"
    if eta is not None and record.status == "running":
        text += f", ETA {eta:.0f} s"
    st.progress(fraction, text=text)


def sweep_progress(progress: dict) -> None:
    """A sweep's runs done, by status, with a warning when some ended badly."""
    by_status = ", ".join(f"{n} {s}" for s, n in sorted(progress["by_status"].items()))
    st.progress(
        progress["done"] / max(progress["runs"], 1),
        text=f"{progress['done']}/{progress['runs']} runs done ({by_status})",
    )
    bad = {s: n for s, n in progress["by_status"].items() if s in ("failed", "interrupted")}
    if bad:
        st.warning(
            f"{sum(bad.values())} run(s) {' or '.join(bad)}: see them on the Runs page.",
            icon=WARNING,
        )


HINTS = {
    "failed": "The run stopped with an error. Check the parameters; if the loss overflowed, "
    "lower the step size.",
    "interrupted": "Its worker died (killed or out of memory). Every flushed record is kept; "
    "submit it again, with fewer chains or steps if memory was the cause.",
    "cancelled": "Cancelled; the records up to the cancel are kept.",
}


VERDICT_TEXT = {
    "good": "its R-hat, ESS, acceptance and stuck chains (and KS against the exact sampler, "
    "where there is one) are all within their limits",
    "warn": "usable with care",
    "fail": "do not trust these draws",
}


def verdict_box(verdict: dict, status: str = "completed") -> None:
    """A verdict in colour: green good, amber warn, red fail, each signal with what to try."""
    word = verdict["status"]
    said = verdict.get("checked") if word == "good" else None  # a run kind's own checks
    head = f"{status.capitalize()} · verdict **{word}**: {said or VERDICT_TEXT[word]}."
    lines = [
        f"- **{plain(s['code'])}** ({plain(s['status'])}): {plain(s['message'])}."
        + (f" *Try:* {plain(s['try'])}." if s["try"] else "")  # a warning's advice is its message
        for s in verdict["signals"]
    ]
    text = "\n".join([head, *lines])
    if verdict["status"] == "good":
        st.success(text, icon=DONE)
    elif verdict["status"] == "warn":
        st.warning(text, icon=WARNING)
    else:
        st.error(text, icon=WARNING)


def timing(record: RunRecord) -> None:
    """How long a finished sampling run took, and whether its steps ran compiled: a kernel
    compiled once for a target starts compiled in every later run (docs/library.md)."""
    summary = record.summary or {}
    if summary.get("seconds") is None or "compiled" not in summary:
        return
    how = "compiled steps" if summary["compiled"] else "eager steps"
    st.caption(
        f"{summary['seconds']:.2f} s, {summary.get('steps_per_second', 0):,.0f} steps/s, {how} "
        f"(compiled: {str(bool(summary['compiled'])).lower()})"
    )


def run_status(record: RunRecord) -> None:
    """The outcome of a finished run, with what to try when it went wrong: its verdict when it
    has one (every run since verdicts exist), else what its summary says."""
    verdict = (record.summary or {}).get("verdict")
    timing(record)
    if record.status in ("completed", "cancelled") and verdict:
        verdict_box(verdict, record.status)
        if record.status == "cancelled":
            st.info(HINTS["cancelled"])
    elif record.status == "completed":
        summary = record.summary or {}
        diverged = summary.get("diverged_chains") or 0
        if diverged:
            chains = record.spec.get("chains")
            if diverged == chains:
                what = "Every chain diverged (NaN/Inf) and was frozen: there are no draws to show."
            else:
                what = f"{diverged} of {chains} chains diverged (NaN/Inf) and were frozen; "
                what += "the rest are drawn."
            st.warning(
                f"{what} Lower the step size (or raise friction) and run again.", icon=WARNING
            )
        for warning in summary.get("warnings", []):  # known biases, no acceptance
            if warning["code"] != "all_diverged":  # said above, with what to try
                st.warning(f"Completed, but {plain(warning['message'])}.", icon=WARNING)
        if not diverged and not summary.get("warnings"):
            st.success("Run completed.", icon=DONE)
    elif record.status in HINTS:
        message = HINTS[record.status]
        if record.error:
            st.error(f"{record.status}: {plain(record.error)}", icon=WARNING)  # echoes input
        st.info(message)
