"""The documentation runs as written: README.md and docs/**/*.md stay true.

1. Every ```python block runs; the blocks of one file build on each other, in a fresh namespace
   per file, with a temporary BASIN_HOME and the repository root as the working folder.
2. Every command in a ```bash block that starts with ``python -m jobs`` or ``basin`` runs in this
   process (``cli.main.main``, through ``clitest.jobs``), in document order, against one
   temporary BASIN_HOME per file, in a temporary working folder (``--out run.nc`` lands there).
   ``ID`` stands for the id of the last run an earlier command of the file created; after
   ``sweep run|show|delete`` for the last sweep's. A command exits 0 unless its comment starts
   with ``exit N`` (``# exit 2: why``). A ```json block right after a bash block (only blank
   lines between) shows what the block's last command, a ``--json`` one, prints: the top-level
   keys printed must be the ones shown. ``json abbreviated`` marks a block whose long arrays or
   objects are cut with ``...``. The commands SKIP leaves out, and the ``$ python -m jobs``
   lines of ```console blocks (shown with their output, too slow to run here), must parse.
   Every ``python -m X`` of a bash or console block names a module that exists, and every
   ``python -m bench X`` a subcommand of bench's parser. A sweep runs on one worker (not one per
   core), and another file's copy of a command docs/cli.md runs is parsed there, not rerun.
3. No file of the repository refers to the folder of papers beside it (issue 57: a clone does
   not have it), every relative link of a Markdown file exists, and so does every backticked
   repository path of README.md and docs/.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)
EXIT = re.compile(r"\s#\s*exit\s+(\d+)\b")  # "# exit 2: why": the command is documented to fail
MODULE = re.compile(r"\bpython3?\s+-m\s+([\w.]+)")
BENCH = re.compile(r"\bpython3?\s+-m\s+bench\s+([\w-]+)")

# Commands of bash blocks that cannot run in a test, each with why (they are still parsed).
SKIP = [
    ("serves the queue until Ctrl-C (`worker --once` runs)", r"^worker\b(?!.*--once)"),
    ("needs a Ray cluster", r"--backend ray"),
    ("needs checkpoints the reader trains first (examples/train_digits.py)", r"checkpoint"),
    ("needs a spec file the reader writes first", r"^(run|submit) [^-]\S*\.json\b"),
]
# Backticked paths the docs tell a reader to create (outputs, virtualenvs): not in the repository.
CREATED = {"examples/out", "tati/", "bench/.peer-venv", "bench/.devinterp-venv"}
# Paths of the papers' folder beside the repository (issue 57: nothing may refer to it); written
# split so that this file does not match itself.
SHARED = ("../" + "shared", "shared" + "/reference", "shared" + "/papers")
FILE_ENDINGS = (".py", ".md", ".txt", ".toml", ".png", ".html", ".sh")
PLACEHOLDER = re.compile(r"\b(NAME|ID|OUT|PATH|FILE|DIR|X{3,})\b")  # bench/NAME.py: a template


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def blocks(path: Path) -> list[tuple[str, str]]:
    """The fenced blocks of a Markdown file, in order: (info string, body)."""
    return [(m[1].strip(), m[2]) for m in FENCE.finditer(path.read_text())]


def shown_output(path: Path) -> list[tuple[str, str, tuple[str, str] | None]]:
    """Each fenced block with the block right after it (only blank lines between), if any."""
    matches = list(FENCE.finditer(text := path.read_text()))
    found = []
    for m, after in zip(matches, [*matches[1:], None], strict=True):
        adjacent = after is not None and not text[m.end() : after.start()].strip()
        found.append((m[1].strip(), m[2], (after[1].strip(), after[2]) if adjacent else None))
    return found


def lines(body: str) -> list[str]:
    """A bash block's command lines: backslash continuations joined, comment lines left out."""
    joined = re.sub(r"\\\n\s*", " ", body)
    stripped = (line.strip() for line in joined.splitlines())
    return [line for line in stripped if line and not line.startswith("#")]


def console_commands(body: str) -> list[str]:
    """The ``$ ...`` lines of a console block (continuations joined); the rest is output."""
    joined = re.sub(r"\\\n\s*", " ", body)
    return [line[2:].strip() for line in joined.splitlines() if line.startswith("$ ")]


