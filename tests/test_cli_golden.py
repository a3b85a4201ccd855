"""The command line is an interface people script against: its flags (every subcommand's --help)
and the JSON of run, show and sweep must stay what they were when the layout was redesigned.

The expected outputs in tests/golden/ were recorded from the CLI before the move (issue "The
house"), with `BASIN_RECORD_GOLDEN=1 python -m pytest tests/test_cli_golden.py`, twice: what
differed between the two recordings (ids, timings, dates) is marked volatile and checked for its
type only; everything else (keys, seeded numbers to 1e-6, texts) must match.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"
RECORD = os.environ.get("BASIN_RECORD_GOLDEN") == "1"
VOLATILE = "<volatile>"
PROCESS = {"worker_pid"}  # the same in both recordings (one process), not in the next

HELP = [
    [],
    ["run"],
    ["submit"],
    ["list"],
    ["show"],
    ["cancel"],
    ["delete"],
    ["resume"],
    ["export"],
    ["check"],
    ["sweep"],
    *[["sweep", k] for k in ("dln", "calibrate", "order", "reprior", "vi", "checkpoints")],
    *[["sweep", k] for k in ("run", "show", "delete", "list")],
    ["surface"],
    ["wide"],
    ["wide", "kl"],
    ["wide", "slices"],
    ["worker"],
    ["cache"],
]

RUN = ["run", "--target", "banana", "--sampler", "mala", "--chains", "4", "--steps", "200"]
JSON_CASES = {
    "run": [*RUN, "--seed", "1", "--json"],
    "run_llc": [
        *["run", "--target", "normal-crossing", "--sampler", "sgld", "--param", "step_size=1e-3"],
        *["--chains", "2", "--steps", "300", "--seed", "3", "--observe", "llc", "--json"],
    ],
    "run_vi": [
        *["run", "--kind", "vi", "--target", "tanh", "--target-param", "n=200"],
        *["--vi-param", "epochs=60", "--seed", "2", "--json"],
    ],
    "show": ["show", "{run}", "--json"],
    "show_diagnostics": ["show", "{run}", "--diagnostics", "--json"],
    "sweep_order": [
        *["sweep", "order", "--samplers", "gla2,baoab", "--step-sizes", "0.125,0.0625"],
        *["--chains", "256", "--steps", "400", "--seed", "0", "--slots", "1", "--json"],
    ],
    "sweep_show": ["sweep", "show", "{sweep}", "--json"],
    "wide_kl": [
        *["wide", "kl", "--widths", "8,16", "--n", "8", "--draws", "200", "--json"],
    ],
}


def _main(argv: list[str]) -> tuple[int, str]:
    from cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:  # --help exits 0 through argparse
            code = exc.code
    return code, out.getvalue()


def help_entries(text: str) -> dict:
    """--help as {usage tokens, each option's or section's text}: the interface, not the wrap."""
    usage, _, body = text.partition("\n\n")
    entries: dict[str, str] = {"usage": " ".join(sorted(set(re.findall(r"\S+", usage))))}
    key = None
    for line in body.splitlines():
        if not line.strip():
            key = None
            continue
        if not line.startswith(" "):  # a section title, or the description
            key = line.strip()
            entries[key] = ""
        elif re.match(r"^ {2,4}\S", line) and (key is None or not line.startswith(" " * 6)):
            key = line.split()[0].rstrip(",")
            entries[key] = " ".join(line.split()[1:])
        elif key is not None:
            entries[key] = (entries[key] + " " + line.strip()).strip()
    return {k: " ".join(v.split()) for k, v in entries.items()}


def _diff(a, b):
    """The paths where two recordings differ: those values are ids, timings or dates."""
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        return {k: d for k in a if (d := _diff(a[k], b[k])) is not None} or None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        out = {i: d for i, x in enumerate(a) if (d := _diff(x, b[i])) is not None}
        return out or None
    return None if a == b else VOLATILE


def _mark(value, diff):
    if diff is None:
        return value
    if diff == VOLATILE:
        return VOLATILE
    if isinstance(value, dict):
        return {k: _mark(v, diff.get(k)) for k, v in value.items()}
    return [_mark(v, diff.get(i)) for i, v in enumerate(value)]


def assert_same(actual, expected, path="$"):
    if expected == VOLATILE:
        return
    if isinstance(expected, dict):
        assert isinstance(actual, dict), path
        assert sorted(actual) == sorted(expected), f"{path}: keys {sorted(actual)}"
        for k in expected:
            if k not in PROCESS:
                assert_same(actual[k], expected[k], f"{path}.{k}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), path
        for i, (x, y) in enumerate(zip(actual, expected, strict=True)):
            assert_same(x, y, f"{path}[{i}]")
    elif isinstance(expected, float) and not isinstance(actual, bool):
        assert actual == pytest.approx(expected, rel=1e-6, abs=1e-12), path
    else:
        assert actual == expected, path


def _json_outputs(home: Path, monkeypatch) -> dict:
    monkeypatch.setenv("BASIN_HOME", str(home))
    out, ids = {}, {}
    for name, argv in JSON_CASES.items():
        argv = [a.format(**ids) for a in argv]
        code, text = _main(argv)
        assert code == 0, (name, text)
        out[name] = json.loads(text.strip().splitlines()[-1])
        ids.setdefault("run", out[name].get("run_id"))
        if "sweep_id" in out[name]:
            ids.setdefault("sweep", out[name]["sweep_id"])
    return out


@pytest.fixture(scope="module")
def columns():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COLUMNS", "100")
        yield


@pytest.mark.parametrize("argv", HELP, ids=lambda a: "-".join(a) or "top")
def test_help(argv, columns, tmp_path, monkeypatch):
    monkeypatch.setenv("BASIN_HOME", str(tmp_path))
    code, text = _main([*argv, "--help"])
    assert code == 0
    file = GOLDEN / f"help-{'-'.join(argv) or 'top'}.txt"
    if RECORD:
        GOLDEN.mkdir(exist_ok=True)
        file.write_text(text)
    assert help_entries(text) == help_entries(file.read_text())


@pytest.mark.slow
def test_json(tmp_path, monkeypatch):
    first = _json_outputs(tmp_path / "a", monkeypatch)
    if RECORD:
        second = _json_outputs(tmp_path / "b", monkeypatch)
        for name in JSON_CASES:
            marked = _mark(first[name], _diff(first[name], second[name]))
            (GOLDEN / f"json-{name}.json").write_text(json.dumps(marked, indent=1) + "\n")
    for name in JSON_CASES:
        assert_same(first[name], json.loads((GOLDEN / f"json-{name}.json").read_text()), name)
