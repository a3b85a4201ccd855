"""The ``model`` target in the app, headless (no Streamlit here, so it is unit-tested directly):
which factories the app offers, and the checkpoints it keeps.

The web app never runs code it was sent. Factories are the ``make`` / ``make_*`` functions of
the ``*.py`` files in the directory named by ``$BASIN_MODELS`` (the operator's code, listed by
parsing with ``ast``, never imported to list them), or the bundled example when it is unset. A
file that cannot be listed (unreadable, not Python, nested too deeply to parse, over
``MAX_FACTORY_BYTES``: skipped unread) is left out with a one-line notice naming it; a link that
leads out of the directory is left out too, for factories and checkpoints alike.
An uploaded checkpoint is weights only: written to a temporary file under
``$BASIN_HOME/checkpoints/``, read with ``landscapes.model.load_weights`` (weights-only
unpickling or safetensors: a pickle that would run code is refused) and loaded into a fresh
module from the factory (``apply_weights``: every tensor's name and shape) before it is kept;
refused, it is deleted.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import re
import stat
import tempfile
from pathlib import Path
from types import SimpleNamespace

from landscapes import ParamError
from landscapes.model import (
    apply_weights,
    call_factory,
    checkpoint_limit,
    load_weights,
    make_model,
)
from landscapes.networks import Network
from studies.checkpoints import by_step

ENV = "BASIN_MODELS"  # a directory of factory files (and checkpoints) the app may offer
BUNDLED = "examples.digits_mlp:make"  # offered when BASIN_MODELS is unset
MAX_CHECKPOINT_BYTES = 256 * 2**20  # an upload's cap: the digits MLP's weights are 40 kB
UPLOAD_TYPES = ("pt", "pth", "bin", "safetensors")  # what the uploader accepts
FOUND_TYPES = (".pt", ".pth", ".safetensors")  # checkpoints listed from under BASIN_MODELS
MAX_FACTORY_BYTES = 2**20  # a factory file is parsed up to 1 MiB; larger ones are not read
FIELD = "model.checkpoint"


def models_dir() -> Path | None:
    """``$BASIN_MODELS`` as an absolute path, or None when unset (or empty)."""
    value = os.environ.get(ENV, "").strip()
    return Path(value).expanduser().resolve() if value else None


def is_factory(node: ast.stmt) -> bool:
    """A top-level ``def make`` or ``def make_*`` that can be called with no arguments (every
    argument has a default): a factory's signature."""
    if not isinstance(node, ast.FunctionDef):
        return False
    if node.name != "make" and not node.name.startswith("make_"):
        return False
    args = node.args
    positional = len(args.posonlyargs) + len(args.args)
    kw_required = sum(default is None for default in args.kw_defaults)
    return positional == len(args.defaults) and kw_required == 0


def list_factories(directory: str | os.PathLike) -> list[str]:
    """``"/abs/path/file.py:make"`` for every factory (``is_factory``) of every ``*.py`` file
    directly in ``directory``, by file then order in it (``scan_factories``'s factories)."""
    return scan_factories(directory)[0]


def scan_factories(directory: str | os.PathLike) -> tuple[list[str], list[str]]:
    """The factories of ``directory``'s ``*.py`` files, and a one-line notice for each file
    left out: one that cannot be read or parsed (a syntax error, nesting too deep for the
    parser: MemoryError, RecursionError), one over ``MAX_FACTORY_BYTES`` (not read), one that
    is not a regular file, and a link leading out of ``directory``. Nothing is imported."""
    directory = Path(directory).expanduser().resolve()
    if not directory.is_dir():
        return [], []
    out, notices = [], []
    for path in sorted(directory.glob("*.py")):
        names, why = _factories_of(path, directory)
        out += [f"{path}:{name}" for name in names]
        if why:
            notices.append(f"{path.name}: left out, {why}")
    return out, notices


def inside(path: Path, directory: Path) -> bool:
    """Whether ``path``, its links followed, is in ``directory`` (itself resolved)."""
    try:
        return path.resolve().is_relative_to(directory)
    except (OSError, RuntimeError):  # a link loop
        return False


def _factories_of(path: Path, directory: Path) -> tuple[tuple[str, ...], str | None]:
    """The factory names of one file, or why it is left out."""
    if not inside(path, directory):
        return (), "a link to a file outside BASIN_MODELS"
    try:
        info = path.stat()
    except OSError as exc:
        return (), f"it cannot be read ({exc.strerror or exc})"
    if not stat.S_ISREG(info.st_mode):
        return (), "not a regular file"
    if info.st_size > MAX_FACTORY_BYTES:
        return (), (
            f"{size_text(info.st_size)}, over the {size_text(MAX_FACTORY_BYTES)} a factory file "
            "may hold (not read)"
        )
    return _parsed(str(path.resolve()), info.st_mtime_ns, info.st_size)


