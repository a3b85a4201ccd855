"""A machine without a C++ compiler (the python:3.11-slim image): ``compiled=True`` steps eagerly
with one warning, and runs through jobs complete uncompiled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import landscapes
import samplers
from samplers import compiled

ROOT = Path(__file__).resolve().parents[1]
MISSING = "/nonexistent/c++"  # inductor takes the compiler from $CXX


def test_compiled_runs_step_eagerly_where_nothing_compiles(monkeypatch):
    monkeypatch.setattr(compiled, "compile_problem", lambda device_type: "no compiler (test)")
    monkeypatch.setattr(compiled, "_warned", set())
    target = landscapes.make("banana", device="cpu", dtype="float32")
    kernel = samplers.make("mala", step_size=0.1)

    def run(flag: bool):
        g = torch.Generator().manual_seed(2)
        state = kernel.init(target.initial(g, 16), target, g)
        return kernel.run(state, target, g, 30, compiled=flag)

    with pytest.warns(UserWarning, match="steps run eagerly: no compiler") as warned:
        state, info = run(True)
        run(True)  # one warning a process, not one a run
    assert len(warned) == 1
    eager_state, eager_info = run(False)  # the eager loop: the same draws, bit for bit
    assert torch.equal(state.position, eager_state.position)
    assert torch.equal(info.loss, eager_info.loss)


def test_a_run_without_a_compiler_completes_uncompiled(tmp_path):
    env = {
        **os.environ,
        "CXX": MISSING,
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),  # no compiled chunk either
        "BASIN_HOME": str(tmp_path / "store"),
    }
    probe = "from samplers import compiled; print(compiled.compile_problem('cpu'))"
    # subprocesses: a process without a compiler (CXX), whose inductor has compiled nothing
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "no C/C++ compiler" in out.stdout

    args = ["--target", "banana", "--sampler", "sgld", "--param", "step_size=0.001"]
    args += ["--chains", "64", "--steps", "600", "--compile", "always", "--json"]
    out = subprocess.run(
        [sys.executable, "-m", "jobs", "run", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["status"] == "completed" and summary["steps"] == 600
    assert summary["compiled"] is False and summary["diverged_chains"] == 0
