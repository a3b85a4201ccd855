"""Compiled chunks kept on disk, so that a kernel compiled once on a machine starts compiled in
every later process (``samplers.compiled`` builds and loads them; this module only files them).

An entry is a package file (``<key>.pt2``) and its card (``<key>.json``): what it was built
for, its size and the SHA-256 of its bytes. The key is a hash of everything the compiled code
depends on: the kernel and the target (their classes, hyperparameters and every tensor they
hold, by content), the source files of the classes involved, the state's and the draws' shapes
and dtypes, the block length, the device, and the versions of torch and Python. A file whose
bytes do not match its card (a half-written, damaged or swapped file) is deleted and rebuilt,
never loaded. The folder is ``$BASIN_CACHE`` (default ``~/.cache/basin``), ``compiled/``; it
is kept under ``CAP_BYTES`` by removing the least recently used entries.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

CAP_BYTES = 2 << 30  # 2 GiB: a 2-D target's package is ~1.6 MB, a network's its weights more
VERSION = 1  # of the key's layout and the card's fields: bump when either changes


def folder() -> Path:
    """Where the compiled chunks live: $BASIN_CACHE/compiled (default ~/.cache/basin)."""
    root = os.environ.get("BASIN_CACHE")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "basin")
    return Path(root) / "compiled"


# -- the key ----------------------------------------------------------------------------------
_SOURCES: dict[str, str] = {}  # a module's file -> its hash, read once a process


def _source_hash(cls: Any) -> str | None:
    """The hash of the file that defines ``cls`` (a class or function): its code is part of
    what compiles."""
    module = sys.modules.get(getattr(cls, "__module__", None) or "")
    path = getattr(module, "__file__", None)
    if not path:
        return None
    if path not in _SOURCES:
        try:
            _SOURCES[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
        except OSError:
            _SOURCES[path] = "unreadable"
    return _SOURCES[path]


def fingerprint(obj: Any, skip: frozenset[str] = frozenset({"_chunks", "_paired"})) -> str:
    """A hash of ``obj``'s value as a compiled step sees it: tensors by dtype, shape, device and
    bytes; numbers, strings and containers by value; objects by class, class source file and
    attributes (recursively); functions by their code. ``skip``: attribute names left out (a
    kernel's caches of its chunks and LLC pairings, keyed by object ids)."""
    digest = hashlib.sha256()
    seen: set[int] = set()

    def put(*parts: Any) -> None:
        for part in parts:
            digest.update(str(part).encode())
            digest.update(b"\x00")

    def walk(x: Any) -> None:
        if x is None or isinstance(x, (bool, int, float, complex, str, bytes)):
            put(type(x).__name__, repr(x))
        elif isinstance(x, torch.Tensor):
            data = x.detach().to("cpu").contiguous()
            put("tensor", data.dtype, tuple(data.shape), x.device.type, x.requires_grad)
            if data.numel():
                digest.update(memoryview(data.reshape(-1).view(torch.uint8).numpy()))
        elif isinstance(x, (torch.dtype, torch.device, torch.Size)):
            put(type(x).__name__, x)
        elif id(x) in seen:
            put("seen", type(x).__qualname__)
        elif isinstance(x, (list, tuple, set, frozenset)):
            seen.add(id(x))
            items = sorted(x, key=repr) if isinstance(x, (set, frozenset)) else x
            put(type(x).__name__, len(items))
            for item in items:
                walk(item)
        elif isinstance(x, dict):
            seen.add(id(x))
            put("dict", len(x))
            for k in sorted(x, key=repr):
                if k not in skip:
                    walk(k)
                    walk(x[k])
        elif isinstance(x, type):
            put("class", x.__module__, x.__qualname__, _source_hash(x))
        elif isinstance(x, torch.Generator):  # steps read the run's Noise, never a generator
            put("generator", x.device)
        elif callable(x) and hasattr(x, "__qualname__") and not hasattr(x, "__dict__"):
            put("builtin", getattr(x, "__module__", None), x.__qualname__)  # e.g. torch.tanh
        elif callable(x) and hasattr(x, "__code__"):  # a function or lambda: its file's code
            seen.add(id(x))
            put("function", x.__module__, x.__qualname__, _source_hash(x))
            walk(getattr(x, "__self__", None))
            walk([_cell(c) for c in x.__closure__ or ()])
        else:
            seen.add(id(x))
            cls = type(x)
            for base in cls.__mro__[:-1]:
                put("class", base.__module__, base.__qualname__, _source_hash(base))
            state = getattr(x, "__dict__", None)
            if state is None:
                text = repr(x)  # an object's address (a weakref's, a generator's) is no value
                put("opaque", cls.__qualname__, "" if " at 0x" in text else text)
            else:
                walk({k: v for k, v in state.items() if k not in skip})

    walk(obj)
    return digest.hexdigest()


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # a cell not yet filled
        return None


def code() -> str:
    """A hash of Basin's code a step can run: every module of ``samplers`` and ``landscapes``."""
    if "basin" not in _SOURCES:
        digest = hashlib.sha256()
        for package in ("samplers", "landscapes"):
            for path in sorted(Path(sys.modules[package].__file__).parent.glob("*.py")):
                digest.update(path.name.encode() + b"\x00" + path.read_bytes())
        _SOURCES["basin"] = digest.hexdigest()
    return _SOURCES["basin"]


def key(**parts: Any) -> str:
    """The entry's name: a hash of ``parts`` (already hashed or plain values) and the versions
    of the layout, torch, Python and the platform."""
    versions = {"layout": VERSION, "torch": torch.__version__, "python": sys.version}
    versions["machine"] = platform.machine()
    text = json.dumps({**parts, **versions}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:40]


# -- files --------------------------------------------------------------------------------------
def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def find(name: str) -> tuple[Path, dict] | None:
    """The package of entry ``name`` and its card, if both exist and the bytes match the card;
    a damaged entry is removed (the caller rebuilds it)."""
    base = folder()
    package, card = base / f"{name}.pt2", base / f"{name}.json"
    if not package.exists() or not card.exists():
        return None
    try:
        meta = json.loads(card.read_text())
        if meta.get("sha256") != _sha256(package):
            raise ValueError("the package's bytes do not match its card")
    except (OSError, ValueError):
        remove(name)
        return None
    os.utime(card)  # used now: the least recently used go first when over the cap
    return package, meta


def workspace() -> tempfile.TemporaryDirectory:
    """A temporary folder inside the cache's (removed on exit; ``clear`` removes one a killed
    process left): a package built there moves into place by a rename, never a copy."""
    base = folder()
    base.mkdir(parents=True, exist_ok=True)
    return tempfile.TemporaryDirectory(prefix="build-", suffix=".tmp", dir=base)


def save(name: str, built: Path, meta: dict) -> Path:
    """File the package at ``built`` (in a ``workspace``; moved) as entry ``name`` with its
    card; then trim the folder to the cap. Each file is renamed into place: a reader never sees
    half of one, and a package without its card is not found."""
    base = folder()
    package = base / f"{name}.pt2"
    tag = f".{os.getpid()}.{time.monotonic_ns()}.tmp"
    os.replace(built, package)
    meta = {**meta, "sha256": _sha256(package), "bytes": package.stat().st_size}
    meta["created"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    card = base / f"{name}.json"
    card.with_name(card.name + tag).write_text(json.dumps(meta, indent=1))
    os.replace(card.with_name(card.name + tag), card)
    trim()
    return package


def refuse(name: str, why: str) -> None:
    """Note that entry ``name`` cannot be built (its export fails), so that later processes
    compile in-process at once instead of failing the export again (seconds each)."""
    base = folder()
    base.mkdir(parents=True, exist_ok=True)
    (base / f"{name}.refused").write_text(why[:2000])


def refused(name: str) -> bool:
    return (folder() / f"{name}.refused").exists()


def remove(name: str) -> None:
    for suffix in (".pt2", ".json", ".refused"):
        (folder() / f"{name}{suffix}").unlink(missing_ok=True)


def entries() -> list[dict]:
    """Every entry's card (with its ``name``), least recently used first."""
    base = folder()
    out = []
    for card in base.glob("*.json") if base.exists() else []:
        try:
            meta = json.loads(card.read_text())
            out.append({**meta, "name": card.stem, "used": card.stat().st_mtime})
        except (OSError, ValueError):
            continue
    return sorted(out, key=lambda m: m["used"])


def trim(cap: int | None = None) -> None:
    """Remove the least recently used entries until the folder's packages fit in ``cap``
    (default ``CAP_BYTES``)."""
    cap = CAP_BYTES if cap is None else cap
    listed = entries()
    total = sum(m.get("bytes", 0) for m in listed)
    for meta in listed:
        if total <= cap:
            break
        remove(meta["name"])
        total -= meta.get("bytes", 0)


def clear() -> tuple[int, int]:
    """Remove every entry (and stray temporary files): (entries, bytes) removed."""
    base = folder()
    listed = entries()
    for meta in listed:
        remove(meta["name"])
    for stray in [*base.glob("*.tmp"), *base.glob("*.refused")] if base.exists() else []:
        if stray.is_dir():
            shutil.rmtree(stray, ignore_errors=True)
        else:
            stray.unlink(missing_ok=True)
    return len(listed), sum(m.get("bytes", 0) for m in listed)
