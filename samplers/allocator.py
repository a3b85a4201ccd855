"""torch's CPU tensors from malloc (``cpu_allocator.cpp``): a compiled step's buffers come from
glibc's per-thread cache instead of its arena.

A compiled chunk (``samplers.fused``) allocates every intermediate buffer of its loop body anew
at each step, and c10 takes each from posix_memalign, which glibc serves under the arena's lock,
never from its per-thread cache. HMC on 64 banana chains, a few microseconds of arithmetic a
step, took 11.4-12.3 us a step with c10's allocator, 9.7 with this one, and 8.2 with glibc's
cache raised as well (bench/RESULTS.md, the reading after the 2026-11-25 11:32 jobs run). The
replacement allocator asks malloc for 64 bytes more and aligns by hand; it is built once per
torch version with the C++ compiler that torch.compile already needs, cached, and loaded with
ctypes. Where it cannot be built (no compiler, not Linux) torch's allocator stays, and nothing
else changes: it is a speed-up, never a requirement. ``BASIN_ALLOCATOR=torch`` keeps torch's.

glibc's per-thread cache holds 7 blocks of a size by default, fewer than a step's buffers of one
size; ``jobs.tuned_environ`` raises that for the processes Basin starts (glibc reads it at
start-up only).
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

import torch

from landscapes import native

SOURCE = Path(__file__).with_name("cpu_allocator.cpp")
ENV = "BASIN_ALLOCATOR"  # "malloc" (the default) or "torch"


def wanted() -> bool:
    """Whether Basin replaces torch's CPU allocator here: on Linux, unless BASIN_ALLOCATOR=torch."""
    return sys.platform.startswith("linux") and os.environ.get(ENV, "malloc") == "malloc"


def _library() -> ctypes.CDLL | None:
    """The allocator built for this torch (~0.5 s once, then cached), or None where it fails."""
    root = Path(torch.__file__).parent
    flags = [
        "-O2",
        "-std=c++17",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        f"-I{root / 'include'}",
    ]
    libs = [f"-L{root / 'lib'}", "-lc10", f"-Wl,-rpath,{root / 'lib'}"]
    lib = native.load(SOURCE, flags, libs, key=torch.__version__)
    if lib is not None:
        lib.basin_use_malloc.argtypes = [ctypes.c_int, ctypes.c_int]
    return lib


def _huge_pages() -> bool:
    """c10's own reading of THP_MEM_ALLOC_ENABLE (``jobs`` sets it before torch allocates)."""
    return os.environ.get("THP_MEM_ALLOC_ENABLE", "0").strip().lower() in {"1", "true", "yes", "on"}


def _switch(on: bool) -> bool:
    lib = _library()
    return lib is not None and bool(lib.basin_use_malloc(int(on), int(_huge_pages())))


def install() -> bool:
    """Makes the malloc allocator torch's CPU allocator where ``wanted()``; returns whether it is
    in use. Called by ``import samplers``; tensors made before keep their own deleter."""
    return wanted() and _switch(True)


def uninstall() -> None:
    """Back to torch's allocator (for A/B measurements); tensors keep their own deleter."""
    if native.loaded(SOURCE):
        _switch(False)


def active() -> bool:
    """Whether torch's CPU tensors now come from the malloc allocator."""
    lib = native.loaded(SOURCE)
    return lib is not None and bool(lib.basin_malloc_active())