@functools.lru_cache(maxsize=256)
def _parsed(path: str, mtime_ns: int, size: int) -> tuple[tuple[str, ...], str | None]:
    """A file's factory names (parsed once per version), or why it cannot be listed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO swapped in: no wait
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return (), "not a regular file"
            source = f.read(MAX_FACTORY_BYTES + 1)
        if len(source) > MAX_FACTORY_BYTES:
            return (), f"over the {size_text(MAX_FACTORY_BYTES)} a factory file may hold"
        tree = ast.parse(source, filename=path)
    except OSError as exc:
        return (), f"it cannot be read ({exc.strerror or exc})"
    except (SyntaxError, ValueError) as exc:  # not Python, not UTF-8, a NUL byte
        line = f" (line {exc.lineno})" if getattr(exc, "lineno", None) else ""
        return (), f"it does not parse: {type(exc).__name__}{line}: {_first(exc)}"
    except (MemoryError, RecursionError) as exc:  # nesting deeper than the parser's stack
        return (), f"it nests too deeply to parse ({type(exc).__name__})"
    return tuple(node.name for node in tree.body if is_factory(node)), None


def _first(exc: BaseException) -> str:
    text = getattr(exc, "msg", None) or str(exc)
    return " ".join(str(text).split())[:120]


def factories() -> list[str]:
    """What the factory selectbox offers: BASIN_MODELS's factories, or the bundled example."""
    return listing()[0]


def listing() -> tuple[list[str], list[str]]:
    """``factories()`` and the notices of the files left out (``scan_factories``)."""
    directory = models_dir()
    return ([BUNDLED], []) if directory is None else scan_factories(directory)


def found_checkpoints() -> list[str]:
    """Checkpoint files (``FOUND_TYPES``) anywhere under BASIN_MODELS, absolute; [] unset. A
    link leading out of BASIN_MODELS is left out."""
    directory = models_dir()
    if directory is None or not directory.is_dir():
        return []
    return [
        str(p)
        for p in sorted(directory.rglob("*"))
        if p.suffix in FOUND_TYPES
        and not p.name.startswith(".")
        and p.is_file()
        and inside(p, directory)
    ]


# ---------------------------------------------------------------------------------------------
# Kept checkpoints: one folder per factory under $BASIN_HOME/checkpoints/.


def checkpoint_root(home: str | os.PathLike) -> Path:
    return Path(home) / "checkpoints"


def checkpoint_dir(home: str | os.PathLike, factory: str) -> Path:
    """Where the checkpoints accepted for ``factory`` are kept: its file's (or module's) name
    and a digest of the whole reference, so two factories never share one."""
    where, _, attr = factory.rpartition(":")
    stem = Path(where).stem if where.endswith(".py") else where.rpartition(".")[2]
    digest = hashlib.sha1(factory.encode()).hexdigest()[:10]
    return checkpoint_root(home) / f"{safe_name(stem)}-{safe_name(attr)}-{digest}"


def safe_name(name: str) -> str:
    """A file name's last part with anything but letters, digits, '.', '-' and '_' as '_'
    (no folders, no leading dot)."""
    base = re.sub(r"[^A-Za-z0-9._-]", "_", Path(str(name).replace("\\", "/")).name)
    return base.lstrip(".") or "checkpoint"


