"""The commands on single runs: run, submit, resume, list, show, cancel, delete, export, check,
and the worker that serves the queue."""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import sqlite3
import sys
from pathlib import Path

from cli.common import StatusLine, out_path, write
from cli.flags import add_spec_flags, spec_from_args
from runs.budget import check_budget
from runs.build import check_files
from runs.jsonsafe import json_safe
from runs.spec import SpecError, parse_spec
from runs.store import RESUMABLE, DamagedStore, LostClaim, Store, StoreError
from studies.arguments import slots
from studies.predictive import predictive_lines


def validated(args: argparse.Namespace):
    spec = parse_spec(spec_from_args(args))
    check_budget(spec)
    return spec


def cmd_run(args: argparse.Namespace, store: Store) -> int:
    spec = validated(args)
    run_id = store.create(spec.model_dump(mode="json"))
    return _foreground(args, store, run_id, spec)


def cmd_resume(args: argparse.Namespace, store: Store) -> int:
    """An interrupted (or cancelled) run, continued here: it replays its steps from the seed
    without writing what the store holds, then records the rest (``runs.loop``). The run is
    taken in one step (interrupted or cancelled -> running here), so of two resumes at once
    one runs it and the other exits 2."""
    record, taken = store.get(args.id), False
    if record.status in RESUMABLE:
        spec = parse_spec(record.spec)
        check_files(spec)  # a model's factory gone: said here, and the run stays resumable
        if store.hold(args.id, os.getpid(), RESUMABLE):
            return _foreground(args, store, args.id, spec, held=True)
        record, taken = store.get(args.id), True  # another process took it just now
    if taken or record.status in ("queued", "running"):
        by = f", process {record.worker_pid}" if record.worker_pid else ""
        why = f"is already being resumed or run (now {record.status}{by})"
    else:
        why = f"is {record.status}"
    only = "only interrupted or cancelled runs can be resumed"
    print(f"resume: run {args.id} {why}; {only}", file=sys.stderr)
    return 2


def _foreground(
    args: argparse.Namespace, store: Store, run_id: str, spec, held: bool = False
) -> int:
    """Run ``run_id`` in this process (``held``: this Store holds it already, a resume's),
    progress on stderr, the summary on stdout."""
    from landscapes import ParamError
    from runs.loop import execute
    from runs.worker import cancelled, default_slots, disk_full, heartbeat, torch_threads

    record = store.get(run_id) if held else store.claim(os.getpid(), run_id)
    if record is None:  # a worker of this store took the queued run first
        raise LostClaim(f"run {run_id} was taken by a worker; `python -m jobs show {run_id}`")
    status = StatusLine()

    def report(p) -> None:
        eta = "?" if p.eta_s is None else f"{p.eta_s:.0f} s"
        unit = "epochs" if p.phase == "fit" else "steps"  # a vi run's progress is its epochs
        line = f"{run_id}: {p.steps_done}/{p.steps_total} {unit}, {p.steps_per_second:.3g} {unit}/s"
        status.show(f"{line}, ETA {eta}", final=p.steps_done == p.steps_total)

    threads = torch_threads(default_slots()[1])  # as a worker runs it (runs.worker)
    try:
        with heartbeat(store, run_id), threads:
            summary = execute(spec, store, record.id, cancelled(store, run_id), report)
    except KeyboardInterrupt:
        store.finish(run_id, "cancelled", error="interrupted from the keyboard")
        status.close()
        print(f"{run_id} cancelled", file=sys.stderr)
        return 130
    except BaseException as exc:
        status.close()
        if disk_full(exc):  # a clear line, not a traceback; the flushed records stay readable
            error = f"disk full: {store.records(run_id)} records kept ({exc})"
            with contextlib.suppress(OSError, sqlite3.Error):
                store.finish(run_id, "failed", error=error)
            print(f"{run_id} failed: {error}", file=sys.stderr)
            return 1
        store.finish(run_id, "failed", error=f"{type(exc).__name__}: {exc}")
        if isinstance(exc, ParamError):  # one line, as at submit, not a traceback
            raise SpecError(exc.field, str(exc).removeprefix(f"{exc.field}: ")) from None
        raise
    status.close()
    if not store.finish(run_id, summary["status"], summary=summary):  # taken over meanwhile
        print(f"{run_id}: taken over by another process, which ends it", file=sys.stderr)
        return 2
    for warning in summary["warnings"]:
        print(f"warning: {warning['code']}: {warning['message']}", file=sys.stderr)
    if args.json:
        print(json.dumps(json_safe(summary)))
    else:
        print(f"{run_id} {summary['status']} in {summary['seconds']:.2f} s")
        _print_verdict(summary.get("verdict"))
        _print_observables(summary)
    return 0


