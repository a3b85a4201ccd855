"""Your own model against a careless user and an attacker (issue 60, items 7, 8, 9): a factory
file that cannot be listed, a run whose factory file is gone, and the user's code failing (a
factory, module or loss that raises, KeyboardInterrupt and bare BaseException included, or
returns what is not numbers; a checkpoint that is a zip bomb)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from apptest import errors, no_pool, page  # noqa: F401 (a fixture)

import landscapes
from bench.faults_model import BROKEN, FACTORIES, zip_bomb
from cli.main import main as cli_main
from landscapes import ParamError
from runs.store import Store
from runs.worker import run_one
from ui import models

ROOT = Path(__file__).resolve().parents[1]
RUN = ["--sampler", "sgld", "--param", "step_size=1e-4", "--chains", "2", "--steps", "40"]
DEEP = "x = " + "-" * 100_000 + "1\n"  # Python's parser: MemoryError ("not" nests alike)


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """BASIN_MODELS: a good factory file, one nested too deeply to parse, one over the size cap
    (a factory on its first line), one that does not parse, and links out of the folder."""
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "good.py").write_text(FACTORIES)
    (folder / "deep.py").write_text(DEEP)
    (folder / "huge.py").write_text("def make():\n    pass\n" + "#" * 2**20)
    (folder / "broken.py").write_text("def make(:\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "elsewhere.py").write_text("def make():\n    return None\n")
    torch.save({"weight": torch.zeros(2, 3)}, outside / "w.pt")
    (folder / "link.py").symlink_to(outside / "elsewhere.py")
    (folder / "w.pt").symlink_to(outside / "w.pt")
    (folder / "inside.py").symlink_to(folder / "good.py")  # a link inside the folder: listed
    monkeypatch.setenv("BASIN_MODELS", str(folder))
    return folder


def cli(home: Path, monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    monkeypatch.setenv("BASIN_HOME", str(home))
    code = cli_main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


# -- 7: one bad file breaks the list ----------------------------------------------------------


def test_a_file_that_cannot_be_listed_is_left_out_with_a_notice_naming_it(folder):
    """Before: ``list_factories`` raised MemoryError out of ast.parse for deep.py."""
    listed = models.list_factories(folder)
    names = {ref.rpartition(":")[0].rpartition("/")[2] for ref in listed}
    assert names == {"good.py", "inside.py"}, listed
    factories, notices = models.scan_factories(folder)
    assert factories == listed
    by_file = {line.partition(":")[0]: line for line in notices}
    assert set(by_file) == {"broken.py", "deep.py", "huge.py", "link.py"}, notices
    assert "nests too deeply to parse (MemoryError)" in by_file["deep.py"]
    assert "over the 1 MB a factory file may hold (not read)" in by_file["huge.py"]
    assert "does not parse: SyntaxError (line 1)" in by_file["broken.py"]
    assert "a link to a file outside BASIN_MODELS" in by_file["link.py"]
    assert all("\n" not in line for line in notices)


def test_a_link_out_of_the_folder_is_not_listed_nor_chosen_as_a_checkpoint(folder):
    assert models.found_checkpoints() == []  # w.pt leads out of the folder
    (folder / "own.pt").write_bytes((folder / "w.pt").read_bytes())
    assert models.found_checkpoints() == [str(folder / "own.pt")]
    assert not any("elsewhere" in ref or "link.py" in ref for ref in models.factories())


@pytest.mark.usefixtures("no_pool")
def test_the_networks_page_keeps_its_models_beside_a_file_that_cannot_be_listed(home, folder):
    at = page("networks")
    at.selectbox(key="net.target_name").set_value("model").run()
    assert not at.exception, at.exception
    options = at.selectbox(key="net.model.factory").options
    assert "good.py:make_ok" in options and "inside.py:make_ok" in options
    assert not any(o.startswith(("deep.py", "huge.py", "link.py")) for o in options)
    (notice,) = [w.value for w in at.warning if "left out" in w.value]
    for name in ("deep.py", "huge.py", "broken.py", "link.py"):
        assert name in notice


# -- 8: a run outlives its factory file -------------------------------------------------------


@pytest.mark.slow  # 10 s: a run, two exports (NetCDF imports xarray), a resume
def test_a_run_outlives_its_factory_file(tmp_path, monkeypatch, capsys):
    """Before: show --diagnostics and every export said "invalid stored spec ... no such file"
    once the factory file was deleted; only resuming needs it now."""
    home, factory = tmp_path / "home", tmp_path / "gone.py"
    factory.write_text(FACTORIES)
    code, out, _ = cli(home, monkeypatch, capsys, "run", "--target", "model", "--target-param",
                       f"factory={factory}:make_ok", *RUN, "--json")  # fmt: skip
    assert code == 0
    run_id = json.loads(out)["run_id"]
    factory.unlink()
    code, out, err = cli(home, monkeypatch, capsys, "show", run_id, "--diagnostics")
    assert code == 0, err
    assert "w0" in out and "w7" in out  # coordinates by index: the layout's names went with it
    for fmt, name in (("npz", "r.npz"), ("netcdf", "r.nc")):
        code, out, err = cli(home, monkeypatch, capsys, "export", run_id, "--format", fmt,
                             "--out", str(tmp_path / name))  # fmt: skip
        assert code == 0 and (tmp_path / name).stat().st_size > 0, err
    code, _, err = cli(home, monkeypatch, capsys, "export", run_id, "--format", "tati",
                       "--out", str(tmp_path / "tati"))  # fmt: skip
    assert code == 2 and err.count("\n") == 1, err
    assert f"model.factory: {factory} no longer exists: TATi's tables need" in err
    Store(home).finish(run_id, "cancelled")
    code, _, err = cli(home, monkeypatch, capsys, "resume", run_id)
    assert code == 2
    assert err == (
        f"error: model.factory: {factory} no longer exists; the run's records can still be "
        "read and exported\n"
    )
    assert Store(home).get(run_id).status == "cancelled"  # resumable once the file is back


# -- 9: the user's code failing ---------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_the_users_code_failing_is_one_line_naming_the_factory(name, tmp_path, monkeypatch, capsys):
    """Before: a traceback (KeyboardInterrupt, a bare BaseException, SystemExit, string or
    object arrays, a loss of the wrong shape or type)."""
    path = tmp_path / "bad.py"
    path.write_text(FACTORIES)
    code, _, err = cli(tmp_path / "home", monkeypatch, capsys, "run", "--target", "model",
                       "--target-param", f"factory={path}:{name}", *RUN)  # fmt: skip
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("error: target.params.factory: ") and BROKEN[name] in err, err
    assert "Traceback" not in err


def test_a_factory_that_fails_once_queued_ends_its_run_failed(tmp_path, monkeypatch, capsys):
    """A run queued with a working factory whose file then raises KeyboardInterrupt: the
    worker ends the run failed with one line naming the factory (before: the interrupt
    escaped the worker's thread)."""
    home, path = tmp_path / "home", tmp_path / "swapped.py"
    path.write_text(FACTORIES)
    code, out, _ = cli(home, monkeypatch, capsys, "submit", "--target", "model",
                       "--target-param", f"factory={path}:make_ok", *RUN)  # fmt: skip
    assert code == 0
    run_id = out.strip()
    seeded, interrupted = "    torch.manual_seed(0)\n", "    raise KeyboardInterrupt\n"
    path.write_text(FACTORIES.replace(seeded, interrupted))
    store = Store(home)
    run_one(store, store.claim(os.getpid(), run_id), threads=1)
    record = store.get(run_id)
    assert record.status == "failed"
    assert record.error == (f"target.params.factory: {path}:make_ok raised KeyboardInterrupt"), (
        record.error
    )


def test_a_loss_failing_mid_run_names_the_loss(tmp_path):
    """A loss that passes the check at build and raises later (a bare BaseException)."""
    path = tmp_path / "late.py"
    path.write_text(
        FACTORIES
        + "\n\nCALLS = [0]\n\n\ndef make_late():\n"
        + "    def late(outputs, targets):\n"
        + "        CALLS[0] += 1\n"
        + "        if CALLS[0] > 3:\n"
        + "            raise Boom('at the fourth call')\n"
        + "        return ((outputs - targets) ** 2).mean()\n\n"
        + "    return _with_loss(late)\n"
    )
    target = landscapes.make("model", factory=f"{path}:make_late", device="cpu")
    w = target.w0[None]
    with pytest.raises(ParamError, match=r"its loss late\(outputs, targets\) raised Boom") as err:
        for _ in range(5):
            target.loss(w)
    assert err.value.field == "model.factory"


def test_a_real_ctrl_c_still_interrupts(tmp_path):
    """SIGINT while the factory runs: the CLI is interrupted, not told the factory failed."""
    path, marker = tmp_path / "slow.py", tmp_path / "started"
    path.write_text(
        "import pathlib, time\n\n\ndef make():\n"
        f"    pathlib.Path({str(marker)!r}).touch()\n"
        "    time.sleep(60)\n"
    )
    env = {**os.environ, "BASIN_HOME": str(tmp_path / "home")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobs", "run", "--target", "model", "--target-param",
         f"factory={path}:make", *RUN],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        import time

        deadline = time.monotonic() + 60
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # the factory's own file: no event to wait on across processes
        assert marker.exists()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode in (130, -signal.SIGINT), (proc.returncode, err)
    assert "raised KeyboardInterrupt" not in err and "KeyboardInterrupt" in err


MEASURE = """
import resource, sys
from landscapes import ParamError
from landscapes.model import make_model
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    make_model(sys.argv[1], sys.argv[2])
except ParamError as exc:
    print(exc)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


def test_a_zip_bomb_checkpoint_is_refused_before_it_is_inflated(tmp_path):
    """A 260 kB checkpoint declaring 256 MiB: refused from the archive's directory, with the
    process's peak memory unchanged (before: it grew by the 256 MiB, then was refused)."""
    path = tmp_path / "bad.py"
    path.write_text(FACTORIES)
    bomb = zip_bomb(tmp_path / "bomb.pt", torch.nn.Linear(3, 2).state_dict(), 256 * 2**20)
    assert bomb.stat().st_size < 2**20
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, f"{path}:make_ok", str(bomb)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    said, grew = out.stdout.strip().splitlines()
    assert said.startswith("model.checkpoint: bomb.pt declares 256 MB of data, over the 4 MB")
    assert said.endswith("refused before reading it")
    assert int(grew) < 64, f"peak memory grew by {grew} MiB"


def test_an_uploaded_zip_bomb_is_refused_and_nothing_kept(tmp_path, folder):
    factory = f"{folder / 'good.py'}:make_ok"
    data = zip_bomb(tmp_path / "b.pt", torch.nn.Linear(3, 2).state_dict(), 64 * 2**20)
    with pytest.raises(ParamError, match="declares 64 MB of data") as err:
        models.accept_checkpoint(data.read_bytes(), "b.pt", factory, tmp_path / "home")
    assert err.value.field == "model.checkpoint"
    root = models.checkpoint_root(tmp_path / "home")
    assert not [p for p in root.rglob("*") if p.is_file()]


@pytest.mark.usefixtures("no_pool")
def test_the_page_says_a_factory_that_raises_keyboard_interrupt(home, folder):
    at = page("networks")
    at.selectbox(key="net.target_name").set_value("model").run()
    at.selectbox(key="net.model.factory").set_value(f"{folder / 'good.py'}:make_interrupt").run()
    assert not at.exception, at.exception
    shown = " ".join(errors(at))
    assert "factory" in shown and "raised KeyboardInterrupt" in shown, shown
