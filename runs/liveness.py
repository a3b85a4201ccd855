"""Whether a process still runs, and whether it is the one we mean: a pid and its start time.

A pid alone could name a stranger (the process died and the system gave its pid to another), so
the pool's supervisor and the app that owns it are named by pid and start time, read through
psutil on every system. A start time is written as psutil's create_time (seconds since the epoch,
``repr`` of the float); one an older Basin wrote (Linux's clock ticks after boot, Windows'
FILETIME, or ``ps -o lstart`` in UTC) is read as the same instant, so an existing
$BASIN_HOME/supervisor.pid is still understood.
"""

from __future__ import annotations

import calendar
import os
import time

import psutil

# Two readings of one process's start agree to float rounding; two processes' starts are a clock
# tick (10 ms on Linux) or more apart, so half a tick tells them apart.
SAME_START_S = 0.005
FILETIME_FLOOR = 10**15  # a count of ticks above this is Windows' FILETIME, not Linux's after boot
FILETIME_EPOCH_S = 11_644_473_600  # seconds from 1601-01-01 (FILETIME's zero) to 1970-01-01


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (a POSIX zombie counts until it is reaped)."""
    try:
        return psutil.pid_exists(pid)
    except (ValueError, OSError):
        return False


def started(pid: int) -> str | None:
    """When process ``pid`` started, as text for a pid file; None if it cannot be read (gone,
    or not ours to query). A pid is reused only after its process ended, so pid and start time
    name one process."""
    seconds = _create_time(pid)
    return None if seconds is None else repr(seconds)


def same_start(pid: int, recorded: str) -> bool | None:
    """Whether process ``pid`` started at ``recorded`` (``started``'s text, or an older
    Basin's); None when either cannot be read, for the caller to decide."""
    now, (then, within) = _create_time(pid), _seconds(recorded)
    if now is None or then is None:
        return None
    return 0 <= now - then < within if within else abs(now - then) < SAME_START_S


def _create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, ValueError, OSError):
        return None


def _seconds(text: str) -> tuple[float | None, float]:
    """A recorded start time in seconds since the epoch, and the width of the second it names
    when it was written to the second (0 when exact): psutil's float, or an older Basin's Linux
    clock ticks after boot, Windows FILETIME (100 ns ticks since 1601) or ps's lstart."""
    text = " ".join(str(text).split())
    try:
        value = float(text)
    except ValueError:
        try:  # 'Mon Jan  1 00:00:00 2024', written in UTC, to the second
            return float(calendar.timegm(time.strptime(text, "%a %b %d %H:%M:%S %Y"))), 1.0
        except ValueError:
            return None, 0.0  # "None": the start time could not be read when it was written
    if not text.isdigit():  # a float's repr: this version's
        return value, 0.0
    if value > FILETIME_FLOOR:
        return value / 1e7 - FILETIME_EPOCH_S, 0.0
    if not hasattr(os, "sysconf"):
        return None, 0.0
    return psutil.boot_time() + value / os.sysconf("SC_CLK_TCK"), 0.0
