"""``python -m bench jobs``: what running through jobs costs over the bare sampler loop.

Both sides run the same spec on the same device after a warm-up (compiled chunks cached): the
bare side is ``kernel.run`` in the loop's blocks, tracing what the spec records, held as the
jobs loop holds them between flushes and then dropped; the jobs side is the sampling loop of
``jobs.run.execute`` into a fresh Store (blocks, records kept on the device, flushes written
behind the loop, progress), and, in the last column, the whole run (building the target, the
summary). Median of the repeats, each side timed from rest and the two taking turns to go
first (``SETTLE_S``); the overhead is the median of each repeat's jobs / bare, shown with the
range of those ratios. A third side is the control: the bare side again while a plain thread
writes as many bytes as the jobs side's Store did (``bare_writing``), which reads what the
machine's disk alone costs the sampler. The specs ask for compiled chunks (``compile:
always``), the path with the shortest steps and so the one where the loop's own cost weighs
most.

Both cases run 20,000 steps. At 5,000 the MLP's run lasted ~0.33 s, and on this shared 2-core
VM one such measurement swung by +-15% from the next on either side, so five repeats read its
overhead anywhere from +1% to +54% (bench/RESULTS.md, 2026-11-25); at 20,000 steps (~1.4 s)
the same pairs read -5..+9%. What a run costs once (~20 ms: its first flush, the final write of
its PCA snapshots) is in bench/RESULTS.md, for a reader who wants a short run's figure.
"""

from __future__ import annotations

import gc
import mmap
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import torch

from jobs.run import FLUSH_BYTES, block_steps, execute, projection
from jobs.spec import build, estimate, parse_spec
from jobs.store import Store
from samplers.fused import Ahead

CASES = {
    "banana-sgld": {
        "target": {"name": "banana", "params": {}},
        "sampler": {"name": "sgld", "params": {"step_size": 1e-3}},
        "chains": 4096,
        "steps": 20000,
        "compile": "always",
    },
    "mlp-sgld": {
        "target": {"name": "mlp", "params": {}},
        "sampler": {"name": "sgld", "params": {"step_size": 1e-5, "batch_size": 32}},
        "chains": 8,
        "steps": 20000,
        "compile": "always",
    },
}


def bare(spec) -> float:
    """The sampler alone: ``kernel.run`` in the jobs loop's blocks, tracing the positions the
    spec records (all of them, or their projection), each block's Info held until FLUSH_BYTES
    of them are, as the jobs loop holds its records between flushes, then dropped instead of
    written. What jobs adds is then what issue 4 counts: thinning, flushing and storing the
    records. (Dropping each block's Info at once made this side bimodal at thin 1, 0.84 or
    1.03 s a run from one run to the next: its 3 MB blocks were freed and faulted in anew.)
    Its calls share an ``Ahead`` as the jobs loop's do: a block's noise is drawn during the
    previous block where the chunk runs on one thread."""
    target, kernel, device = build(spec)
    g = torch.Generator(device=device).manual_seed(spec.seed)
    state = kernel.init(target.initial(g, spec.chains), target, g)
    est = estimate(spec)
    record = est.positions == "all"
    if est.positions == "projection":
        record = projection(spec, est.dim, device, state.position.dtype)
    block = block_steps(spec, target.dim)
    held, held_bytes = [], 0
    ahead = Ahead()
    start = time.perf_counter()
    for done in range(0, spec.steps, block):
        n = min(block, spec.steps - done)
        state, info = kernel.run(state, target, g, n, kernel.fusable, positions=record, ahead=ahead)
        held.append(info)
        held_bytes += sum(
            t.nbytes for t in (info.loss, info.diverged, info.position) if t is not None
        )
        if held_bytes >= FLUSH_BYTES:
            held, held_bytes = [], 0
    ahead.close()  # as the jobs loop does, waiting for the last draw ahead
    info.loss.sum().item()  # the device's work is done
    return time.perf_counter() - start


def through_jobs(spec) -> tuple[float, float, int]:
    """(seconds of the steps with their records and flushes; of the whole run, build and
    summary included; bytes the Store wrote)."""
    with tempfile.TemporaryDirectory() as home:
        store = Store(home)
        run_id = store.create(spec.model_dump(mode="json"))
        start = time.perf_counter()
        summary = execute(spec, store, run_id)
        total = time.perf_counter() - start
        written = sum(f.stat().st_size for f in (Path(home) / "runs").iterdir())
        store.close()
    return summary["sampling_seconds"], total, written


