"""A machine without a C++ compiler (the python:3.11-slim image): torch's CPU allocator stays,
surfaces run torch's operations, normals come from torch's generator, ``fused=True`` steps
eagerly with a warning, and runs through jobs complete uncompiled."""

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
from jobs.run import compiled
from jobs.spec import parse_spec
from samplers import fused

ROOT = Path(__file__).resolve().parents[1]
MISSING = "/nonexistent/c++"  # inductor and Basin's allocator both take the compiler from $CXX


def test_fused_steps_eagerly_where_nothing_compiles(monkeypatch):
    monkeypatch.setattr(fused, "compile_problem", lambda device_type: "no compiler (test)")
    target = landscapes.make("banana", device="cpu", dtype="float32")
    kernel = samplers.make("mala", step_size=0.1)

    def run(fused_flag: bool):
        g = torch.Generator().manual_seed(2)
        state = kernel.init(target.initial(g, 16), target, g)
        return kernel.run(state, target, g, 30, fused=fused_flag)

    with pytest.warns(UserWarning, match="runs the steps eagerly: no compiler"):
        state, info = run(True)
    eager_state, eager_info = run(False)  # the eager loop: the same draws, bit for bit
    assert torch.equal(state.position, eager_state.position)
    assert torch.equal(info.loss, eager_info.loss)

    spec = parse_spec(
        {"target": {"name": "banana"}, "sampler": {"name": "mala"}, "steps": 10**6, "chains": 8}
    )
    g = torch.Generator().manual_seed(0)
    state = kernel.init(target.initial(g, 8), target, g)
    for mode in ("always", "auto"):  # auto would compile a million steps
        assert not compiled(spec.model_copy(update={"compile": mode}), kernel, state, target)


def test_a_run_without_a_compiler_completes_uncompiled(tmp_path):
    env = {
        **os.environ,
        "CXX": MISSING,
        "XDG_CACHE_HOME": str(tmp_path / "cache"),  # no allocator built before
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),  # no compiled chunk either
        "BASIN_HOME": str(tmp_path / "store"),
        "PYTHONPATH": str(ROOT),
    }
    probe = "import samplers; from samplers import allocator, fused; "
    probe += "from landscapes import networks; print(networks.plane_kernel() is None); "
    probe += "print(allocator.active()); print(fused.compile_problem('cpu')); "
    # float32 normals from torch's generator: the numbers torch.randn gives for the seed
    probe += "import torch; from samplers import normals; from samplers.base import draw; "
    probe += "g, h = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1); "
    probe += "print(normals.library() is None, torch.equal(draw(g, 'normal', (9,), "
    probe += "torch.float32), torch.randn(9, generator=h)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    no_plane_kernel, active, problem, torch_normals = out.stdout.strip().splitlines()
    assert no_plane_kernel == "True" and active == "False" and "no working C++ compiler" in problem
    assert torch_normals == "True True"

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
