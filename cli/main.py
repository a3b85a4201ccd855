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
    python -m jobs sweep order --target harmonic --samplers gla1,gla2 --step-sizes 0.25,0.125 \\
        --observable virial --json                   # TATi's integrator-order study, slopes
    python -m jobs sweep reprior --widths 8,32,128   # repriorised vs standard ESS by width
    python -m jobs wide kl --widths 8,32,128,512 | wide slices ID   # reference 002's studies
    python -m jobs sweep dln --class tiny --problems 16 --samplers sgld,rmsprop-sgld \\
        --step-sizes 1e-8,1e-7,1e-6 --steps 5000 --json      # the DLN benchmark
    python -m jobs sweep calibrate --target dln ... --sampler sgld \\
        --step-sizes 1e-8,1e-7,1e-6 --nbetas 100,1000 --json  # step size x nbeta grid
    python -m jobs run --kind vi --target tanh --target-param n=500 --vi-param epochs=100
                                                 # a variational fit (reference 004)
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
import functools
import json
import math
import os
import sqlite3
import sys
import threading
import time
from pathlib import Path

from runs.spec import SpecError, check_budget, parse_spec, read_spec_file
from runs.store import DamagedStore, Store, StoreError


def _value(text: str):
    """A flag value as JSON when it parses (numbers, lists, true/false), else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _pairs(items: list[str], flag: str) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SpecError(flag, f"must be key=value, got {item!r}")
        out[key.strip()] = _value(value.strip())
    return out


def spec_from_args(args: argparse.Namespace) -> dict:
    """The spec dict from a spec file and/or flags (flags win: --target and --sampler replace
    the file's, --target-param and --param set single parameters of whichever is chosen)."""
    data: dict = {}
    if args.spec:
        data = read_spec_file(args.spec)  # size- and depth-capped
        if not isinstance(data, dict):
            raise SpecError("spec", f"{args.spec} must hold a JSON object, not {_kind(data)}")
    target_items = list(args.target_param)
    if getattr(args, "loss_convention", None):  # devinterp's F.mse_loss: "mean"
        target_items.append(f"loss_convention={args.loss_convention}")
    if getattr(args, "factory", None):  # the checkpoint sweep's model
        data["target"] = {"name": "model", "params": {}}
        target_items.append(f"factory={args.factory}")
    for role, name, flag, items in (
        ("target", args.target, "--target-param", target_items),
        ("sampler", args.sampler, "--param", args.param),
    ):
        if name:
            data[role] = {"name": name, "params": {}}
        if items:
            part = data.get(role)
            if not (isinstance(part, dict) and isinstance(part.get("params", {}), dict)):
                raise SpecError(role, f"{flag} needs a {role}: give --{role} NAME")
            part["params"] = {**part.get("params", {}), **_pairs(items, flag)}
    if args.kind:
        data["kind"] = args.kind
    if args.vi_param:
        given = data.get("vi") or {}
        if not isinstance(given, dict):
            raise SpecError("vi", f"must be a JSON object, got {_kind(given)}")
        data["vi"] = {**given, **_pairs(args.vi_param, "--vi-param")}
    for key in (
        "chains",
        "steps",
        "burn_in",
        "thin",
        "seed",
        "device",
        "dtype",
        "flush_every",
        "compile",
    ):
        if getattr(args, key) is not None:
            data[key] = getattr(args, key)
    if args.observe:
        data["observables"] = args.observe
    llc = {
        key: getattr(args, key)
        for key in (
            "w0",
            "baseline",
            "train_optimizer",
            "train_steps",
            "train_lr",
            "train_batch_size",
            "train_patience",
        )
        if getattr(args, key) is not None
    }
    if llc:
        given = data.get("llc", {})
        if not isinstance(given, dict):
            raise SpecError("llc", f"must be a JSON object, got {_kind(given)}")
        data["llc"] = {**given, **llc}
    return data


def _kind(value) -> str:
    return {list: "a list", str: "a string", dict: "an object"}.get(type(value), repr(value))


def _out_path(path: str, flag: str = "--out") -> Path:
    """``path`` as a file to write, checked before the work that fills it."""
    out = Path(path)
    if out.is_dir():
        raise SpecError(flag, f"{path} is a folder; give a file name in it")
    if not out.parent.is_dir():
        raise SpecError(flag, f"the folder {out.parent} does not exist")
    return out


def _write(path: Path, write, flag: str = "--out"):
    try:
        return write(path)
    except OSError as exc:  # e.g. no permission, disk full
        raise SpecError(flag, f"cannot write {path}: {exc.strerror or exc}") from None


def _add_spec_flags(p: argparse.ArgumentParser) -> None:
    import landscapes
    import samplers

    p.add_argument("spec", nargs="?", help="a RunSpec as a JSON file (flags override it)")
    p.add_argument(
        "--kind",
        choices=("sample", "vi"),
        help="sample (a sampler on the target; default) or vi (a variational fit, --vi-param)",
    )
    p.add_argument(
        "--vi-param",
        dest="vi_param",
        action="append",
        default=[],
        metavar="K=V",
        help="a vi run's option: source (gamma, gaussian), epochs, prior_mean, prior_variance, ...",
    )
    p.add_argument("--target", help=f"one of {sorted(landscapes.REGISTRY)}")
    p.add_argument("--target-param", action="append", default=[], metavar="K=V")
    p.add_argument(
        "--loss-convention",
        dest="loss_convention",
        choices=("sum", "mean"),
        help="a regression target's loss a point: sum over outputs (the benchmark's, default) "
        "or mean (F.mse_loss: devinterp's step sizes and nbeta give its posterior)",
    )
    p.add_argument("--sampler", help=f"one of {sorted(samplers.REGISTRY)}")
    p.add_argument("--param", action="append", default=[], metavar="K=V")
    p.add_argument("--chains", type=int)
    p.add_argument("--steps", type=int)
    p.add_argument("--burn-in", dest="burn_in", type=int)
    p.add_argument("--thin", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--device", help="auto (CUDA when present), cpu, cuda or cuda:<i>")
    p.add_argument("--dtype", choices=("float32", "float64"))
    p.add_argument("--flush-every", dest="flush_every", type=int)
    p.add_argument(
        "--compile",
        choices=("auto", "always", "never"),
        help="compiled chunks of steps: auto (when the compile pays within the run; default)",
    )
    p.add_argument(
        "--observe",
        action="append",
        default=[],
        metavar="NAME",
        help="an observable, repeatable: llc, predictive (test-set ensemble metrics)",
    )
    llc = p.add_argument_group("LLC (with --observe llc)")
    llc.add_argument(
        "--w0",
        choices=("auto", "train", "truth", "init"),
        help="where the chains start: train (default on data targets), truth, init",
    )
    llc.add_argument("--baseline", choices=("full", "minibatch"), help="L(w0): full data (default)")
    llc.add_argument("--train-optimizer", dest="train_optimizer", choices=("adam", "sgd"))
    llc.add_argument("--train-steps", dest="train_steps", type=int)
    llc.add_argument("--train-lr", dest="train_lr", type=float)
    llc.add_argument("--train-batch-size", dest="train_batch_size", type=int)
    llc.add_argument("--train-patience", dest="train_patience", type=int)
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout")


def _validated(args: argparse.Namespace):
    spec = parse_spec(spec_from_args(args))
    check_budget(spec)
    return spec


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


def cmd_run(args: argparse.Namespace, store: Store) -> int:
    spec = _validated(args)
    run_id = store.create(spec.model_dump(mode="json"))
    return _foreground(args, store, run_id, spec)


def cmd_resume(args: argparse.Namespace, store: Store) -> int:
    """An interrupted (or cancelled) run, continued here: it replays its steps from the seed
    without writing what the store holds, then records the rest (``runs.loop``)."""
    record = store.get(args.id)
    if record.status not in ("interrupted", "cancelled"):
        print(
            f"resume: run {args.id} is {record.status}; only interrupted or cancelled runs "
            "can be resumed",
            file=sys.stderr,
        )
        return 2
    spec = parse_spec(record.spec)
    store.requeue(args.id)
    return _foreground(args, store, args.id, spec)


def _foreground(args: argparse.Namespace, store: Store, run_id: str, spec) -> int:
    """Run ``run_id`` in this process, progress on stderr, the summary on stdout."""
    from landscapes import ParamError
    from runs.loop import execute
    from runs.worker import cancelled, default_slots, disk_full, heartbeat, torch_threads

    record = store.claim(os.getpid(), run_id)
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
    store.finish(run_id, summary["status"], summary=summary)
    for warning in summary["warnings"]:
        print(f"warning: {warning['code']}: {warning['message']}", file=sys.stderr)
    if args.json:
        print(json.dumps(_finite(summary)))
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
            print(f"  {s['status']}: {s['message']}; try {s['try']}")


def _print_observables(summary) -> None:
    """The observables a plain-text summary spells out, a line each (the JSON has them all)."""
    observables = summary.get("observables") if isinstance(summary, dict) else None
    if isinstance(observables, dict) and isinstance(observables.get("predictive"), dict):
        from studies.report import predictive_lines

        for line in predictive_lines(observables["predictive"]):
            print(line)


def cmd_submit(args: argparse.Namespace, store: Store) -> int:
    spec = _validated(args)
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
    if role == "sampler" and spec.get("kind") == "vi":
        return "vi"
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
        from studies import report

        table = report.diagnostics_table(store, args.id)
    if args.json:
        print(json.dumps(_finite(info if table is None else {**info, "diagnostics": table})))
        return 0
    for key, value in info.items():
        if key != "verdict":
            print(f"{key}: {value}")
    _print_verdict(info["verdict"])
    _print_observables(info["summary"])
    if table is not None:
        print(f"\n{report.diagnostics_text(table)}")
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
    out = _out_path(args.out)
    if out.exists() and not out.is_file():  # /dev/null, a pipe: nothing can be renamed onto it
        raise SpecError(
            "--out",
            f"{args.out} is not a regular file (a pipe or device): an export is written to a "
            "temporary file beside its target and renamed onto it; give a file path",
        )
    damaged = []
    print(_write(out, lambda path: export(args.id, path, burn_in=burn, damaged=damaged)))
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
    for path in _write(out, lambda folder: tati.export(store, args.id, folder, every)):
        print(path)
    return 0


def _floats(text: str, flag: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.replace(" ", "").split(",") if v)
    except ValueError:
        values = ()
    if not values:
        raise SpecError(flag, f"must be one or more comma-separated numbers, got {text!r}")
    return values


STEPPED = ("dln", "calibrate", "order")  # the sweeps over step sizes


def cmd_sweep(args: argparse.Namespace, store: Store) -> int:
    from studies import sweep

    if args.sweep == "list":
        for s in store.list_sweeps():
            p = sweep.progress(store, s)
            print(f"{s['id']}  {s['kind']:<10} {p['done']}/{p['runs']} runs done")
        return 0
    if args.sweep == "delete":
        store.delete_sweep(args.id)
        return 0
    if args.sweep == "show":
        return _print_sweep(sweep.results(store, args.id), args.json)
    if args.sweep == "run":
        return _run_sweep(args, store, args.id, retry=args.retry_failed)
    step_sizes = _floats(args.step_sizes, "--step-sizes") if args.sweep in STEPPED else ()
    if args.sweep == "dln":
        samplers_ = tuple(s for s in args.samplers.replace(" ", "").split(",") if s)
        if not samplers_:
            raise SpecError("--samplers", f"must name one or more samplers, got {args.samplers!r}")
        params, cells = sweep.dln_specs(
            size_class=args.size_class,
            problems=args.problems,
            samplers=samplers_,
            step_sizes=step_sizes,
            steps=5000 if args.steps is None else args.steps,  # 0 is refused, not replaced
            chains=1 if args.chains is None else args.chains,
            batch_size=args.batch_size,
            n=args.n,
            seed=0 if args.seed is None else args.seed,
            device=args.device or "auto",
            dtype=args.dtype or "float32",
        )
    elif args.sweep == "order":
        samplers_ = tuple(s for s in args.samplers.replace(" ", "").split(",") if s)
        params, cells = sweep.order_specs(
            target=args.target,
            target_params=_pairs(args.target_param, "--target-param")
            or (sweep.HARMONIC_DEFAULT if args.target == "harmonic" else {}),
            samplers=samplers_,
            step_sizes=step_sizes,
            observable=args.observable,
            beta=args.beta,
            friction=args.friction,
            chains=args.chains,
            steps=args.steps,
            seed=args.seed,
            device=args.device,
            dtype=args.dtype,
        )
    elif args.sweep == "vi":
        from runs import vi

        sources = tuple(s for s in args.source.replace(" ", "").split(",") if s)
        params, cells = vi.specs(
            target=args.target,
            target_params=_pairs(args.target_param, "--target-param"),
            ns=tuple(int(n) for n in _floats(args.ns, "--ns")),
            sources=sources,
            vi_options=_pairs(args.vi_param, "--vi-param"),
            seed=args.seed,
            device=args.device,
            dtype=args.dtype,
        )
    elif args.sweep == "checkpoints":
        base = parse_spec({**spec_from_args(args), "observables": ["llc"]})
        params, cells = sweep.checkpoint_specs(base, sweep.find_checkpoints(args.checkpoints))
    elif args.sweep == "reprior":
        params, cells = sweep.reprior_specs(
            widths=tuple(int(w) for w in _floats(args.widths, "--widths")),
            depth=args.depth,
            n=args.n,
            data=args.data,
            chains=args.chains,
            steps=args.steps,
            warmup=args.warmup,
            step_size=args.step_size,
            refresh=args.refresh,
            mh=not args.skip_mh,
            target_accept=args.target_accept,
            seed=args.seed,
            device=args.device,
            dtype=args.dtype,
        )
    else:
        nbetas = (None,) if not args.nbetas else _floats(args.nbetas, "--nbetas")
        base = parse_spec({**spec_from_args(args), "observables": ["llc"]})
        params, cells = sweep.calibration_specs(base, step_sizes, nbetas)
    ray = args.backend == "ray"
    if ray:
        from runs.ray_backend import connect, start_driver

        connect(args.address)  # a cluster that cannot be reached is refused before queueing
    sweep_id = sweep.submit(store, args.sweep, params, cells, held_by=os.getpid() if ray else None)
    print(f"{sweep_id}: {len(cells)} runs queued", file=sys.stderr)
    if args.submit_only:
        if ray:  # the runs are held for a driver that outlives this call
            start_driver(store, sweep_id, args.address)
        print(sweep_id)
        return 0
    return _run_sweep(args, store, sweep_id)


def _run_sweep(args: argparse.Namespace, store: Store, sweep_id: str, retry: bool = False) -> int:
    """Run a sweep's cells to their end, on the local pool or the Ray cluster, showing a line
    as runs finish; then print its results."""
    import threading

    from runs.worker import supervise
    from studies import sweep

    run_ids = [cell["run_id"] for cell in store.get_sweep(sweep_id)["cells"]]
    done = threading.Event()

    status = StatusLine(every=0.0)  # a line each time a run finishes

    def report() -> None:  # the supervisor holds the main thread (it owns Ctrl-C)
        watcher = Store(store.home)
        while not done.wait(1.0):
            p = sweep.progress(watcher, watcher.get_sweep(sweep_id))
            status.show(f"{sweep_id}: {p['done']}/{p['runs']} runs done")

    thread = threading.Thread(target=report, daemon=True)
    thread.start()
    if args.backend == "ray":
        from runs.ray_backend import drive, take

        held = take(store, run_ids, retry, getattr(args, "holder", None) or os.getpid())
        try:
            drive(store, held, args.address)
        except SpecError as exc:  # no cluster there: the held runs fail, saying why
            for run_id in held:
                store.finish(run_id, "failed", error=str(exc))
            raise
    else:
        if retry:  # back to the queue: a worker resumes each where its rows end
            for run_id in run_ids:
                if store.get(run_id).status in ("interrupted", "failed"):
                    store.requeue(run_id)
        supervise(str(store.home), slots=args.slots, once=True)
    done.set()
    thread.join()
    status.close()
    return _print_sweep(sweep.results(store, sweep_id), args.json)


def _print_sweep(result: dict, as_json: bool) -> int:
    if as_json:
        print(json.dumps(_finite(result)))
        return 0
    p = result["progress"]
    print(f"{result['sweep_id']} ({result['kind']}): {p['done']}/{p['runs']} runs done")
    for m in result.get("metrics", []):
        fmt = lambda v: "-" if v is None else f"{v:.3g}"  # noqa: E731
        print(
            f"{m['sampler']:<14} step {m['step_size']:<8.2g} rel. error "
            f"{fmt(m['relative_error_mean'])} +- {fmt(m['relative_error_sd'])}  "
            f"NaN chains {m['nan_fraction']:.2f} runs {m['nan_run_fraction']:.2f}  "
            f"order {fmt(m['order_preservation'])}"
        )
    for f in result.get("fits", []):
        slope = "-" if f["slope"] is None else f"{f['slope']:.2f} +- {f['slope_se']:.2f}"
        print(
            f"{f['sampler']:<6} slope {slope:<14} (expected {f['expected']}, {f['points']} points)"
        )
    for c in result.get("cells", []) if result["kind"] == "order" else []:
        error = "-" if c["error"] is None else f"{c['error']:+.3e} +- {c['error_se']:.1e}"
        print(f"{c['sampler']:<6} h {c['step_size']:<10.4g} relative error {error}")
    for c in result.get("cells", []) if result["kind"] == "calibrate" else []:
        llc = "-" if c["llc"] is None else f"{c['llc']:.4g}"
        print(
            f"step {c['step_size']:<8.2g} nbeta {c['nbeta_value']:<10.4g} llc {llc:<10} "
            f"{', '.join(c['flags']) or 'stable'}"
        )
    for c in result.get("cells", []) if result["kind"] == "reprior" else []:
        ess = c["ess"] or {}
        f, theta = ess.get("f") or {}, ess.get("theta") or {}
        fmt = lambda v: "-" if v is None else f"{v:.4f}"  # noqa: E731
        print(
            f"width {c['width']:<6} {c['parametrisation']:<8} {c['status']:<9} "
            f"ESS/step f {fmt(f.get('mean'))} (min {fmt(f.get('min'))}) "
            f"theta {fmt(theta.get('mean'))}  acceptance {fmt(c['acceptance'])}  "
            f"step {fmt(c['step'])}"
        )
    for f in result.get("flags", []):
        print(f"{f['level'].upper()} {f['where']}: {f['message']}; try {f['try']}")
    for r in result.get("ratios", []):
        fmt = lambda v: "-" if v is None else f"{v:.3g}"  # noqa: E731
        print(
            f"width {r['width']:<6} reprior / standard: ESS f x{fmt(r['f'])}, "
            f"theta x{fmt(r['theta'])}, time a step x{fmt(r['cost'])}"
        )
    if result["kind"] == "vi":
        _print_vi_sweep(result)
    for c in result.get("cells", []) if result["kind"] == "checkpoints" else []:
        fmt = lambda v, f=".4g": "-" if v is None else format(v, f)  # noqa: E731
        print(
            f"step {c['step']:<8} {c['checkpoint']:<24} llc {fmt(c['llc']):<9} +- "
            f"{fmt(c['se'], '.2g'):<7} train loss {fmt(c['train_loss'])}  {c['status']}"
            + (f"  {c['verdict']}: {', '.join(c['warnings'])}" if c["warnings"] else "")
        )
    if "recommended" in result:
        print(f"recommended step size per nbeta: {result['recommended']}")
    return 0


def _print_vi_sweep(result: dict) -> None:
    fmt = lambda v, spec=".3f": "-" if v is None else format(v, spec)  # noqa: E731
    for c in result["cells"]:
        psi = "-" if c["psi"] is None else f"{c['psi']:.3f} +- {c['psi_se']:.2g}"
        print(
            f"{c['source']:<9} n {c['n']:<8} {c['status']:<9} epochs {c['epochs']}/"
            f"{c['epochs_total']}  Psi {psi:<20} log Z_bar {fmt(c['log_z_bar'])}"
        )
    for source, fit in result["slopes"].items():
        if fit is None:
            print(f"{source:<9} slope of -Psi against log n: - (fewer than two finished n)")
        else:
            se = "" if fit["slope_se"] is None else f" +- {fit['slope_se']:.3f}"
            print(f"{source:<9} slope of -Psi against log n: {fit['slope']:.3f}{se}")
    if result["log_z_bar_fit"]:
        print(f"exact log Z_bar's slope: {result['log_z_bar_fit']['slope']:.3f}")
    if result["true_lc"]:
        print(f"true learning coefficient: {result['true_lc']['lambda']:.3f}")


def cmd_surface(args: argparse.Namespace, store: Store) -> int:
    from studies import surface

    options = {
        "directions": args.directions,
        "components": args.components.split(","),
        "grid": args.grid,
        "half_width": args.range,
        "reference": args.reference,
        "every": args.every,
        "path_chains": args.path_chains,
        "seed": args.seed,
        "normalisation": args.normalisation,
    }
    if args.burn_in is not None:
        options["burn_in"] = args.burn_in
    surface.check_range(args.range, "--range")
    path = _out_path(args.out) if args.out else None  # before the surface is computed
    out = surface.compute(store, args.id, device=args.device, dtype=args.dtype, **options)
    if path:
        _write(path, lambda p: surface.save(out, p))
    facts = surface.summary(out)
    if args.out:
        facts["out"] = str(args.out)
    if args.json:
        print(json.dumps(_finite(facts)))
        return 0
    print(f"{facts['label0']} x {facts['label1']} around the {facts['reference']} point")
    print(
        f"grid {facts['grid']}x{facts['grid']} on [-{facts['range']:g}, {facts['range']:g}]^2: "
        f"loss {facts['grid_min']:.6g} .. {facts['grid_max']:.6g}, "
        f"centre {facts['centre_loss']:.6g}, {facts['nonfinite']} non-finite points"
    )
    if args.out:
        print(f"wrote {args.out}")
    return 0


def cmd_wide(args: argparse.Namespace, store: Store) -> int:
    """Reference 002's two in-process studies: the KL from prior draws by width, and posterior
    slices through a run's last draw in theta and in phi (what the Wide networks page shows)."""
    import numpy as np

    from landscapes import ParamError
    from runs.worker import torch_threads
    from studies import wide

    if args.study == "kl":
        widths = tuple(int(w) for w in _floats(args.widths, "--widths"))
        with torch_threads(1):  # n x n factorisations: one thread (reference 002 section 5)
            try:
                rows = wide.kl_table(widths, args.depth, args.n, args.draws, args.data, args.seed)
            except ParamError as exc:
                raise SpecError(exc.field, str(exc).split(": ", 1)[-1]) from None
        if args.json:
            print(json.dumps(_finite({"rows": rows})))
            return 0
        for r in rows:
            print(
                f"width {r['width']:<6} KL(q || p_phi) {r['reprior']:<10.4g} "
                f"KL(q || p_theta) {r['standard']:<10.4g} sd(log Z) {r['log_z_std']:.3g}"
            )
        return 0
    path = _out_path(args.out) if args.out else None
    with torch_threads(1):
        out = wide.slices(store, args.id, args.grid, args.range, args.seed)
    if path:
        _write(path, lambda p: np.savez(p, **{k: np.asarray(v) for k, v in out.items()}))
    facts = {
        "run_id": args.id,
        "width": out["width"],
        "parametrisation": out["parametrisation"],
        "grid": out["grid"],
        "range": out["half_width"],
        **{f"{k}_max": float(np.nanmax(out[k])) for k in ("theta", "phi")},
        "out": args.out,
    }
    if args.json:
        print(json.dumps(_finite(facts)))
        return 0
    print(
        f"{args.id} (width {out['width']}, {out['parametrisation']}): -log p on a "
        f"{out['grid']}x{out['grid']} plane of half-width {out['half_width']:g} rises by up to "
        f"{facts['theta_max']:.4g} in theta and {facts['phi_max']:.4g} in phi"
    )
    if args.out:
        print(f"wrote {args.out}")
    return 0


def _slots(text: str) -> int:
    """``--slots``: runs at once, at least 1."""
    try:
        slots = int(text)
    except ValueError:
        slots = 0
    if slots < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1 (at least 1 run), got {text!r}")
    return slots


def cmd_worker(args: argparse.Namespace, store: Store) -> int:
    from runs.worker import supervise

    supervise(str(store.home), slots=args.slots, once=args.once, owner=args.owner)
    return 0


def _finite(value):
    """JSON has no NaN/Inf: they become null (a diverged run's statistics)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _backend_flags(k: argparse.ArgumentParser) -> None:
    k.add_argument(
        "--backend",
        choices=("local", "ray"),
        default="local",
        help="where the runs execute: the local worker pool (default) or a Ray cluster",
    )
    k.add_argument(
        "--address",
        help="the Ray cluster: auto (this machine's, or RAY_ADDRESS; default), host:port or "
        "ray://host:port",
    )


def _sweep_flags(k: argparse.ArgumentParser) -> None:
    """What the order, reprior and vi sweeps take alike: seed, device, dtype and how to run."""
    k.add_argument("--seed", type=int, default=0)
    k.add_argument("--device", default="auto")
    k.add_argument("--dtype", choices=("float32", "float64"), default="float64")
    k.add_argument("--json", action="store_true")
    k.add_argument("--slots", type=_slots, help="runs at once (default: the worker default)")
    k.add_argument("--submit-only", dest="submit_only", action="store_true")
    _backend_flags(k)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobs", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "submit"):
        _add_spec_flags(sub.add_parser(name))
    sub.add_parser("list")
    show = sub.add_parser("show")
    show.add_argument("id")
    show.add_argument("--json", action="store_true")
    show.add_argument(
        "--diagnostics",
        action="store_true",
        help="the Playground's diagnostics table: moments, tails, KS against the exact "
        "sampler, ESS and R-hat per coordinate (JSON: a 'diagnostics' field)",
    )
    for name in ("cancel", "delete"):
        sub.add_parser(name).add_argument("id")
    resume = sub.add_parser("resume", help="continue an interrupted run where its records end")
    resume.add_argument("id")
    resume.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
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
    sub.add_parser("check", help="list what is damaged in the store; exit 1 when anything is")
    sweep_parser = sub.add_parser(
        "sweep", help="sweeps: the DLN benchmark, calibration, order, reprior, vi"
    )
    kinds = sweep_parser.add_subparsers(dest="sweep", required=True)
    for name in ("dln", "calibrate"):
        k = kinds.add_parser(name)
        if name == "calibrate":
            _add_spec_flags(k)
            k.add_argument("--nbetas", help="comma-separated nbeta values (default: n / log n)")
        else:
            k.add_argument(
                "--class",
                dest="size_class",
                default="tiny",
                help="size class: tiny, 100K, 1M, 10M, 100M",
            )
            k.add_argument("--problems", type=int, default=16)
            k.add_argument("--samplers", default="sgld,rmsprop-sgld,adam-sgld,sghmc,sgnht")
            k.add_argument("--steps", type=int, help="sampler steps per run (default 5000)")
            k.add_argument("--chains", type=int, help="chains per run (default 1, as the paper)")
            k.add_argument("--batch-size", dest="batch_size", type=int, default=500)
            k.add_argument("--n", type=int, default=100_000, help="training points per problem")
            k.add_argument("--seed", type=int)
            k.add_argument("--device")
            k.add_argument("--dtype", choices=("float32", "float64"))
            k.add_argument("--json", action="store_true")
        k.add_argument(
            "--step-sizes",
            dest="step_sizes",
            required=True,
            help="comma-separated step sizes (a log grid)",
        )
        k.add_argument("--slots", type=_slots, help="runs at once (default: the worker default)")
        k.add_argument(
            "--submit-only",
            dest="submit_only",
            action="store_true",
            help="queue the runs, print the sweep id and return",
        )
        _backend_flags(k)
    k = kinds.add_parser("order", help="TATi's integrator-order study (reference 003, Figs 2-4)")
    k.add_argument("--target", default="harmonic", help="a potential or network (TATi: harmonic)")
    k.add_argument(
        "--target-param",
        action="append",
        default=[],
        metavar="K=V",
        help="the target's parameters (harmonic: a=2 when none is given)",
    )
    k.add_argument("--samplers", default="gla1,gla2,baoab,sgld")
    k.add_argument("--step-sizes", dest="step_sizes", default="0.125,0.0625,0.03125,0.015625")
    k.add_argument("--observable", choices=("virial", "kinetic"), default="virial")
    k.add_argument("--beta", type=float, default=10.0, help="inverse temperature (TATi's)")
    k.add_argument("--friction", type=float, default=1.0, help="gamma")
    k.add_argument("--chains", type=int, default=16_384, help="chains a run (the paper's seeds)")
    k.add_argument("--steps", type=int, default=10_000)
    _sweep_flags(k)
    k = kinds.add_parser(
        "reprior", help="repriorisation of wide networks: ESS by width (reference 002, Fig. 7)"
    )
    k.add_argument("--widths", default="8,128", help="comma-separated hidden widths")
    k.add_argument("--depth", type=int, default=1, help="hidden layers")
    k.add_argument("--n", type=int, default=16, help="training points")
    k.add_argument("--data", choices=("synthetic", "digits"), default="synthetic")
    k.add_argument("--chains", type=int, default=2)
    k.add_argument("--steps", type=int, default=4000)
    k.add_argument("--warmup", type=int, default=1000, help="step-size adaptation (burn-in)")
    k.add_argument("--step-size", dest="step_size", type=float, default=0.01, help="initial")
    k.add_argument("--refresh", type=float, default=0.1, help="momentum refresh beta")
    k.add_argument("--skip-mh", dest="skip_mh", action="store_true", help="no MH test")
    k.add_argument("--target-accept", dest="target_accept", type=float, default=0.9)
    _sweep_flags(k)
    k = kinds.add_parser(
        "vi", help="the VI n-scan: -Psi against log n, its slope (reference 004, section 5(C))"
    )
    k.add_argument("--target", default="tanh", help="a target with data and a truth w0")
    k.add_argument("--target-param", action="append", default=[], metavar="K=V")
    k.add_argument("--ns", default="500,1000,2000,5000", help="comma-separated values of n")
    k.add_argument("--source", default="gamma", help="gamma, gaussian, or both: gamma,gaussian")
    k.add_argument(
        "--vi-param",
        dest="vi_param",
        action="append",
        default=[],
        metavar="K=V",
        help="the fits' options (epochs, prior_mean, prior_variance, lambda0, ...)",
    )
    _sweep_flags(k)
    k = kinds.add_parser(
        "checkpoints", help="the LLC over training: one LLC estimate per checkpoint of a model"
    )
    _add_spec_flags(k)
    k.add_argument(
        "--factory", required=True, help="the model: path/to/file.py:make or pkg.mod:make"
    )
    k.add_argument(
        "--checkpoints", required=True, help="a glob of weights files, e.g. 'ckpt/step-*.pt'"
    )
    k.add_argument("--slots", type=_slots, help="runs at once (default: the worker default)")
    k.add_argument("--submit-only", dest="submit_only", action="store_true")
    _backend_flags(k)
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
    k.add_argument("--slots", type=_slots, help="local backend: runs at once")
    k.add_argument("--holder", type=int, help=argparse.SUPPRESS)  # the app's pid (start_driver)
    k.add_argument("--json", action="store_true")
    _backend_flags(k)
    for name in ("show", "delete"):
        k = kinds.add_parser(name)
        k.add_argument("id")
        if name == "show":
            k.add_argument("--json", action="store_true")
    kinds.add_parser("list")
    surf = sub.add_parser("surface", help="the loss surface around a run's trajectory (TATi)")
    surf.add_argument("id")
    surf.add_argument("--directions", choices=("pca", "random", "hessian"), default="pca")
    surf.add_argument("--components", default="1,2", help="1-based pair, e.g. 1,2 or 1,64")
    surf.add_argument("--grid", type=int, default=41, help="odd points per axis")
    surf.add_argument(
        "--range",
        type=float,
        help="half-width R of [-R, R]^2 (default: the smallest 10^i that "
        "holds the projected trajectory)",
    )
    surf.add_argument(
        "--reference",
        choices=("auto", "w0", "mean", "last", "best"),
        default="auto",
        help="theta*: the run's w0 when it has one, else the trajectory's lowest-loss point",
    )
    surf.add_argument("--every", type=int, help="overlay every k-th recorded draw")
    surf.add_argument("--path-chains", dest="path_chains", type=int, default=8)
    surf.add_argument("--burn-in", dest="burn_in", type=int, help="draws left out of the PCA")
    surf.add_argument("--normalisation", choices=("auto", "filter", "unit"), default="auto")
    surf.add_argument("--seed", type=int, default=0, help="random directions' seed")
    surf.add_argument("--device", default="auto")
    surf.add_argument("--dtype", choices=("float32", "float64"), default="float64")
    surf.add_argument("--out", help="write the arrays to this .npz")
    surf.add_argument("--json", action="store_true")
    wide_parser = sub.add_parser(
        "wide", help="wide networks (reference 002): KL from prior draws, posterior slices"
    )
    studies = wide_parser.add_subparsers(dest="study", required=True)
    kl = studies.add_parser("kl", help="KL(q || p) in phi and in theta by width, prior draws")
    kl.add_argument("--widths", default="8,32,128,512")
    kl.add_argument("--depth", type=int, default=1)
    kl.add_argument("--n", type=int, default=32)
    kl.add_argument("--draws", type=int, default=1000, help="prior draws")
    kl.add_argument("--data", choices=("synthetic", "digits"), default="synthetic")
    kl.add_argument("--seed", type=int, default=0)
    kl.add_argument("--json", action="store_true")
    sl = studies.add_parser("slices", help="-log p through an ntk-fcn run's draw, theta and phi")
    sl.add_argument("id")
    sl.add_argument("--grid", type=int, default=41, help="odd points per axis")
    sl.add_argument("--range", type=float, default=1.0, help="half-width of the square")
    sl.add_argument("--seed", type=int, default=0, help="the random plane's seed")
    sl.add_argument("--out", help="write the arrays to this .npz")
    sl.add_argument("--json", action="store_true")
    worker = sub.add_parser("worker")
    worker.add_argument(
        "--slots", type=_slots, help="runs at once, >= 1 (default: one per GPU, or one per core)"
    )
    worker.add_argument("--once", action="store_true", help="exit when the queue is empty")
    worker.add_argument(
        "--owner",
        help="PID:START of the process that started it (the app): stop when it is gone",
    )
    args = parser.parse_args(argv)
    try:
        store = Store()
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    command = globals()[f"cmd_{args.command}"]
    try:
        return command(args, store)
    except (SpecError, StoreError) as exc:  # bad input, or a damaged store: one line, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 2


def run() -> None:
    """The process entry (``python -m jobs``, ``basin``): main's exit code as the process's."""
    code = main()
    if any(t.name == "basin-compile" and t.is_alive() for t in threading.enumerate()):
        # a compile still running in the background (samplers.compiled): torch's C++ aborted
        # the interpreter's teardown under it (exit 134 after a completed run), so leave now
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