WRITE_CHUNK = 8 << 20


def write_plainly(path: str, nbytes: int) -> None:
    """``nbytes`` to a new file at ``path`` in WRITE_CHUNK writes, bypassing the page cache
    where the file system allows, as the Store writes its records: no jobs code involved."""
    chunk = mmap.mmap(-1, WRITE_CHUNK)  # page-aligned, as O_DIRECT needs
    chunk.write(b"\x01" * WRITE_CHUNK)
    flags = os.O_WRONLY | os.O_CREAT
    try:
        fd = os.open(path, flags | getattr(os, "O_DIRECT", 0), 0o644)
    except OSError:  # a file system without O_DIRECT: through the page cache
        fd = os.open(path, flags, 0o644)
    try:
        for offset in range(0, nbytes, WRITE_CHUNK):
            os.pwrite(fd, chunk, offset)
    finally:
        os.close(fd)
        chunk.close()


def bare_writing(spec, nbytes: int) -> float:
    """``bare`` while another thread writes as many bytes as the run's Store did, to a file in
    the same kind of directory: what the disk alone costs the sampler on this machine, the
    floor under the jobs side's overhead when its records are written as fast as they come."""
    with tempfile.TemporaryDirectory() as home:
        writer = threading.Thread(target=write_plainly, args=(f"{home}/bytes", nbytes))
        writer.start()
        try:
            return bare(spec)
        finally:
            writer.join()


# A run's summary is seconds of ArviZ on the records (8 s for the 1 GB of the banana at thin 1),
# and a side timed right after it ran slower on this host, for seconds: in a scratch A/B, bare
# right after a thin-1 run read 0.98 s where it read 0.79 s after itself, so the overhead read
# -8% where the sides timed from rest give +15..+33% (bench/RESULTS.md, 2026-11-25 05:57 and
# 06:10). So every timed side starts from rest, and the sides take turns going first.
SETTLE_S = 3.0


def rested(fn, *args):
    gc.collect()
    time.sleep(SETTLE_S)
    return fn(*args)


def run(repeats: int, thins: tuple[int, ...]) -> list[str]:
    rows = []
    for name, case in CASES.items():
        for thin in thins:
            spec = parse_spec({**case, "thin": thin})
            bare(spec)  # warm-up: compile (cached on disk afterwards)
            written = through_jobs(spec)[2]
            times = {"bare": [], "jobs": [], "total": [], "disk": []}
            for i in range(repeats):
                for side in ("bare", "jobs", "disk")[:: 1 if i % 2 == 0 else -1]:
                    if side == "bare":
                        times["bare"].append(rested(bare, spec))
                    elif side == "disk":
                        times["disk"].append(rested(bare_writing, spec, written))
                    else:
                        loop, total, _ = rested(through_jobs, spec)
                        times["jobs"].append(loop)
                        times["total"].append(total)
            b, j, t = (statistics.median(times[k]) for k in ("bare", "jobs", "total"))
            floor = statistics.median(
                disk / bare for bare, disk in zip(times["bare"], times["disk"], strict=True)
            )
            # each repeat's own ratio: its two sides ran back to back, in the same phase of a
            # noisy host, which the medians of the two columns taken apart do not guarantee
            ratios = [jobs / bare for bare, jobs in zip(times["bare"], times["jobs"], strict=True)]
            ratio = statistics.median(ratios)
            row = (
                f"| {name} | {spec.chains} | {spec.steps} | {thin} | {b:.3f} | {j:.3f} | "
                f"{100 * (ratio - 1):+.0f}% | {100 * (min(ratios) - 1):+.0f}.."
                f"{100 * (max(ratios) - 1):+.0f}% | {written / 2**20:.0f} | "
                f"{100 * (floor - 1):+.0f}% | {t:.3f} |"
            )
            print(row, flush=True)
            rows.append(row)
    return rows


HEADER = (
    "| case | C | steps | thin | bare s | through jobs s | overhead | repeats' range |"
    " written MB | bare while writing them | with summary s |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)