def _print_verdict(verdict: dict | None) -> None:
    """The verdict's status, then each signal with what to try, a line each."""
    if verdict:
        print(f"verdict: {verdict['status']}")
        for s in verdict["signals"]:
            advice = f"; try {s['try']}" if s["try"] else ""  # a warning's advice is its message
            print(f"  {s['status']}: {s['message']}{advice}")


def _print_observables(summary) -> None:
    """The observables a plain-text summary spells out, a line each (the JSON has them all)."""
    observables = summary.get("observables") if isinstance(summary, dict) else None
    if isinstance(observables, dict) and isinstance(observables.get("predictive"), dict):
        for line in predictive_lines(observables["predictive"]):
            print(line)


def cmd_submit(args: argparse.Namespace, store: Store) -> int:
    spec = validated(args)
    print(store.create(spec.model_dump(mode="json")))
    return 0


def _store_errors(command):
    """A damaged store file, row or record as one line naming it (exit 2), not a traceback."""

    @functools.wraps(command)
    def guarded(args: argparse.Namespace, store: Store) -> int:
        try:
            return command(args, store)
        except StoreError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2

    return guarded


def _name(spec: dict, role: str) -> str:
    """The spec's target or sampler name ("vi" for a variational fit); "?" where a stored spec
    lacks it."""
    if role == "sampler" and spec.get("kind") in ("vi", "nested"):
        return spec["kind"]
    part = spec.get(role)
    return str(part.get("name", "?")) if isinstance(part, dict) else "?"


def _show(record) -> dict:
    return {
        "run_id": record.id,
        "status": record.status,
        "target": _name(record.spec, "target"),
        "sampler": _name(record.spec, "sampler"),
        "created": record.created,
        "started": record.started,
        "finished": record.finished,
        "progress": record.progress,
        "worker_pid": record.worker_pid,
        "error": record.error,
        "summary": record.summary,
        "verdict": (record.summary or {}).get("verdict"),  # also at the top: scripts read it
    }


@_store_errors
def cmd_list(args: argparse.Namespace, store: Store) -> int:
    store.mark_stale()
    for r in store.entries():
        if isinstance(r, DamagedStore):  # one damaged row hides no other run
            print(f"{r.run_id}  {'damaged':<11} {str(r).removeprefix(f'run {r.run_id}: ')}")
            continue
        done, total = r.progress.get("steps_done"), r.progress.get("steps_total")
        target, sampler = _name(r.spec, "target"), _name(r.spec, "sampler")
        print(f"{r.id}  {r.status:<11} {target:<16} {sampler:<12} {done}/{total}")
    return 0


@_store_errors
def cmd_check(args: argparse.Namespace, store: Store) -> int:
    problems = store.check()
    for line in problems:
        print(line)
    if not problems:
        print(f"{store.home}: no damage found")
    return 1 if problems else 0


@_store_errors
def cmd_show(args: argparse.Namespace, store: Store) -> int:
    store.mark_stale()
    info = _show(store.get(args.id))
    table = None
    if args.diagnostics:  # before printing anything: a run without positions exits 2 alone
        from studies import diagnostics

        table = diagnostics.diagnostics_table(store, args.id)
    if args.json:
        print(json.dumps(json_safe(info if table is None else {**info, "diagnostics": table})))
        return 0
    for key, value in info.items():
        if key != "verdict":
            print(f"{key}: {value}")
    _print_verdict(info["verdict"])
    _print_observables(info["summary"])
    if table is not None:
        print(f"\n{diagnostics.diagnostics_text(table)}")
    return 0


def cmd_cancel(args: argparse.Namespace, store: Store) -> int:
    store.request_cancel(args.id)
    return 0


def cmd_delete(args: argparse.Namespace, store: Store) -> int:
    store.delete(args.id)
    return 0