def _commands(path: Path, kinds: tuple[str, ...]) -> list[str]:
    """The command lines of a file's bash blocks and console blocks' ``$`` lines."""
    found = []
    for info, body in blocks(path):
        kind = info.split()[:1]
        if kind == ["bash"] and "bash" in kinds:
            found += lines(body)
        elif kind == ["console"] and "console" in kinds:
            found += console_commands(body)
    return found


def jobs_argv(line: str) -> list[str] | None:
    """The arguments of a ``python -m jobs`` or ``basin`` command; None for any other line."""
    if not re.match(r"(python -m jobs|basin)(\s|$)", line):
        return None
    words = shlex.split(line, comments=True)
    if words[:3] == ["python", "-m", "jobs"]:
        return words[3:]
    if words[:1] == ["basin"]:
        return words[1:]
    return None


def documented_keys(info: str, body: str) -> set[str]:
    """The top-level keys of a json block; ``json abbreviated`` may cut with ``...``."""
    if "abbreviated" in info.split():
        body = re.sub(r",\s*\.\.\.(?=\s*[\]}])", "", body)  # [1, 2, ...] and {"a": 1, ...}
        body = re.sub(r"(?<=[\[{])\s*\.\.\.\s*,?", "", body)  # [...] and [..., 3]
    data = json.loads(body)
    assert isinstance(data, dict), "a documented --json output is an object"
    return set(data)


def printed_json(stdout: str) -> dict:
    """What a --json command printed: its stdout, or its last line."""
    try:
        return json.loads(stdout)
    except json.JSONDecodeError:
        return json.loads(stdout.strip().splitlines()[-1])


def cli_examples(path: Path) -> list[tuple[str, list[str], set[str] | None]]:
    """The jobs commands of a file's bash blocks, in order: (line, argv, documented keys)."""
    found = []
    for info, body, after in shown_output(path):
        if info.split()[:1] != ["bash"]:
            continue
        commands = [(line, argv) for line in lines(body) if (argv := jobs_argv(line)) is not None]
        for k, (line, argv) in enumerate(commands):
            keys = None
            if k == len(commands) - 1 and after and after[0].split()[:1] == ["json"]:
                assert "--json" in argv, f"{_name(path)}: a json block after {line!r}"
                keys = documented_keys(*after)
            found.append((line, argv, keys))
    return found


def _with(predicate) -> list:
    return [pytest.param(p, id=_name(p)) for p in DOCS if predicate(p)]


# -- 1. python blocks -----------------------------------------------------------------------------


def _python(path: Path) -> list[str]:
    return [body for info, body in blocks(path) if info.split()[:1] == ["python"]]


def test_the_docs_have_python_examples():
    assert any(_python(p) for p in DOCS)


@pytest.mark.parametrize("path", _with(_python))
def test_python_blocks_run(path, tmp_path, monkeypatch):
    monkeypatch.setenv("BASIN_HOME", str(tmp_path / "basin"))
    monkeypatch.chdir(ROOT)
    namespace: dict = {"__name__": "__main__"}
    for block in _python(path):  # the blocks build on each other, as a reader runs them
        exec(compile(block, str(path), "exec"), namespace)  # our own docs, not user input


# -- 2. command lines -----------------------------------------------------------------------------


def _skipped(argv: list[str]) -> str | None:
    command = shlex.join(argv)
    return next((why for why, pattern in SKIP if re.search(pattern, command)), None)


def _parses(argv: list[str]) -> None:
    from cli.main import build_parser

    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"python -m jobs {shlex.join(argv)}: does not parse (exit {exc.code})")


def _placeholder(argv: list[str]) -> str:
    """What ``ID`` stands for in a command: a sweep's id after ``sweep run|show|delete``."""
    return (
        "sweep" if argv[:1] == ["sweep"] and argv[1:2] in (["run"], ["show"], ["delete"]) else "run"
    )


def _ids(store) -> tuple[list[str], list[str]]:
    """The store's run ids and sweep ids, newest first."""
    return [r.id for r in store.list()], [s["id"] for s in store.list_sweeps()]


CLI_MD = ROOT / "docs" / "cli.md"


