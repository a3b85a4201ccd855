"""Said before Run: a run's size and time against the budget, and what a typed formula means."""

from __future__ import annotations

import streamlit as st

from landscapes import ParamError
from landscapes.formula import normalisable
from runs import budget
from runs.budget import estimate
from runs.spec import SpecError, parse_spec

from .pool import store
from .widgets import WARNING, plain

OVER_BUDGET = "Over budget: tick “Run anyway” above, or make the run smaller; nothing was queued."


def budget_gate(specs: list[dict], prefix: str, thin: bool = True) -> bool:
    """Under a page's run-length fields: the size and time of the run (or of the group, which
    shares one budget) before Run, "~R records x C chains, ~B on disk, ~S s"
    (``runs.budget.estimate``, ``runs.budget.estimate_seconds``). Over a budget
    (``budget.over_budget``) it says which and what to lower, and draws a checkbox "Run
    anyway" (key ``{prefix}.confirm_big``), cleared whenever the size it names changes.
    Returns whether Run may queue them: within budget, or ticked. ``thin``: whether the page
    has a thin field to suggest. A spec the RunSpec refuses passes here: Run shows that error
    (``ui.submit``)."""
    if not specs:
        return True
    size = seconds = 0.0
    try:
        for spec in specs:
            est = estimate(parse_spec(spec))
            size += est.store_bytes
            seconds += budget.estimate_seconds(spec, store())
    except (SpecError, ParamError):
        return True
    chains = specs[0].get("chains")
    disk, duration = f"~{_size(size)}", f"~{seconds:,.0f} s"
    runs = f" in all ({len(specs)} runs)" if len(specs) > 1 else ""
    st.caption(
        f"Estimate: ~{est.records:,} records × {chains:,} chains{' per run' if runs else ''}, "
        f"{disk} on disk, {duration}{runs}."
    )
    over = budget.over_budget(size, seconds, thin)
    if not over:
        return True
    st.warning("Over budget: " + "; ".join(over) + ".", icon=WARNING)
    key, label = f"{prefix}.confirm_big", f"Run anyway: {disk}, {duration}"
    named = f"{key}.named"  # the size a tick confirmed: a bigger run asks again
    if st.session_state.get(named) != label:
        st.session_state[named] = label
        st.session_state[key] = False
    return st.checkbox(label, key=key)


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:,.0f} {unit}" if n >= 10 or unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} TiB"


@st.cache_data(max_entries=64, show_spinner=False)
def _normalisable(formula: str, dim: int, bounds: tuple) -> str | None:
    return normalisable(formula, dim, bounds)


def formula_warning(formula: str, dim: int, bounds) -> None:
    """A warning, where a typed formula's exp(-U) may not be normalisable
    (``landscapes.formula.normalisable``): said before Run, which stays allowed."""
    bounds = None if bounds is None else tuple(tuple(map(float, pair)) for pair in bounds)
    message = _normalisable(formula, dim, bounds)
    if message:
        st.warning(f"**custom.formula**: {plain(message)}", icon=WARNING)
