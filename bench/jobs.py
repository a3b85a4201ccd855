"""``python -m bench jobs``: what running through jobs costs over the bare sampler loop.

Both sides run the same spec on the same device after a warm-up (compiled chunks cached): the
bare side is ``kernel.run`` in the loop's blocks (``runs.loop.plan``), carrying one noise stream
and tracing the positions the spec records, held as the jobs loop holds them between flushes
and then dropped; the jobs side is the sampling loop of ``runs.loop.execute`` into a fresh Store
(blocks, records, flushes, progress), and, in the last column, the whole run (building the
target, the summary). Median of the repeats, each side timed from rest and the two taking turns
to go first (``SETTLE_S``); the overhead is the median of each repeat's jobs / bare, shown with
the range of those ratios. A third side is the control: the bare side again while a plain
thread writes as many bytes as the jobs side's Store did to a plain file (``bare_writing``),
which reads what the machine's disk alone costs the sampler. The specs ask for compiled chunks
(``compile: always``), the path with the shortest steps and so the one where the loop's own
cost weighs most.

Both cases run 20,000 steps: at a few thousand, one run lasts a fraction of a second and the
noise of a shared machine swamps the overhead (bench/RESULTS.md has the readings).
"""

from __future__ import annotations

import gc
import statistics
import tempfile
import threading
import time
from pathlib import Path

import torch

from runs.budget import estimate
from runs.build import build
from runs.loop import FLUSH_BYTES, execute, plan, projection
from runs.spec import parse_spec
from runs.store import Store

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
    """The sampler alone: ``kernel.run`` in the jobs loop's blocks, carrying one noise stream,
    tracing the positions the spec records (all of them, or their projection), each block's
    Info held until FLUSH_BYTES of them are, as the jobs loop holds its records between
    flushes, then dropped instead of written. What jobs adds is then what issue 4 counts:
    thinning, flushing and storing the records. (Dropping each block's Info at once made this
    side bimodal: its blocks were freed and faulted in anew.)"""
    target, kernel, device = build(spec)
    g = torch.Generator(device=device).manual_seed(spec.seed)
    state = kernel.init(target.initial(g, spec.chains), target, g)
    noise = kernel.noise_for(state, target, g)
    est = estimate(spec)
    positions = est.positions != "none"
    basis = None
    if est.positions == "projection":
        basis = projection(spec, est.dim, device, state.position.dtype)
    # "always" and the loop's switch once compiled alike: whole blocks compiled, the rest eager
    compiled = spec.compile != "never"
    held, held_bytes = [], 0
    start = time.perf_counter()
    for _, n in plan(spec.steps, noise.length, spec.flush_every):
        state, info = kernel.run(state, target, noise, n, compiled=compiled, positions=positions)
        traced = info.position if basis is None else info.position @ basis
        kept = [t for t in (info.loss, info.diverged, traced) if t is not None]
        held.append(kept)  # a projection's full positions dropped, as the loop's Recorder does
        held_bytes += sum(t.nbytes for t in kept)
        if held_bytes >= FLUSH_BYTES:
            held, held_bytes = [], 0
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
    """``nbytes`` to a new plain file at ``path`` in WRITE_CHUNK writes: no jobs code involved."""
    chunk = b"\x01" * WRITE_CHUNK
    with open(path, "wb", buffering=0) as f:
        for offset in range(0, nbytes, WRITE_CHUNK):
            f.write(chunk[: min(WRITE_CHUNK, nbytes - offset)])


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


# A side timed right after a run's summary (seconds of ArviZ on its records) ran slower for
# seconds after it (bench/RESULTS.md), so every timed side starts from rest, and the sides take
# turns going first.
SETTLE_S = 3.0


def rested(fn, *args):
    gc.collect()
    time.sleep(SETTLE_S)
    return fn(*args)


def run(repeats: int, thins: tuple[int, ...], steps: int | None = None) -> list[str]:
    """One table row per case and thinning; ``steps`` overrides the cases' (a quick run)."""
    rows = []
    for name, case in CASES.items():
        for thin in thins:
            spec = parse_spec({**case, "thin": thin} | ({"steps": steps} if steps else {}))
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
