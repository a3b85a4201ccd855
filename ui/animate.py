"""The animated view of runs' first steps (Playground, Compare): traced in the worker with every
proposal (``RunSpec.record.animate``), played in the browser by ``ui/animation.html``, so play,
pause, step, back and speed cost no round trip to the server."""

from __future__ import annotations

import json
import time
from pathlib import Path

import streamlit as st

from charts import animation
from runs.store import FINAL, RunRecord

from .pool import store

TEMPLATE = (Path(__file__).parent / "animation.html").read_text(encoding="utf-8")
TEACHING_STEPS = 1000  # steps traced by default: ~30 s at 30 steps a second
PANEL_HEIGHT = 500  # pixels per run in the player (its density is at most 440 square)
REDRAW_S = 2.0  # a partial player is drawn again at most this often, as its traces double


def traced_steps(steps: int) -> int:
    """The steps a page asks the worker to trace for its animation."""
    return min(steps, TEACHING_STEPS)


def _trace(record: RunRecord) -> dict | None:
    s = store()
    names = ("position", "proposal", "accepted", "path")
    try:
        arrays = {name: s.get_array(record.id, f"trace.{name}") for name in names}
    except KeyError:  # deleted meanwhile
        return None
    if arrays["proposal"] is None:
        return None
    return {k: v for k, v in arrays.items() if v is not None}


def _grown(traces: list, cached: tuple) -> bool:
    """Whether a partial player is worth drawing again: its traces have doubled in steps (or a
    run's first arrived) and it has played for REDRAW_S (a slow kernel, NUTS, traces its first
    steps over seconds; the player keeps its place across the redraw)."""
    _, _, count, steps, drawn = cached
    have = [t for t in traces if t is not None]
    if time.monotonic() - drawn < REDRAW_S or not have:
        return False
    return len(have) > count or min(len(t["proposal"]) for t in have) >= 2 * steps


def player(records: list[RunRecord], names: list[str], grid: dict, bounds, labels, log_scale: bool):
    """The player of ``records``' traced steps, one panel each: drawn as the traces stand when
    first shown, again as they double (``_grown``) and once more when complete; the player
    keeps its place across each redraw. Returns False when no run has a trace."""
    wanted = [min(r.spec.get("record", {}).get("animate", 0), r.spec["steps"]) for r in records]
    if not any(wanted):
        return False
    key = "anim:" + ",".join(r.id for r in records)
    traces = [_trace(r) for r in records]
    complete = all(
        r.status in FINAL or (t is not None and len(t["proposal"]) >= w)
        for r, t, w in zip(records, traces, wanted, strict=True)
    )
    cached = st.session_state.get(key)
    grown = cached is not None and not cached[0] and _grown(traces, cached)
    if cached is None or (complete and not cached[0]) or grown:
        panels = [
            animation.panel(name, t) for name, t in zip(names, traces, strict=True) if t is not None
        ]
        if not panels:
            if complete:  # ended (failed, say) before its first steps were traced
                return False
            st.caption("Tracing the first steps for the animation…")
            return True
        steps = min(p["T"] for p in panels)
        data = animation.payload(
            grid, bounds, labels, panels, key, log_scale, more=not complete, scroll=True
        )
        html = TEMPLATE.replace("__DATA__", json.dumps(data))
        cached = st.session_state[key] = (complete, html, len(panels), steps, time.monotonic())
    _, html, count, steps, _ = cached
    st.caption(
        f"**Animated**: the first {steps:,} steps of {count} run(s), every proposal drawn, played "
        "in your browser (green: accepted, red: rejected and the chain stays)."
    )
    st.iframe(html, height=70 + PANEL_HEIGHT * count)
    return True
