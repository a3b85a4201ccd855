"""The CLI for tests: ``jobs`` runs ``python -m jobs ARGV`` in this process, ``process`` in a
fresh interpreter.

A fresh interpreter pays 2-3 s of imports (torch) per call, and the suite made about 60 of
them. ``jobs`` calls ``cli.main.main`` instead and returns what ``subprocess.run`` would: the
exit code (an uncaught exception prints its traceback and exits 1, as an interpreter does) and
the text written to stdout and stderr. It leaves the process as it found it: the environment,
the working folder, the signal handlers (``worker`` sets SIGTERM's), torch's thread count and
global RNG (a variational fit seeds it), and the warning filters. ``process`` is for the tests
whose point is the process itself: a kill, a crash that must not take pytest down, a timeout.
(Not ``tests/cli.py``: this folder comes first on sys.path and would hide the ``cli`` package.)
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import threading
import traceback
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
SIGNALS = [getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGBREAK") if hasattr(signal, n)]


def jobs(home: str | os.PathLike, *argv: str) -> subprocess.CompletedProcess:
    """``python -m jobs *argv`` with BASIN_HOME=home, in this process."""
    from cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with _restored():
        os.environ["BASIN_HOME"] = str(home)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as exc:  # argparse's errors, --help, sys.exit
                code = _exit_code(exc.code)
            except Exception:  # what the interpreter does with an uncaught exception
                traceback.print_exc()
                code = 1
    return subprocess.CompletedProcess(["jobs", *argv], code, out.getvalue(), err.getvalue())


def process(
    home: str | os.PathLike, *argv: str, timeout: float = 300, env: dict | None = None
) -> subprocess.CompletedProcess:
    """``python -m jobs *argv`` with BASIN_HOME=home, in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-m", "jobs", *argv],
        cwd=ROOT,
        env={**os.environ, "BASIN_HOME": str(home), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # sys.exit("message"): printed, exit 1
    return 1


@contextlib.contextmanager
def _restored():
    """The process-wide state a command may change, put back as it was."""
    environ, cwd = dict(os.environ), os.getcwd()
    handlers = [(s, signal.getsignal(s)) for s in SIGNALS]
    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    try:
        with warnings.catch_warnings():
            yield
    finally:
        if os.environ != environ:
            os.environ.clear()
            os.environ.update(environ)
        os.chdir(cwd)
        if threading.current_thread() is threading.main_thread():  # only there can they change
            for s, handler in handlers:
                if signal.getsignal(s) is not handler and handler is not None:
                    signal.signal(s, handler)
        torch.set_num_threads(threads)
        torch.set_rng_state(rng)
