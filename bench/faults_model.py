"""Probes of ``python -m bench faults`` for your own model (issue 60, items 7, 8 and 9): a
factory file that breaks the listing, a run whose factory file is gone, and the user's code
failing (a factory, module or loss that raises or returns what is not numbers; a checkpoint
that is a zip bomb). Each probe writes its files into its own store's folder ``home``."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path

from bench import faults
from bench.faults import ROOT, jobs, refused

BOMB_BYTES = 1_200_000_000  # what the 1.4 MB zip bomb held: 1.19 GB once inflated
BOMB_RSS_BOUND = 900 * 2**20  # a run refused before inflating it stays well under this

FACTORIES = """
import numpy as np
import torch
from torch import nn


class Boom(BaseException):
    pass


def _data():
    g = torch.Generator().manual_seed(0)
    return torch.randn(20, 3, generator=g), torch.randn(20, 2, generator=g)


def make_ok():
    torch.manual_seed(0)
    return nn.Linear(3, 2), _data(), "mse"


def make_raises():
    raise ValueError("boom")


def make_interrupt():
    raise KeyboardInterrupt


def make_base():
    raise Boom("a bare BaseException")


def make_exit():
    raise SystemExit(3)


def make_strings():
    return nn.Linear(3, 2), (np.array(["a"] * 20), _data()[1]), "mse"


def make_objects():
    return nn.Linear(3, 2), (_data()[0], np.array([object()] * 20, dtype=object)), "mse"


def _with_loss(loss):
    return nn.Linear(3, 2), _data(), loss


def make_loss_raises():
    def broken(outputs, targets):
        raise RuntimeError("the loss broke")

    return _with_loss(broken)


def make_loss_interrupt():
    def interrupting(outputs, targets):
        raise KeyboardInterrupt

    return _with_loss(interrupting)


def make_loss_shape():
    return _with_loss(lambda outputs, targets: ((outputs - targets) ** 2).sum(-1))


def make_loss_string():
    return _with_loss(lambda outputs, targets: "zero")


