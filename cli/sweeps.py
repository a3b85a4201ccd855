"""The ``sweep`` command: a study's sweep (one subcommand per study of ``studies.registry``, its
flags the study's own), run on the local pool or a Ray cluster, and run/show/delete/list of
stored sweeps."""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import threading

from cli.common import StatusLine
from cli.flags import add_spec_flags, spec_from_args
from runs.jsonsafe import json_safe
from runs.store import Store
from studies import registry, sweeps
from studies.arguments import add_backend, slots

HELP = "sweeps: the DLN benchmark, calibration, order, reprior, vi"


def add_parser(sub) -> None:
    """``sweep KIND ...`` for every study, then run, show, delete and list."""
    parser = sub.add_parser("sweep", help=HELP)
    parser.set_defaults(handler=cmd_sweep)
    kinds = parser.add_subparsers(dest="sweep", required=True)
    for study in registry.STUDIES:
        k = kinds.add_parser(study.KIND, **({"help": study.HELP} if study.HELP else {}))
        if study.SPEC_FLAGS:
            add_spec_flags(k)
        study.add_arguments(k)
    k = kinds.add_parser(
        "run", help="run a sweep's queued cells (and, with --retry-failed, its interrupted ones)"
    )
    k.add_argument("id")
    k.add_argument(
        "--retry-failed",
        dest="retry_failed",
        action="store_true",
        help="run the cells whose run was interrupted (a lost Ray task, a killed worker) or "
        "failed again; their stored rows are kept and replayed, not written twice",
    )
    k.add_argument("--slots", type=slots, help="local backend: runs at once")
    k.add_argument("--holder", type=int, help=argparse.SUPPRESS)  # the app's pid (start_driver)
    k.add_argument("--json", action="store_true")
    add_backend(k)
    for name in ("show", "delete"):
        k = kinds.add_parser(name)
        k.add_argument("id")
        if name == "show":
            k.add_argument("--json", action="store_true")
    kinds.add_parser("list")


def cmd_sweep(args: argparse.Namespace, store: Store) -> int:
    if args.sweep == "list":
        for s in store.list_sweeps():
            p = sweeps.progress(store, s)
            print(f"{s['id']}  {s['kind']:<10} {p['done']}/{p['runs']} runs done")
        return 0
    if args.sweep == "delete":
        store.delete_sweep(args.id)
        return 0
    if args.sweep == "show":
        return print_sweep(registry.results(store, args.id), args.json)
    if args.sweep == "run":
        return run_sweep(args, store, args.id, retry=args.retry_failed)
    study = registry.BY_KIND[args.sweep]
    params, cells = study.specs_from_args(args, functools.partial(spec_from_args, args))
    ray = args.backend == "ray"
    if ray:
        from runs.ray_backend import connect, start_driver

        connect(args.address)  # a cluster that cannot be reached is refused before queueing
    sweep_id = sweeps.submit(store, args.sweep, params, cells, held_by=os.getpid() if ray else None)
    print(f"{sweep_id}: {len(cells)} runs queued", file=sys.stderr)
    if args.submit_only:
        if ray:  # the runs are held for a driver that outlives this call
            start_driver(store, sweep_id, args.address)
        print(sweep_id)
        return 0
    return run_sweep(args, store, sweep_id)


def run_sweep(args: argparse.Namespace, store: Store, sweep_id: str, retry: bool = False) -> int:
    """Run a sweep's cells to their end, on the local pool or the Ray cluster, showing a line
    as runs finish; then print its results."""
    from runs.worker import supervise

    run_ids = [cell["run_id"] for cell in store.get_sweep(sweep_id)["cells"]]
    done = threading.Event()

    status = StatusLine(every=0.0)  # a line each time a run finishes

    def report() -> None:  # the supervisor holds the main thread (it owns Ctrl-C)
        watcher = Store(store.home)
        while not done.wait(1.0):
            p = sweeps.progress(watcher, watcher.get_sweep(sweep_id))
            status.show(f"{sweep_id}: {p['done']}/{p['runs']} runs done")

    thread = threading.Thread(target=report, daemon=True)
    thread.start()
    if args.backend == "ray":
        _drive_on_ray(args, store, run_ids, retry)
    else:
        if retry:  # back to the queue: a worker resumes each where its rows end
            for run_id in run_ids:
                if store.get(run_id).status in ("interrupted", "failed"):
                    store.requeue(run_id)
        supervise(str(store.home), slots=args.slots, once=True)
    done.set()
    thread.join()
    status.close()
    return print_sweep(registry.results(store, sweep_id), args.json)


def _drive_on_ray(args: argparse.Namespace, store: Store, run_ids: list[str], retry: bool) -> None:
    from runs.ray_backend import drive, take
    from runs.spec import SpecError

    held = take(store, run_ids, retry, getattr(args, "holder", None) or os.getpid())
    try:
        drive(store, held, args.address)
    except SpecError as exc:  # no cluster there: the held runs fail, saying why
        for run_id in held:
            store.finish(run_id, "failed", error=str(exc))
        raise


def print_sweep(result: dict, as_json: bool) -> int:
    """A sweep's results: as JSON, or its header line and its study's text."""
    if as_json:
        print(json.dumps(json_safe(result)))
        return 0
    p = result["progress"]
    print(f"{result['sweep_id']} ({result['kind']}): {p['done']}/{p['runs']} runs done")
    registry.BY_KIND[result["kind"]].print_text(result)
    return 0
