"""JSON without NaN: the one converter of Basin's numbers to what JSON can hold, for the CLI's
``--json`` and the pages' JSON views (``charts`` draws from data already made safe here)."""

from __future__ import annotations

import math
from collections.abc import Mapping


def json_safe(value):
    """``value`` with every non-finite float (NaN, Inf: a diverged run's R-hat) as None, through
    nested mappings, lists and tuples (tuples become lists, as JSON writes them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
