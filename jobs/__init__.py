"""Background runs: the validated RunSpec, the run loop, the embedded Store, workers and the CLI.

The one path by which both the app and the command line run anything (DESIGN.md, "jobs").
"""

import os

# torch's CPU allocator page-aligns tensors of 2 MB or more (and asks for huge pages for them) when
# this is set before its first allocation, so ``import jobs`` before torch. The Store then writes
# a run's records to disk from where they lie (O_DIRECT needs aligned memory) instead of copying
# them through a staging buffer: 1 GB of records cost the 2-core VM's sampler ~0.1 s less
# (bench/RESULTS.md, 2026-11-24). Workers and ``python -m jobs`` import this first.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

# libgomp's threads spin ~7 ms (300,000 spins) after a parallel region before they sleep. A
# compiled chunk ends in one, and the next chunk's noise is then drawn on two threads
# (samplers.fused.fill) while a spinning thread still holds the other core: the draw ran no
# faster than on one. With 10,000 spins (digits MLP, 8 chains): 46 -> 25 us of noise a step, its
# run through jobs (25-step blocks between snapshots) 0.61 -> 0.53 s, the surfaces' eager loops
# unchanged within the host's noise. libgomp reads it when it loads: before torch, as above.
os.environ.setdefault("GOMP_SPINCOUNT", "10000")

# glibc's per-thread cache (tcache) keeps 7 freed blocks of each small size; a compiled step frees
# more buffers than that of one size, and the rest went back to the arena under its lock. With 64
# (and torch's tensors from malloc, samplers/allocator.py) HMC on 64 banana chains took 8.2 us a
# step instead of 9.7 (bench/RESULTS.md, the reading after the 2026-11-25 11:32 jobs run). glibc
# reads its tunables once, at start-up: the processes Basin starts get them in their environment
# (``tuned_environ``), and ``python -m jobs`` / ``python -m bench`` start themselves again with
# them (``restart_tuned``).
TCACHE_TUNABLE = "glibc.malloc.tcache_count"
TCACHE_COUNT = 64
_RESTARTED = "BASIN_TUNED"  # set before the restart: never twice, even where glibc drops them


def tuned_environ(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with glibc's tcache raised, unless BASIN_ALLOCATOR=torch
    or the tunable is set already."""
    env = dict(os.environ if env is None else env)
    tunables = env.get("GLIBC_TUNABLES", "")
    if env.get("BASIN_ALLOCATOR", "malloc") == "malloc" and TCACHE_TUNABLE + "=" not in tunables:
        tuned = f"{TCACHE_TUNABLE}={TCACHE_COUNT}"
        env["GLIBC_TUNABLES"] = f"{tunables}:{tuned}" if tunables else tuned
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
