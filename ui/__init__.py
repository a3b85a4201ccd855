"""What every page shares: the store, the worker pool, widgets from the registries, live data,
the sweep tab.

The one package besides ``pages/`` that imports Streamlit. Pages stay thin by calling these:
widgets -> RunSpec -> ``submit``; ``Live`` (new records only) -> ``charts`` figures. Its modules
import their siblings directly (``from .pool import store``), never a name from this package,
which imports them.
"""

from __future__ import annotations

from .checks import OVER_BUDGET, budget_gate, formula_warning
from .live import Live, poll, progress_bar, run_label, run_status, stop_polling, sweep_progress
from .pool import (
    FIRST_RECORDS_S,
    await_first_records,
    device_name,
    ensure_pool,
    open_page,
    sidebar,
    store,
    submit,
    submit_group,
)
from .shell import legacy_guard
from .sweep_tab import FIX_FIRST, RAY_INSTALLED, SweepTab, backend_choice, submit_sweep
from .widgets import (
    DONE,
    STEP_COLUMN,
    WARNING,
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
    "FIRST_RECORDS_S",
    "FIX_FIRST",
    "OVER_BUDGET",
    "RAY_INSTALLED",
    "STEP_COLUMN",
    "WARNING",
    "Live",
    "SweepTab",
    "await_first_records",
    "backend_choice",
    "budget_gate",
    "device_name",
    "ensure_pool",
    "formula_warning",
    "keep_values",
    "kept",
    "legacy_guard",
    "number_field",
    "open_page",
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
    "submit_group",
    "submit_sweep",
    "sweep_progress",
]