@_store_errors
def cmd_export(args: argparse.Namespace, store: Store) -> int:
    """Exit 1 when damaged records were left out of the file (each range named on stderr)."""
    if store.get(args.id).spec.get("kind") == "vi" and args.format != "npz":
        raise SpecError(
            "--format",
            f"run {args.id} is a vi run: it records its objective per epoch (epoch, "
            f"objective), not draws, so {args.format} has nothing to hold; use --format npz",
        )
    if store.get(args.id).spec.get("kind") == "nested" and args.format != "npz":
        raise SpecError(
            "--format",
            f"run {args.id} is a nested run: it records weighted points (iteration, position, "
            f"log_l, log_weight), not chains of draws, so {args.format} has nothing to hold; "
            "use --format npz",
        )
    if args.format == "tati":
        return _export_tati(args, store)
    if args.every_nth is not None:
        raise SpecError("--every-nth", f"applies to --format tati only, not {args.format}")
    record = store.get(args.id)
    try:
        spec = parse_spec(record.spec)
    except SpecError as exc:
        raise SpecError("id", f"run {args.id} has an invalid stored spec ({exc})") from None
    burn = math.ceil(spec.burn_in / spec.thin)  # the store keeps every thin-th step already
    if store.records(args.id) <= burn:
        kept = "no records yet" if record.status in ("queued", "running") else "no records"
        after = " after its burn-in" if burn else ""
        raise SpecError("id", f"run {args.id} has {kept}{after} (status {record.status})")
    export = store.export_netcdf if args.format == "netcdf" else store.export_npz
    out = out_path(args.out)
    if out.exists() and not out.is_file():  # /dev/null, a pipe: nothing can be renamed onto it
        raise SpecError(
            "--out",
            f"{args.out} is not a regular file (a pipe or device): an export is written to a "
            "temporary file beside its target and renamed onto it; give a file path",
        )
    damaged = []
    print(write(out, lambda path: export(args.id, path, burn_in=burn, damaged=damaged)))
    for first, last, why in damaged:
        print(
            f"warning: run {args.id}: records {first}-{last} left out of the export ({why})",
            file=sys.stderr,
        )
    return 1 if damaged else 0


def _export_tati(args: argparse.Namespace, store: Store) -> int:
    """TATi's three CSV tables into the folder ``--out`` (created if missing), one path a line."""
    from studies import tati

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        files = ", ".join(tati.FILES)
        raise SpecError("--out", f"{args.out} is a file: --format tati writes {files} in a folder")
    every = 1 if args.every_nth is None else args.every_nth
    for path in write(out, lambda folder: tati.export(store, args.id, folder, every)):
        print(path)
    return 0


def cmd_worker(args: argparse.Namespace, store: Store) -> int:
    from runs.pool import serve  # with --owner: it stops once every app sharing it has ended

    serve(str(store.home), slots=args.slots, once=args.once, owner=args.owner)
    return 0


# -- their parsers --------------------------------------------------------------------------------


def add_parsers(sub) -> None:
    """run, submit, list, show, cancel, delete, resume, export and check."""
    for name, command in (("run", cmd_run), ("submit", cmd_submit)):
        p = sub.add_parser(name)
        add_spec_flags(p)
        p.set_defaults(handler=command)
    sub.add_parser("list").set_defaults(handler=cmd_list)
    show = sub.add_parser("show")
    show.add_argument("id")
    show.add_argument("--json", action="store_true")
    show.add_argument(
        "--diagnostics",
        action="store_true",
        help="the Playground's diagnostics table: moments, tails, KS against the exact "
        "sampler, ESS and R-hat per coordinate (JSON: a 'diagnostics' field)",
    )
    show.set_defaults(handler=cmd_show)
    for name, command in (("cancel", cmd_cancel), ("delete", cmd_delete)):
        p = sub.add_parser(name)
        p.add_argument("id")
        p.set_defaults(handler=command)
    resume = sub.add_parser("resume", help="continue an interrupted run where its records end")
    resume.add_argument("id")
    resume.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    resume.set_defaults(handler=cmd_resume)
    export = sub.add_parser("export")
    export.add_argument("id")
    export.add_argument("--format", choices=("netcdf", "npz", "tati"), default="npz")
    export.add_argument("--out", required=True, help="a file; for tati a folder")
    export.add_argument(
        "--every-nth",
        dest="every_nth",
        type=int,
        help="tati: a row every N steps (1, the default: every stored record; else a "
        "multiple of the run's thin)",
    )
    export.set_defaults(handler=cmd_export)
    check = sub.add_parser(
        "check", help="list what is damaged in the store; exit 1 when anything is"
    )
    check.set_defaults(handler=cmd_check)


def add_worker_parser(sub) -> None:
    worker = sub.add_parser("worker")
    worker.add_argument(
        "--slots", type=slots, help="runs at once, >= 1 (default: one per GPU, or one per core)"
    )
    worker.add_argument("--once", action="store_true", help="exit when the queue is empty")
    worker.add_argument(
        "--owner",
        help="PID:START of the process that started it (the app): stop when it is gone",
    )
    worker.set_defaults(handler=cmd_worker)
