"""Independent pieces of a long test, run in worker processes at once: a 2-core CI machine then
does two eager runs at a time, where one process would leave a core idle (a small model's eager
step gains nothing from a second torch thread: 11.1 s a DLN estimate with one or two)."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def parallel_map(fn: Callable, items: Iterable, processes: int | None = None) -> list:
    """``[fn(item) for item in items]`` in ``processes`` spawned workers (default: the cores, at
    most 4), one torch thread each. ``fn`` must be importable: a module-level function."""
    processes = processes or max(1, min(4, os.cpu_count() or 1))
    context = multiprocessing.get_context("spawn")  # no fork of a process holding threads
    with ProcessPoolExecutor(processes, mp_context=context, initializer=_one_thread) as pool:
        return list(pool.map(fn, items))
