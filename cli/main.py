"""``python -m jobs``: run, submit, list, show, cancel, export and serve runs from the shell.

    python -m jobs run --target banana --sampler mala --param step_size=0.1 --chains 64 \\
        --steps 1000 --json                      # foreground; progress on stderr
    python -m jobs run spec.json --json          # a RunSpec as JSON
    python -m jobs submit ...                    # queue it; prints the run id
    python -m jobs worker [--slots N]            # serve the queue (the app starts one too)
    python -m jobs list | show ID [--json] [--diagnostics] | cancel ID | delete ID | resume ID
    python -m jobs export ID --format netcdf|npz --out PATH
    python -m jobs export ID --format tati --out DIR [--every-nth N]  # TATi's 3 CSV tables
    python -m jobs check                         # what is damaged in the store (exit 1 if any)
    python -m jobs cache [--clear] [--json]      # compiled chunks kept on disk (samplers.cache)
    python -m jobs evidence --target donut [--param live=400] [--json]
                                                 # nested sampling: log Z against the exact one
    python -m jobs sweep order --target harmonic --samplers gla1,gla2 --step-sizes 0.25,0.125 \\
        --observable virial --json                   # TATi's integrator-order study, slopes
    python -m jobs sweep reprior --widths 8,32,128   # repriorised vs standard ESS by width
    python -m jobs wide kl --widths 8,32,128,512 | wide slices ID   # wide networks: Hron et al.
    python -m jobs sweep dln --class tiny --problems 16 --samplers sgld,rmsprop-sgld \\
        --step-sizes 1e-8,1e-7,1e-6 --steps 5000 --json      # the DLN benchmark
    python -m jobs sweep calibrate --target dln ... --sampler sgld \\
        --step-sizes 1e-8,1e-7,1e-6 --nbetas 100,1000 --json  # step size x nbeta grid
    python -m jobs run --kind vi --target tanh --target-param n=500 --vi-param epochs=100
                                                 # a variational fit (docs/methods/vi.md)
    python -m jobs sweep vi --target tanh --target-param hidden=1 --ns 500,1000,2000,5000 \
        --source gamma --json                    # the n-scan: -Psi against log n, its slope
    python -m jobs sweep show ID [--json] | sweep list | sweep delete ID
    python -m jobs surface ID --directions pca|random|hessian --components 1,2 --grid 41 \\
        --range R --out PATH.npz --json          # the loss surface around a run's trajectory

A bad spec exits with code 2 and one message naming the field. The store is $BASIN_HOME
(default ./.basin).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
import threading

from cli import analyses, cache, evidence, sweeps
from cli import runs as run_commands
from runs.spec import SpecError
from runs.store import Store, StoreError


def build_parser() -> argparse.ArgumentParser:
    """Every command's parser; each command's module adds its own (and its handler)."""
    parser = argparse.ArgumentParser(prog="python -m jobs", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run_commands.add_parsers(sub)
    sweeps.add_parser(sub)
    analyses.add_parsers(sub)
    run_commands.add_worker_parser(sub)
    cache.add_parser(sub)
    evidence.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        store = Store()
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        return args.handler(args, store)
    except (SpecError, StoreError) as exc:  # bad input, or a damaged store: one line, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 2
    finally:  # closed here, not at teardown (``run`` skips it): SQLite folds each WAL back
        with contextlib.suppress(Exception):
            store.close()


def run() -> None:
    """The process entry (``python -m jobs``, ``basin``): main's exit code as the process's."""
    try:
        code = main()
    except SystemExit as exc:  # argparse's --help and usage errors: the same quick exit
        code = exc.code
    if any(t.name == "basin-compile" and t.is_alive() for t in threading.enumerate()):
        # a compile still running in the background (samplers.compiled): torch's C++ aborted
        # the interpreter's teardown under it (exit 134 after a completed run), so leave now
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    # the interpreter's teardown then skips collecting every torch object one by one (0.5 s
    # of a short run's process on a small machine; bench/RESULTS.md): nothing is left to use
    gc.freeze()
    sys.exit(code)
