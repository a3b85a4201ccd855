"""Basin's own C++ (``*.cpp`` beside the modules that use them): built on first use with the
compiler torch.compile already needs, cached, and loaded with ctypes.

Two pieces use it: torch's CPU tensors from malloc (``samplers/allocator.py``) and the MLP's
loss over a plane (``plane_kernel.cpp``). Each is a speed-up, never a requirement: where the
build or the load fails (no compiler, not Linux, no OpenMP) the caller keeps its torch path,
and the reason is logged once.

A build is cached under ``$XDG_CACHE_HOME/basin`` (else ``~/.cache/basin``), named by a hash of
the source, the compiler, its flags and, for ``-march=native`` builds, this CPU's features, so a
home directory shared by different machines never loads code built for another CPU. Concurrent
builders each write their own file and rename it into place: one wins, none reads a torn one.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import subprocess
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)
_loaded: dict[Path, ctypes.CDLL | None] = {}  # a failed build is not retried in a process


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "basin"
    try:
        base.mkdir(parents=True, exist_ok=True)
        return base
    except OSError:  # a read-only home
        fallback = Path(tempfile.gettempdir()) / f"basin-{os.getuid()}"
        fallback.mkdir(parents=True, exist_ok=True)
        return fallback


def cpu_signature() -> str:
    """What ``-march=native`` compiles for: the CPU's model and feature flags."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    wanted = ("model name", "flags", "Features", "CPU part")  # x86 and ARM spellings
    return "\n".join(sorted({line for line in lines if line.split(":")[0].strip() in wanted}))


def build(
    source: Path, flags: list[str], libs: list[str], key: str = "", directory: Path | None = None
) -> Path:
    """The shared library compiled from ``source`` (cached in ``directory``, by default
    ``cache_dir()``; ~0.5-2 s the first time). ``key``: whatever else the build depends on (the
    torch it links against)."""
    compiler = os.environ.get("CXX", "c++")
    parts = [source.read_text(), compiler, *flags, *libs, key]
    if "-march=native" in flags:
        parts.append(cpu_signature())
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    out = (directory or cache_dir()) / f"{source.stem}-{digest}.so"
    if not out.exists():
        partial = out.with_name(f"{out.name}.{os.getpid()}.tmp")
        command = [compiler, *flags, "-shared", "-fPIC", str(source), *libs, "-o", str(partial)]
        subprocess.run(command, check=True, capture_output=True, timeout=120)
        os.replace(partial, out)
    return out


def load(source: Path, flags: list[str], libs: list[str], key: str = "") -> ctypes.CDLL | None:
    """``build`` and load ``source`` once per process; None (logged) where that fails."""
    if source not in _loaded:
        try:
            _loaded[source] = ctypes.CDLL(str(build(source, flags, libs, key)))
        except (OSError, subprocess.SubprocessError) as exc:
            detail = (getattr(exc, "stderr", b"") or b"").decode(errors="replace")
            log.info("%s not built, torch's path kept: %s %s", source.name, exc, detail)
            _loaded[source] = None
    return _loaded[source]


def loaded(source: Path) -> ctypes.CDLL | None:
    """The library ``load`` made from ``source`` in this process, if any (never builds)."""
    return _loaded.get(source)