def _expected_exit(line: str) -> int:
    return int(m[1]) if (m := EXIT.search(line)) else 0


def _run_by_cli_md(path: Path, examples: list, k: int) -> bool:
    """Whether command ``k`` of ``path`` is one docs/cli.md runs with the same arguments, exit
    code and at least the same check of its JSON (test_cli_examples_run[docs/cli.md]): a copy
    (docs/methods/local-sampling.md's LLC run) is parsed, not run again, unless a later command
    of ``path`` needs the run it creates (``ID``)."""
    line, argv, keys = examples[k]
    if path == CLI_MD or "ID" in argv or any("ID" in a for _, a, _ in examples[k + 1 :]):
        return False
    return any(
        theirs == argv and _expected_exit(other) == _expected_exit(line) and keys in (None, shown)
        for other, theirs, shown in cli_examples(CLI_MD)
        if not _skipped(theirs)
    )


@pytest.mark.slow
@pytest.mark.parametrize("path", _with(lambda p: any(map(jobs_argv, _commands(p, ("bash",))))))
def test_cli_examples_run(path, tmp_path, monkeypatch):
    from clitest import jobs

    from runs import worker
    from runs.store import Store

    # A sweep's cells here take a fraction of a second, a worker's interpreter and torch ~2 s
    # to start: one worker a sweep (as on one core; the default is one per core) takes the
    # sweeps' CPU time from 31 s to 18 s. Workers side by side are tested where that is the
    # point: test_jobs.py (worker --slots 2), test_llc_jobs.py and test_vi_jobs.py (--slots 2).
    per_core = worker.default_slots
    monkeypatch.setattr(worker, "default_slots", lambda: (1, per_core()[1]))
    home = tmp_path / "basin"
    store = Store(home)
    monkeypatch.chdir(tmp_path)
    last = {"run": None, "sweep": None}
    examples = cli_examples(path)
    for k, (line, argv, keys) in enumerate(examples):
        if _skipped(argv) or _run_by_cli_md(path, examples, k):
            _parses(argv)
            continue
        kind = _placeholder(argv)
        if "ID" in argv:
            assert last[kind], (
                f"{_name(path)}: {line!r} needs an earlier command to create a {kind}"
            )
            argv = [last[kind] if a == "ID" else a for a in argv]
        runs, sweeps = _ids(store)
        done = jobs(home, *argv)
        expected = _expected_exit(line)
        assert done.returncode == expected, (
            f"{_name(path)}: {line}\nexit {done.returncode}, not {expected}\n"
            f"stdout: {done.stdout[-2000:]}\nstderr: {done.stderr[-2000:]}"
        )
        new_runs, new_sweeps = _ids(store)
        last["run"] = next((r for r in new_runs if r not in runs), last["run"])
        last["sweep"] = next((s for s in new_sweeps if s not in sweeps), last["sweep"])
        if keys is not None:
            assert set(printed_json(done.stdout)) == keys, f"{_name(path)}: {line}"
    store.close()


@pytest.mark.parametrize("path", _with(lambda p: _commands(p, ("console",))))
def test_console_commands_parse(path):
    """Commands shown with their output, not run here: their flags still exist."""
    for line in _commands(path, ("console",)):
        if (argv := jobs_argv(line)) is not None:
            _parses(argv)


