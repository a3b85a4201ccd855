"""The house's rules, checked on the source (docs/ARCHITECTURE.md): rooms import one way, no import
cycles (not even through an import inside a function), no module over 600 lines, no function over
80, core packages free of Streamlit and charts free of torch; and every module imports in a fresh
interpreter."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ("app", "pages", "ui", "charts", "cli", "jobs", "studies", "runs", "samplers", "landscapes")
ROOMS += ("examples",)
# What each room may import of Basin (ARCHITECTURE.md, "Rooms"): dependencies point one way.
ALLOWED = {
    "landscapes": set(),
    "samplers": {"landscapes"},
    "runs": {"samplers", "landscapes"},
    "studies": {"runs", "samplers", "landscapes"},
    "cli": {"studies", "runs", "samplers", "landscapes"},
    "jobs": {"cli"},
    "charts": set(),
    "ui": {"charts", "studies", "runs", "samplers", "landscapes"},
    "pages": {"ui", "charts", "studies", "runs", "samplers", "landscapes"},
    "app": {"ui", "runs"},
    "examples": set(),
}
NO_STREAMLIT = {"landscapes", "samplers", "runs", "studies", "cli", "jobs", "charts", "examples"}
NO_TORCH = {"charts"}
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
# Modules or functions over the limits, each with a one-line reason. Empty: none is.
EXCEPTIONS: dict[str, str] = {}


def modules() -> dict[str, Path]:
    """Every module of Basin's rooms, by dotted name."""
    found = {"app": ROOT / "app.py"}
    for room in ROOMS[1:]:
        for path in sorted((ROOT / room).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imports(name: str, path: Path, known: dict) -> set[str]:
    """The Basin modules ``name`` imports, anywhere in the file (inside functions too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:  # `from x.y import name`: the module is x.y
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def _external(path: Path) -> set[str]:
    """Top-level names of the packages a file imports."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def _room(module: str) -> str:
    return module.split(".")[0]


def test_rooms_import_one_way(graph):
    wrong = [
        f"{m} imports {d}"
        for m, deps in graph.items()
        for d in deps
        if _room(d) != _room(m) and _room(d) not in ALLOWED[_room(m)]
    ]
    assert not wrong, "\n".join(wrong)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles(graph):
    assert _cycles(graph) == []


def test_modules_and_functions_stay_small():
    over = []
    for name, path in modules().items():
        source = path.read_text()
        lines = source.count("\n")
        if lines > MAX_MODULE_LINES and name not in EXCEPTIONS:
            over.append(f"{name}: {lines} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                key = f"{name}.{node.name}"
                if length > MAX_FUNCTION_LINES and key not in EXCEPTIONS:
                    over.append(f"{key} (line {node.lineno}): {length} lines")
    assert not over, "\n".join(over)


def test_core_rooms_never_import_streamlit_and_charts_never_torch():
    wrong = []
    for name, path in modules().items():
        used = _external(path)
        if _room(name) in NO_STREAMLIT and "streamlit" in used:
            wrong.append(f"{name} imports streamlit")
        if _room(name) in NO_TORCH and "torch" in used:
            wrong.append(f"{name} imports torch")
    assert not wrong, "\n".join(wrong)


@pytest.mark.slow
def test_every_module_imports_in_a_fresh_interpreter(graph):
    """Imported leaves first (the dependency order), all in one fresh interpreter: a module that
    only worked because another had been imported before it fails here."""
    order, seen = [], set()

    def visit(m: str) -> None:
        if m not in seen:
            seen.add(m)
            for d in sorted(graph[m]):
                visit(d)
            order.append(m)

    for m in sorted(graph):
        visit(m)
    names = [m for m in order if m not in ("app", "jobs.__main__") and _room(m) != "pages"]
    code = f"import importlib\nfor m in {names!r}:\n    importlib.import_module(m)\n"
    # a subprocess: this process has imported most modules already, hiding a missing import
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