def kept_checkpoints(home: str | os.PathLike, factory: str) -> list[str]:
    folder = checkpoint_dir(home, factory)
    if not folder.is_dir():
        return []
    return [str(p) for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")]


def checkpoint_choices(home: str | os.PathLike, factory: str) -> list[str]:
    """The checkpoints offered for ``factory``: those kept for it and those found under
    BASIN_MODELS, by step."""
    return by_step(dict.fromkeys([*kept_checkpoints(home, factory), *found_checkpoints()]))


def size_text(n: int) -> str:
    return f"{n / 2**20:.3g} MB" if n >= 2**20 else f"{n / 2**10:.3g} kB" if n >= 1024 else f"{n} B"


def accept_checkpoint(
    data: bytes, name: str, factory: str, home: str | os.PathLike, cap: int | None = None
) -> str:
    """Keep the uploaded checkpoint ``data`` (file name ``name``) for ``factory``: the kept
    file's path. Refused with a ParamError naming ``model.checkpoint``, and nothing left on
    disk, when it is over ``cap`` bytes (default ``MAX_CHECKPOINT_BYTES``), not one of
    ``UPLOAD_TYPES``, not weights only (a pickle that would run code: it is never unpickled
    beyond tensors), or not the factory module's tensors by name and shape."""
    cap = MAX_CHECKPOINT_BYTES if cap is None else cap
    shown = safe_name(name)
    if len(data) > cap:
        raise ParamError(
            FIELD, f"{shown} is {size_text(len(data))}, over the cap of {size_text(cap)}"
        )
    suffix = Path(shown).suffix.lower()
    if suffix.lstrip(".") not in UPLOAD_TYPES:
        raise ParamError(
            FIELD, f"{shown} must be one of .{', .'.join(UPLOAD_TYPES)}, got {suffix or 'none'}"
        )
    root = checkpoint_root(home)
    root.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(prefix=".upload-", suffix=suffix, dir=root)
    temp = Path(temp)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        try:
            module = call_factory(factory)[0]
            state = load_weights(temp, checkpoint_limit(module))  # a zip bomb: never inflated
            apply_weights(module, state, shown)
        except ParamError as exc:
            message = str(exc).removeprefix(f"{exc.field}: ").replace(temp.name, shown)
            raise ParamError(exc.field, message) from None
        except Exception as exc:  # a tensor that cannot become the module's (dtype, ...)
            raise ParamError(FIELD, f"{shown} does not load: {type(exc).__name__}: {exc}") from None
        folder = checkpoint_dir(home, factory)
        folder.mkdir(parents=True, exist_ok=True)
        kept, k = folder / shown, 1
        while kept.exists():  # a stored run may name it: never overwritten
            if kept.read_bytes() == data:
                return str(kept)
            k += 1  # a prefix: the name's last integer stays the training step
            kept = folder / f"{k}_{shown}"
        os.replace(temp, kept)
        return str(kept)
    finally:
        temp.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------
# The loss convention in words.


def loss_text(task: str, convention: str = "sum") -> str:
    """A network's loss in words (``Network.loss_doc``'s, for a ``task`` and convention, with
    nothing built): the page's caption under the network."""
    doc = Network.loss_doc(SimpleNamespace(task=task, loss_convention=convention))
    if doc is None:
        return "Loss: cross-entropy averaged over samples (a classifier: loss_convention unused)"
    return f"Loss: {doc} (loss_convention={convention})"


def describe_model(factory: str) -> dict:
    """A factory's loss and modes in words (``Model.loss_doc``, ``Model.describe_modes``):
    the module is built once per factory file version."""
    path = factory.rpartition(":")[0]
    stamp = os.stat(path).st_mtime_ns if path.endswith(".py") and os.path.isfile(path) else None
    return dict(_describe(factory, stamp))


@functools.lru_cache(maxsize=16)
def _describe(factory: str, stamp) -> dict:
    target = make_model(factory)
    doc = target.loss_doc() or "cross-entropy averaged over samples"
    return {"loss": f"Loss: {doc}", "modes": target.describe_modes()}


# ---------------------------------------------------------------------------------------------
# The LLC over training's table.


def checkpoint_rows(cells: list[dict]) -> tuple[list[dict], list[dict]]:
    """``studies.checkpoints.results``'s cells as table rows (step, checkpoint, λ̂ ± SE,
    training loss, status, warnings) and, per row, the tint of every column ({column: "warn"
    | "fail"}): amber for a cell whose verdict is warn or whose LLC warned, red for fail."""
    rows, flags = [], []
    for cell in cells:
        done = cell.get("llc") is not None
        se = cell.get("se")
        estimate = "–"
        if done:
            estimate = f"{cell['llc']:.4g}" + (f" ± {se:.2g}" if se is not None else "")
        warnings = list(cell.get("warnings") or [])
        verdict = cell.get("verdict")
        loss = cell.get("train_loss")
        row = {
            "step": cell["step"],
            "checkpoint": cell["checkpoint"],
            "λ̂ ± SE": estimate,
            "train loss": float("nan") if loss is None else loss,  # a number column: "–"
            "status": cell["status"],
            "verdict": verdict or "",
            "warnings": ", ".join(warnings),
        }
        level = "fail" if verdict == "fail" else "warn" if (verdict == "warn" or warnings) else ""
        rows.append(row)
        flags.append(dict.fromkeys(row, level) if level else {})
    return rows, flags
