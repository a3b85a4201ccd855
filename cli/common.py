"""What the CLI's commands share: JSON without NaN, output paths checked before the work, and a
progress line on stderr."""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

from runs.spec import SpecError


def out_path(path: str, flag: str = "--out") -> Path:
    """``path`` as a file to write, checked before the work that fills it."""
    out = Path(path)
    if out.is_dir():
        raise SpecError(flag, f"{path} is a folder; give a file name in it")
    if not out.parent.is_dir():
        raise SpecError(flag, f"the folder {out.parent} does not exist")
    return out


def write(path: Path, write, flag: str = "--out"):
    try:
        return write(path)
    except OSError as exc:  # e.g. no permission, disk full
        raise SpecError(flag, f"cannot write {path}: {exc.strerror or exc}") from None


class StatusLine:
    """Progress on stderr: one line redrawn in place on a terminal; in a log (a pipe or file),
    where a carriage return would glue the updates into one line, a line when it changes and
    at most every ``every`` seconds, and always the final one."""

    def __init__(self, every: float = 10.0):
        self.tty, self.every = sys.stderr.isatty(), every
        self.last, self.printed, self.when = None, None, -math.inf

    def show(self, line: str, final: bool = False) -> None:
        if self.tty:
            print(f"\r\x1b[K{line}", end="", file=sys.stderr, flush=True)  # \x1b[K: clear the rest
        elif line != self.printed and (final or time.monotonic() - self.when >= self.every):
            print(line, file=sys.stderr, flush=True)
            self.printed, self.when = line, time.monotonic()
        self.last = line

    def close(self) -> None:
        if self.tty and self.last is not None:
            print(file=sys.stderr)