class Interrupting(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        raise KeyboardInterrupt


def make_module():
    return Interrupting(), _data(), "mse"
"""

BROKEN = {  # factory -> what the refusal says
    "make_raises": "raised ValueError: boom",
    "make_interrupt": "raised KeyboardInterrupt",
    "make_base": "raised Boom",
    "make_exit": "raised SystemExit",
    "make_strings": "inputs must be numbers",
    "make_objects": "targets must be numbers",
    "make_loss_raises": "raised RuntimeError: the loss broke",
    "make_loss_interrupt": "raised KeyboardInterrupt",
    "make_loss_shape": "must return one real number",
    "make_loss_string": "must return a torch tensor",
    "make_module": "forward raised KeyboardInterrupt",
}
RUN = ["--sampler", "sgld", "--param", "step_size=1e-4", "--chains", "2", "--steps", "40"]


def factory_file(home: Path, name: str = "bad.py") -> Path:
    path = home / name
    path.write_text(FACTORIES)
    return path


def zip_bomb(path: Path, state: dict, declared: int) -> Path:
    """``torch.save(state)`` with its first tensor's record swapped for ``declared`` bytes of
    zeros, deflated (about 1/1000 of that on disk): torch would inflate all of it."""
    import torch

    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    with zipfile.ZipFile(buffer) as src, zipfile.ZipFile(path, "w", compresslevel=1) as out:
        for info in src.infolist():
            if not info.filename.endswith("/data/0"):
                out.writestr(info, src.read(info))
                continue
            entry = zipfile.ZipInfo(info.filename)
            entry.compress_type = zipfile.ZIP_DEFLATED
            with out.open(entry, "w", force_zip64=True) as f:
                chunk = bytes(2**24)
                for start in range(0, declared, len(chunk)):
                    f.write(chunk[: declared - start])
    return path


# -- item 7: the listing --------------------------------------------------------------------

PAGE = """
import json
from streamlit.testing.v1 import AppTest
import runs.budget, ui  # before the page runs from pages/, where pages/runs.py would shadow runs
at = AppTest.from_file("pages/networks.py", default_timeout=120).run()
at.selectbox(key="net.target_name").set_value("model").run()
print(json.dumps({
    "errors": [e.value for e in at.exception] + [e.value for e in at.error],
    "factories": at.selectbox(key="net.model.factory").options,
    "warnings": [w.value for w in at.warning],
}))
"""


def deep_listing(home: Path) -> subprocess.CompletedProcess:
    """BASIN_MODELS with a good factory, a file nested too deeply for Python's parser, one over
    the size cap and a link out of the folder: the Networks page, as an AppTest."""
    folder = home / "models"
    folder.mkdir()
    (folder / "good.py").write_text(FACTORIES)
    (folder / "deep.py").write_text("x = " + "-" * 100_000 + "1\n")
    (folder / "huge.py").write_text("def make():\n    pass\n" + "#" * 2**21 + "\n")
    (home / "outside.py").write_text(FACTORIES)
    (folder / "link.py").symlink_to(home / "outside.py")
    env = {**os.environ, "BASIN_HOME": str(home), "BASIN_MODELS": str(folder)}
    env["BASIN_NO_WORKERS"] = "1"
    out = subprocess.run(
        [sys.executable, "-c", PAGE], cwd=ROOT, env=env, capture_output=True, text=True
    )
    noise = ("missing ScriptRunContext", "No runtime found")  # Streamlit's, outside a server
    kept = [line for line in out.stderr.splitlines() if not any(n in line for n in noise)]
    return subprocess.CompletedProcess(out.args, out.returncode, out.stdout, "\n".join(kept))


def listed_with_notices(out: subprocess.CompletedProcess) -> bool:
    if out.returncode:
        return False
    shown = json.loads(out.stdout.strip().splitlines()[-1])
    notices = " ".join(shown["warnings"])
    names = [f.rpartition(":")[2] for f in shown["factories"]]
    return (
        not shown["errors"]
        and all(f.startswith("good.py:") for f in shown["factories"])
        and "make_ok" in names
        and all(name in notices for name in ("deep.py", "huge.py", "link.py"))
    )


# -- item 8: a run outlives its factory -------------------------------------------------------


def orphaned_run(home: Path, status: str | None = None) -> str:
    """A completed model run whose factory file is then deleted (and its status set)."""
    path = factory_file(home, "gone.py")
    out = jobs(home, "run", "--target", "model", "--target-param", f"factory={path}:make_ok",
               *RUN, "--json")  # fmt: skip
    run_id = json.loads(out.stdout)["run_id"]
    path.unlink()
    if status:
        from runs.store import Store

        Store(home).finish(run_id, status)
    return run_id


def exported(suffix: str) -> Callable[[subprocess.CompletedProcess], bool]:
    def check(out: subprocess.CompletedProcess) -> bool:
        return out.returncode == 0 and out.stdout.strip().endswith(suffix)

    return check


def resume_says(out: subprocess.CompletedProcess) -> bool:
    return refused("model.factory")(out) and "no longer exists" in out.stderr


# -- item 9: the user's code failing ----------------------------------------------------------


def failed_in_worker(home: Path) -> list[str]:
    """A run queued with a working factory, whose file then raises KeyboardInterrupt when the
    worker calls it: the run ends failed, its error naming the factory."""
    path = factory_file(home, "swapped.py")
    run_id = jobs(home, "submit", "--target", "model", "--target-param",
                  f"factory={path}:make_ok", *RUN).stdout.strip()  # fmt: skip
    path.write_text(
        FACTORIES.replace("    torch.manual_seed(0)\n", "    raise KeyboardInterrupt\n")
    )
    jobs(home, "worker", "--once", "--slots", "1")
    return ["show", run_id, "--json"]


def failed_with_line(out: subprocess.CompletedProcess) -> bool:
    if out.returncode:
        return False
    shown = json.loads(out.stdout)
    error = shown.get("error") or ""
    return shown["status"] == "failed" and "factory" in error and "KeyboardInterrupt" in error


def bomb(home: Path) -> subprocess.CompletedProcess:
    """A 1.2 MB checkpoint declaring 1.2 GB: ``jobs run`` must refuse it under
    ``BOMB_RSS_BOUND`` of memory (the process's peak resident size, from wait4), said on a
    last stderr line of its own."""
    from torch import nn

    path = factory_file(home)
    zip_bomb(home / "bomb.pt", nn.Linear(3, 2).state_dict(), BOMB_BYTES)
    command = [sys.executable, "-m", "jobs", "run", "--target", "model", "--target-param",
               f"factory={path}:make_ok", "--target-param", f"checkpoint={home / 'bomb.pt'}",
               *RUN]  # fmt: skip
    env = {**os.environ, "BASIN_HOME": str(home)}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=err, text=True)
        timer = threading.Timer(120, proc.kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        timer.cancel()
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    peak = usage.ru_maxrss * 1024  # kB on Linux
    note = f"peak memory {peak / 2**20:.0f} MiB (bound {BOMB_RSS_BOUND / 2**20:.0f} MiB)\n"
    return subprocess.CompletedProcess(command, code, stdout, stderr + note)


def bomb_refused(out: subprocess.CompletedProcess) -> bool:
    lines = out.stderr.strip().splitlines()
    peak = float(lines[-1].split()[2]) * 2**20 if lines else float("inf")
    said = lines[0] if lines else ""
    return (
        out.returncode == 2
        and len(lines) == 2
        and "checkpoint" in said
        and "refused before reading it" in said
        and peak < BOMB_RSS_BOUND
    )


def probes(home: Path) -> list[tuple[str, Callable, Callable[[subprocess.CompletedProcess], bool]]]:
    """(name, setup returning the CLI arguments or a finished process, check)."""

    def broken(name: str) -> Callable[[], list[str]]:
        return lambda: ["run", "--target", "model", "--target-param",
                        f"factory={factory_file(home)}:{name}", *RUN]  # fmt: skip

    def says(text: str) -> Callable[[subprocess.CompletedProcess], bool]:
        return lambda out: refused("target.params.factory")(out) and text in out.stderr

    return [
        ("model list: deep, huge and linked-out files", lambda: deep_listing(home),
         listed_with_notices),
        ("model factory gone: show --diagnostics",
         lambda: ["show", orphaned_run(home), "--diagnostics"],
         lambda out: out.returncode == 0 and "w0" in out.stdout),
        ("model factory gone: export npz",
         lambda: ["export", orphaned_run(home), "--out", str(home / "r.npz")], exported(".npz")),
        ("model factory gone: export netcdf",
         lambda: ["export", orphaned_run(home), "--format", "netcdf", "--out",
                  str(home / "r.nc")], exported(".nc")),
        ("model factory gone: resume", lambda: ["resume", orphaned_run(home, "cancelled")],
         resume_says),
        *[(f"model {name}", broken(name), says(text)) for name, text in BROKEN.items()],
        ("model factory swapped before the worker runs it", lambda: failed_in_worker(home),
         failed_with_line),
        ("model checkpoint zip bomb (1.2 GB declared)", lambda: bomb(home), bomb_refused),
    ]  # fmt: skip


if __name__ == "__main__":
    faults.run(probes)  # these probes alone
