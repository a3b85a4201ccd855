"""Background runs: the validated RunSpec, the run loop, the embedded Store, workers and the CLI.

The one path by which both the app and the command line run anything (DESIGN.md, "jobs").
"""

import os

# torch's CPU allocator page-aligns tensors of 2 MB or more (and asks for huge pages for them) when
# this is set before its first allocation, so ``import jobs`` before torch; Basin's allocator
# (samplers/allocator.py) page-aligns them from 64 KB. The Store then writes a run's records to
# disk from where they lie (O_DIRECT needs aligned memory) instead of copying them through a
# staging buffer: 1 GB of records cost the 2-core VM's sampler ~0.1 s less (bench/RESULTS.md,
# 2026-11-24). Workers and ``python -m jobs`` import this first.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

# libgomp's threads spin ~7 ms (300,000 spins) after a parallel region before they sleep. A
# compiled chunk ends in one, and the next chunk's noise is then drawn on two threads
# (samplers.fused.fill) while a spinning thread still holds the other core: the draw ran no
# faster than on one. With 10,000 spins (digits MLP, 8 chains): 46 -> 25 us of noise a step, its
# run through jobs (25-step blocks between snapshots) 0.61 -> 0.53 s, the surfaces' eager loops
# unchanged within the host's noise. libgomp reads it when it loads: before torch, as above.
os.environ.setdefault("GOMP_SPINCOUNT", "10000")

# glibc's allocator, tuned for a run loop (``TUNABLES``):
# - Its per-thread cache (tcache) keeps 7 freed blocks of each small size; a compiled step frees
#   more buffers than that of one size, and the rest went back to the arena under its lock. With
#   64 (and torch's tensors from malloc, samplers/allocator.py) HMC on 64 banana chains took
#   8.2 us a step instead of 9.7 (bench/RESULTS.md, the reading after the 2026-11-25 11:32 jobs
#   run).
# - It gives large freed blocks back to the kernel (blocks over a threshold that adapts up to
#   32 MB are mmapped and unmapped on free; the heap's top is trimmed past 2x that), and the
#   loop allocates the same block sizes again at once: a block's records, the records a flush
#   holds. Each page taken anew is a page fault and a page zeroed: ~0.1 s a GB on bare metal,
#   0.5 s on the 2-core VM. There the banana's 4096 chains recording every step took ~52,000
#   faults a run through jobs (~0.2 GB), and the bare loop 1,000 to 80,000 from run to run
#   (0.72-0.90 s); with mmap from 32 MB only and trimming past 512 MB, ~2,000 and none
#   (bench/RESULTS.md, the reading after the 2026-11-25 22:32 engine run). The cost: a process
#   keeps the memory it freed, up to what it held at once, for its next blocks.
# glibc reads its tunables once, at start-up: the processes Basin starts get them in their
# environment (``tuned_environ``), and ``python -m jobs`` / ``python -m bench`` start themselves
# again with them (``restart_tuned``).
TUNABLES = {
    "glibc.malloc.tcache_count": 64,
    "glibc.malloc.mmap_threshold": 32 << 20,  # glibc's largest
    "glibc.malloc.trim_threshold": 512 << 20,
}
_RESTARTED = "BASIN_TUNED"  # set before the restart: never twice, even where glibc drops them


def tuned_environ(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with glibc's ``TUNABLES`` added, each unless it is set
    already; none with BASIN_ALLOCATOR=torch (torch's and glibc's defaults, for A/B runs)."""
    env = dict(os.environ if env is None else env)
    if env.get("BASIN_ALLOCATOR", "malloc") != "malloc":
        return env
    tunables = [t for t in env.get("GLIBC_TUNABLES", "").split(":") if t]
    given = {t.split("=", 1)[0] for t in tunables}
    tunables += [f"{name}={value}" for name, value in TUNABLES.items() if name not in given]
    env["GLIBC_TUNABLES"] = ":".join(tunables)
    return env


def glibc() -> bool:
    """Whether this process runs on glibc (whose tunables ``tuned_environ`` sets)."""
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (AttributeError, ValueError, OSError):  # not a POSIX confstr, or not glibc's name
        return False


def restart_tuned() -> None:
    """Re-executes this program (same pid, same arguments) with ``tuned_environ`` when glibc
    started without it. Call it first thing in a ``__main__``, before torch is imported."""
    import sys

    env = tuned_environ()
    if not glibc() or os.environ.get(_RESTARTED) or env == os.environ:
        return
    env[_RESTARTED] = "1"
    try:
        os.execve(sys.executable, sys.orig_argv, env)
    except OSError:  # e.g. no executable to start again: run as we are
        return
