"""Importing Basin changes nothing outside Basin: no environment, no allocator, no torch settings,
no compiling. Each check runs in a fresh interpreter, the way a user's program would import it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = [
    "landscapes",
    "samplers",
    "samplers.compiled",
    "samplers.llc",
    "jobs",
    "runs.loop",
    "runs.store",
    "runs.worker",
    "runs.pool",
    "studies.diagnostics",
    "studies.registry",
    "cli.main",
    "charts",
]

# Memory torch's own CPU allocator reports for a fixed snippet, before and after the imports:
# an allocator swapped under torch reported 0 bytes here.
PROBE = """
import importlib, json, os, sys, threading
import torch
from torch.profiler import ProfilerActivity, profile

def snapshot():
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        x = torch.ones(1024, 2048)
        del x
    allocated = sum(e.cpu_memory_usage for e in prof.key_averages() if e.cpu_memory_usage > 0)
    return {
        "environ": dict(os.environ),
        "allocated": allocated,
        "threads": torch.get_num_threads(),
        "interop": torch.get_num_interop_threads(),
        "grad": torch.is_grad_enabled(),
        "dtype": str(torch.get_default_dtype()),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "capture_scalar_outputs": torch._dynamo.config.capture_scalar_outputs,
        "recompile_limit": torch._dynamo.config.recompile_limit,
        "python_threads": threading.active_count(),
        "inductor_loaded": "torch._inductor.compile_fx" in sys.modules,
    }

before = snapshot()
for name in sys.argv[1:]:
    importlib.import_module(name)
after = snapshot()
print(json.dumps({"before": before, "after": after}))
"""


def bare_python(code: str, home: Path) -> subprocess.CompletedProcess:
    """``python -c code PACKAGES`` in a fresh interpreter with a bare environment: the first
    import's effects on a bare process are the point."""
    return subprocess.run(
        [sys.executable, "-c", code, *PACKAGES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "HOME": str(home)},
    )


def test_importing_every_package_changes_nothing_outside_basin(tmp_path):
    out = bare_python(PROBE, tmp_path)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    before, after = seen["before"], seen["after"]
    assert before["allocated"] >= 8 * 1024 * 2048  # the probe sees torch's allocator at work
    assert after == before


def test_importing_every_package_prints_nothing(tmp_path):
    # Python's default warning filters, as a user's program runs: a warning printed on import
    # (a superseded library's FutureWarning, say) is one the user did not cause
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)"
    out = bare_python(code, tmp_path)
    assert (out.returncode, out.stdout, out.stderr) == (0, "", "")


def test_python_m_jobs_does_not_restart_itself_or_write_the_environment(tmp_path):
    # ``python -m jobs`` once re-executed itself with glibc tunables: its pid changed
    probe = (
        "import os, sys, runpy; pid = os.getpid(); env = dict(os.environ); "
        "sys.argv = ['jobs', 'list']; "
        "code = 0\ntry:\n    runpy.run_module('jobs', run_name='__main__')\n"
        "except SystemExit as e:\n    code = e.code or 0\n"
        "print(os.getpid() == pid, dict(os.environ) == env, code)"
    )
    # a subprocess: the probe compares its own pid and environment before and after
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "BASIN_HOME": str(tmp_path / "store"),
        },
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "True True 0"