def bench_subcommands() -> set[str]:
    """The subcommands bench/__main__.py's parser adds (its parser is built inside main())."""
    tree = ast.parse((ROOT / "bench" / "__main__.py").read_text())
    return {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", None) == "add_parser"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }


@pytest.mark.parametrize("path", _with(lambda p: _commands(p, ("bash", "console"))))
def test_named_modules_exist(path):
    """``python -m X`` lines that are not run (pip, bench, examples, ...) name what exists."""
    commands = _commands(path, ("bash", "console"))
    for line in commands:
        for module in MODULE.findall(line):
            assert importlib.util.find_spec(module), f"{_name(path)}: no module {module} ({line})"
    named = {c for line in commands for c in BENCH.findall(line) if not c.startswith("-")}
    assert named <= bench_subcommands(), (
        f"{_name(path)}: bench has no {named - bench_subcommands()}"
    )


def test_cli_doc_shows_every_command():
    """docs/cli.md has an example of every command and every sweep and wide study."""
    from cli.main import build_parser

    shown = set()
    for line in _commands(ROOT / "docs" / "cli.md", ("bash", "console")):
        if (argv := jobs_argv(line)) is not None:
            shown.add(" ".join(argv[:2]) if argv[:1] in (["sweep"], ["wide"]) else argv[0])
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # argparse keeps no public list
    wanted = set()
    for name, sub in commands.items():
        nested = sub._subparsers._group_actions[0].choices if sub._subparsers else {}
        wanted |= {f"{name} {k}" for k in nested} or {name}
    assert wanted <= shown, f"docs/cli.md shows no example of {sorted(wanted - shown)}"


# -- 3. paths -------------------------------------------------------------------------------------


def repository_files() -> list[Path]:
    """The repository's files: git's (tracked, and new ones not ignored), or outside a checkout
    (an unpacked archive) every file but hidden folders, caches and build outputs."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        skipped = ("__pycache__", "build", "artifacts")
        return [
            path
            for path in ROOT.rglob("*")
            if path.is_file()
            and not any(
                part.startswith(".") or part in skipped or part.endswith(".egg-info")
                for part in path.relative_to(ROOT).parts[:-1]
            )
        ]
    return [ROOT / name for name in listed.decode().split("\0") if name]


def _text(path: Path) -> str | None:
    """A file's text; None for a binary file (a NUL byte, or not UTF-8) or a deleted one."""
    try:
        data = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        return None
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


@pytest.mark.parametrize("page", ["README.md", "docs/methods/README.md"])
def test_the_sampler_tables_list_every_sampler(page):
    """The README's and the methods index's tables have a row for every registered sampler and
    none for a sampler that does not exist."""
    import samplers

    rows = re.findall(r"^\| `([a-z0-9-]+)` \|", (ROOT / page).read_text(), flags=re.M)
    assert set(samplers.REGISTRY) <= set(rows), sorted(set(samplers.REGISTRY) - set(rows))
    assert set(rows) <= set(samplers.REGISTRY), sorted(set(rows) - set(samplers.REGISTRY))


def test_nothing_refers_to_the_papers_folder():
    """The folder of papers beside the repository is not part of a clone (issue 57)."""
    found = []
    for path in repository_files():
        if _name(path).startswith("tests/golden/") or (text := _text(path)) is None:
            continue
        found += [f"{_name(path)}: {s}" for s in SHARED if s in text]
    assert not found, "\n".join(found)


def _prose(text: str) -> str:
    """Markdown without its fenced blocks and inline code (which hold no links)."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def test_markdown_links_exist():
    broken = []
    for path in repository_files():
        if path.suffix != ".md" or (text := _text(path)) is None:
            continue
        for target in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", _prose(text)):
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL (https:, mailto:) or an anchor in the same page
            if not (path.parent / target.split("#")[0]).exists():
                broken.append(f"{_name(path)}: ({target})")
    assert not broken, "\n".join(broken)


def _looks_like_a_path(word: str) -> bool:
    """A word with a "/" that ends like a file of ours, ends in "/" (a folder: `runs/`) or
    starts with a top-level folder of the repository (`examples/out`)."""
    if not re.fullmatch(r"[\w.*-]+(/[\w.*-]+)*/?", word) or "/" not in word:
        return False
    if PLACEHOLDER.search(word):
        return False
    first = word.split("/")[0]
    top = first not in (".", "..") and (ROOT / first).is_dir()
    return word.endswith((*FILE_ENDINGS, "/")) or top


@pytest.mark.parametrize("path", _with(lambda p: True))
def test_backticked_paths_exist(path):
    """`runs/verdict.py`, `docs/cli.md`, `runs/`: what the docs name is there."""
    text = FENCE.sub("", path.read_text())
    missing = []
    for word in re.findall(r"`([^`\n]+)`", text):
        word = word.split("#")[0].split("::")[0]
        if any(word == c or word.startswith(f"{c}/") for c in CREATED):
            continue
        if not _looks_like_a_path(word):
            continue
        if not (any(ROOT.glob(word)) if "*" in word else (ROOT / word).exists()):
            missing.append(word)
    assert not missing, f"{_name(path)} names paths that do not exist: {missing}"
