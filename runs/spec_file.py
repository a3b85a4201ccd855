"""A run spec's file, read with bounds: a regular file only (a FIFO with no writer would block),
at most ``MAX_SPEC_BYTES``, nested at most ``MAX_SPEC_DEPTH`` deep."""

from __future__ import annotations

import json
import os
from typing import Any

from runs.spec import MAX_SPEC_BYTES, MAX_SPEC_DEPTH, SpecError, human_bytes


def read_spec_file(path: str) -> Any:
    """The JSON value in the file ``path``; a SpecError on "spec" when it cannot be read, is
    larger than MAX_SPEC_BYTES (found before it is read whole) or nested deeper than
    MAX_SPEC_DEPTH."""
    deep = f"{path} is nested deeper than {MAX_SPEC_DEPTH} levels"
    try:  # a regular file only, seen before it is opened: a FIFO with no writer blocks open()
        if os.path.exists(path) and not os.path.isfile(path):
            raise SpecError("spec", f"{path} is not a regular file (a FIFO, device or folder)")
        with open(path, "rb") as f:
            raw = f.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        raise SpecError("spec", f"cannot read {path}: {exc}") from None
    if len(raw) > MAX_SPEC_BYTES:
        size = human_bytes(os.stat(path).st_size)
        limit = f"over the {MAX_SPEC_BYTES >> 20} MiB a spec file may hold"
        raise SpecError("spec", f"{path} is {size}, {limit}")
    try:
        data = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise SpecError("spec", deep) from None
    except ValueError as exc:  # not UTF-8, not JSON, an integer of over 4300 digits
        raise SpecError("spec", f"cannot read {path}: {exc}") from None
    if _depth(data) > MAX_SPEC_DEPTH:
        raise SpecError("spec", deep)
    return data


def _depth(value: Any) -> int:
    """How deeply JSON lists and objects nest in ``value`` (a number 0, [1] 1), no recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level + 1)
            stack += [(v, level + 1) for v in (item.values() if isinstance(item, dict) else item)]
    return deepest
