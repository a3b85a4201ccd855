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
import hashlib
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("cpu_allocator.cpp")
ENV = "BASIN_ALLOCATOR"  # "malloc" (the default) or "torch"
log = logging.getLogger(__name__)
_lib: ctypes.CDLL | None = None
_failed = False  # a build or load failed once: not retried in this process


def wanted() -> bool:
    """Whether Basin replaces torch's CPU allocator here: on Linux, unless BASIN_ALLOCATOR=torch."""
    return sys.platform.startswith("linux") and os.environ.get(ENV, "malloc") == "malloc"


def _cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "basin"
    try:
        base.mkdir(parents=True, exist_ok=True)
        return base
    except OSError:  # a read-only home
        fallback = Path(tempfile.gettempdir()) / f"basin-{os.getuid()}"
        fallback.mkdir(parents=True, exist_ok=True)
        return fallback


def _build() -> Path:
    """The shared library for this torch, compiled on first use (~0.5 s) and cached."""
    root = Path(torch.__file__).parent
    compiler = os.environ.get("CXX", "c++")
    flags = [
        "-O2",
        "-std=c++17",
        "-shared",
        "-fPIC",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        f"-I{root / 'include'}",
    ]
    libs = [f"-L{root / 'lib'}", "-lc10", f"-Wl,-rpath,{root / 'lib'}"]
    key = "\n".join([SOURCE.read_text(), torch.__version__, str(root), compiler, *flags])
    out = _cache_dir() / f"cpu_allocator-{hashlib.sha256(key.encode()).hexdigest()[:16]}.so"
    if not out.exists():
        partial = out.with_name(f"{out.name}.{os.getpid()}.tmp")  # concurrent builders: one wins
        command = [compiler, *flags, str(SOURCE), *libs, "-o", str(partial)]
        subprocess.run(command, check=True, capture_output=True, timeout=120)
        os.replace(partial, out)
    return out


def _huge_pages() -> bool:
    """c10's own reading of THP_MEM_ALLOC_ENABLE (``jobs`` sets it before torch allocates)."""
    return os.environ.get("THP_MEM_ALLOC_ENABLE", "0").strip().lower() in {"1", "true", "yes", "on"}


def _switch(on: bool) -> bool:
    global _lib, _failed
    if _lib is None:
        if _failed:
            return False
        try:
            lib = ctypes.CDLL(str(_build()))
        except (OSError, subprocess.SubprocessError) as exc:
            _failed = True
            detail = getattr(exc, "stderr", b"") or b""
            log.info("torch's CPU allocator kept: %s %s", exc, detail.decode(errors="replace"))
            return False
        lib.basin_use_malloc.argtypes = [ctypes.c_int, ctypes.c_int]
        _lib = lib
    return bool(_lib.basin_use_malloc(int(on), int(_huge_pages())))


def install() -> bool:
    """Makes the malloc allocator torch's CPU allocator where ``wanted()``; returns whether it is
    in use. Called by ``import samplers``; tensors made before keep their own deleter."""
    return wanted() and _switch(True)


def uninstall() -> None:
    """Back to torch's allocator (for A/B measurements); tensors keep their own deleter."""
    if _lib is not None:
        _switch(False)


def active() -> bool:
    """Whether torch's CPU tensors now come from the malloc allocator."""
    return _lib is not None and bool(_lib.basin_malloc_active())
