"""The run loop's clock, one for every run kind (a sampling run's blocks, a vi fit's epochs): when
records reach the store, when progress is reported, and where a cancel is looked at; and the
append that lets a resumed run replay without writing twice what the store already holds."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from runs.store import Progress, Store

FLUSH_SECONDS = 0.5  # records reach the store (and the live view) at least this often


def progress(done: int, total: int, seconds: float, since: int = 0, phase: str = "sample"):
    """``done`` of ``total`` steps, at the rate of the ``done - since`` steps in ``seconds``."""
    rate = (done - since) / seconds if seconds > 0 else 0.0
    eta = (total - done) / rate if rate > 0 else None
    return Progress(done, total, rate, eta, phase)


class Pace:
    """One run's flush clock: ``late`` once FLUSH_SECONDS passed since the last flush;
    ``flushed`` reports progress (to the store and ``on_progress``) when asked or FLUSH_SECONDS
    after the last report, at the rate since it; ``stop`` asks ``should_stop`` (a cancel)."""

    def __init__(
        self,
        store: Store,
        run_id: str,
        total: int,
        phase: str,
        should_stop: Callable[[], bool],
        on_progress: Callable[[Progress], None] | None = None,
    ):
        self.store, self.run_id, self.total, self.phase = store, run_id, total, phase
        self.should_stop, self.on_progress = should_stop, on_progress
        self.begin()

    def begin(self) -> float:
        """The clock starts now (a run's first block or epoch): returns the time."""
        self.last_flush = self.last_report = time.perf_counter()
        self.since = 0  # steps done at the last report
        return self.last_flush

    def late(self) -> bool:
        return time.perf_counter() - self.last_flush >= FLUSH_SECONDS

    def flushed(self, done: int, report: bool = False) -> None:
        """A flush just ended with ``done`` steps done; progress follows when ``report`` or due."""
        self.last_flush = now = time.perf_counter()
        if report or now - self.last_report >= FLUSH_SECONDS:
            # the rate since the last report: a training or the first block would skew it
            self.report(done, now - self.last_report, self.since)
            self.last_report, self.since = now, done

    def report(
        self,
        done: int,
        seconds: float,
        since: int = 0,
        total: int | None = None,
        phase: str | None = None,
    ) -> None:
        """``done`` steps (of ``total``, in ``phase``: the run's own unless given) at the rate
        of the ``done - since`` steps in ``seconds``."""
        total = self.total if total is None else total
        phase = phase or self.phase
        now = progress(done, total, seconds, since, phase)
        self.store.set_progress(self.run_id, now.as_dict())
        if self.on_progress:
            self.on_progress(now)

    def stop(self) -> bool:
        return self.should_stop()


def append_unstored(
    store: Store,
    run_id: str,
    series: str,
    start: int,
    parts: dict[str, list[np.ndarray]],
    stored: int,
) -> int:
    """Append the chunk's rows (``parts``, from row ``start``) that the store does not hold yet,
    ``stored`` rows of ``series`` being there before the run began; returns the new end."""
    n = sum(len(part) for part in next(iter(parts.values())))
    skip = min(max(0, stored - start), n)
    if skip < n:
        if skip:  # a resumed run's replay reaches the records stored before it stopped
            joined = {name: np.concatenate(pieces)[skip:] for name, pieces in parts.items()}
            parts = {name: [rows] for name, rows in joined.items()}
        store.append(run_id, start + skip, parts, series)
    return start + n
