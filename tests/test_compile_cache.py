"""Compiled chunks on disk (samplers.cache): the key tells apart what compiles differently and
nothing else, even across processes; a damaged package is removed, never loaded; the folder
keeps to its cap; and a kernel compiled in one process starts compiled in the next, with the
very draws of an eager run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from clitest import jobs

import landscapes
import samplers
from samplers import cache

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("BASIN_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "compiled"


def test_the_fingerprint_is_the_value_not_the_object():
    one = landscapes.make("banana", device="cpu", dtype="float64")
    two = landscapes.make("banana", device="cpu", dtype="float64")
    assert cache.fingerprint(one) == cache.fingerprint(two)
    assert cache.fingerprint(one) != cache.fingerprint(landscapes.make("banana", b=0.3))
    assert cache.fingerprint(one) != cache.fingerprint(
        landscapes.make("banana", device="cpu", dtype="float32")
    )
    step = [cache.fingerprint(samplers.make("sgld", step_size=s)) for s in (1e-2, 1e-2, 2e-2)]
    assert step[0] == step[1] != step[2]


def test_a_tensor_changes_the_fingerprint_by_its_content():
    a = landscapes.make("tanh", hidden=2, n=50, device="cpu", dtype="float64")
    b = landscapes.make("tanh", hidden=2, n=50, device="cpu", dtype="float64")
    assert cache.fingerprint(a) == cache.fingerprint(b)
    b.x = b.x.clone()
    b.x[0, 0] += 1e-12  # one number of the data
    assert cache.fingerprint(a) != cache.fingerprint(b)


def test_the_key_is_the_same_in_another_process():
    """No memory address or process state leaks into a key: a second process finds the entry."""
    code = (
        "import landscapes, samplers; from samplers import cache; "
        "t = landscapes.make('tanh', hidden=2, n=50, device='cpu', dtype='float64'); "
        "k = samplers.make('sgld', step_size=1e-4, batch_size=10); "
        "from samplers.llc import Paired; p = Paired.of(k, t, t.w0); "
        "print(cache.fingerprint(t), cache.fingerprint(k), cache.fingerprint(p), cache.code())"
    )
    runs = [
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
        for _ in range(2)
    ]
    assert runs[0].returncode == 0, runs[0].stderr
    assert runs[0].stdout == runs[1].stdout


def _entry(tmp_path: Path, name: str, size: int) -> Path:
    with cache.workspace() as work:  # where the compiled chunk builds it
        built = Path(work) / "chunk.pt2"
        built.write_bytes(bytes(range(256)) * (size // 256))
        return cache.save(name, built, {"noise": ["xi"], "kernel": "sgld"})


def test_a_package_whose_bytes_do_not_match_its_card_is_removed_not_loaded(folder, tmp_path):
    package = _entry(tmp_path, "a" * 40, 4096)
    found = cache.find("a" * 40)
    assert found is not None and found[0] == package and found[1]["bytes"] == 4096
    data = bytearray(package.read_bytes())
    data[100] ^= 1  # one bit
    package.write_bytes(bytes(data))
    assert cache.find("a" * 40) is None
    assert not package.exists() and not (folder / ("a" * 40 + ".json")).exists()


def test_the_folder_keeps_to_its_cap_least_recently_used_first(folder, tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "CAP_BYTES", 3 * 1024)
    names = [c * 40 for c in "abcd"]
    for age, name in enumerate(names[:3]):
        _entry(tmp_path, name, 1024)
        os.utime(folder / f"{name}.json", (1e9 + age, 1e9 + age))  # used in this order, long ago
    cache.find(names[0])  # used: now the most recent
    _entry(tmp_path, names[3], 1024)  # 4 KiB > 3 KiB: the least recently used (b) goes
    kept = sorted(m["name"] for m in cache.entries())
    assert kept == sorted([names[0], names[2], names[3]])
    assert cache.clear() == (3, 3 * 1024)
    assert cache.entries() == []


def _fresh(home, *argv) -> dict:
    """A run in a process of its own: only the disk cache carries over."""
    out = subprocess.run(
        [sys.executable, "-m", "jobs", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "BASIN_HOME": str(home)},
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.compile
def test_a_kernel_compiled_in_one_process_starts_compiled_in_the_next(folder, tmp_path):
    home = tmp_path / "home"
    argv = ["run", "--target", "banana", "--sampler", "sgld", "--param", "step_size=0.01",
            "--chains", "8", "--steps", "600", "--thin", "3", "--json"]  # fmt: skip
    eager = _fresh(home, *argv, "--compile", "never")
    assert eager["compiled"] is False and not folder.exists()
    first = _fresh(home, *argv, "--compile", "always")  # compiles, and files the package
    listed = _fresh(home, "cache", "--json")
    assert listed["entries"] == 1 and listed["kernels"] == ["sgld"]
    second = _fresh(home, *argv)  # "auto": a 600-step run would never compile by itself
    assert first["compiled"] is True and second["compiled"] is True
    for run in (first, second):  # the same draws: the same statistics, to float rounding
        for name in ("mean", "var"):
            assert run["coordinates"][name] == pytest.approx(eager["coordinates"][name], 1e-9)
        assert run["loss"]["mean"] == pytest.approx(eager["loss"]["mean"], rel=1e-9)
    # a damaged package is not trusted: the run steps eagerly and the entry is gone
    package = next(folder.glob("*.pt2"))
    data = bytearray(package.read_bytes())
    data[len(data) // 2] ^= 1  # one bit flipped
    package.write_bytes(bytes(data))
    third = _fresh(home, *argv)
    assert third["compiled"] is False and not package.exists()
    assert _fresh(home, "cache", "--clear", "--json")["entries"] == 0


def test_jobs_cache_says_where_and_clears(folder, tmp_path):
    _entry(tmp_path, "e" * 40, 2048)
    out = jobs(tmp_path / "home", "cache")
    assert out.returncode == 0 and str(folder) in out.stdout and "1 compiled chunk," in out.stdout
    out = jobs(tmp_path / "home", "cache", "--clear", "--json")
    report = json.loads(out.stdout)
    assert report["removed"] == {"entries": 1, "bytes": 2048} and report["entries"] == 0


def test_a_refused_export_and_a_killed_build_go_when_the_cache_is_cleared(folder):
    assert not cache.refused("r" * 40)
    cache.refuse("r" * 40, "Unsupported('torch.func inside scan')")
    assert cache.refused("r" * 40) and cache.find("r" * 40) is None
    left = folder / "build-killed.tmp"  # a workspace a killed process never removed
    left.mkdir(parents=True)
    (left / "chunk.pt2").write_bytes(b"half")
    cache.clear()
    assert not cache.refused("r" * 40) and not left.exists()


def test_a_forest_whose_export_fails_runs_eagerly_and_is_not_tried_again(folder, monkeypatch):
    """NUTS's compiled forest (samplers.compiled_forest): an export that fails is noted in the
    cache, the run steps eagerly with the eager draws, and a later chunk of the same key does
    not trace again; a network target (not exportable) gets no chunk at all."""
    import torch

    from samplers import compiled_forest
    from samplers.compiled import chunk_for

    tries = []

    def fail(*args, **kwargs):
        tries.append(1)
        raise RuntimeError("an op the export cannot trace")

    monkeypatch.setattr(compiled_forest, "export_package", fail)
    target = landscapes.make("banana", device="cpu", dtype="float64")
    kernel = samplers.make("nuts", step_size=0.3)
    g = torch.Generator().manual_seed(0)
    state = kernel.init(target.exact_sample(g, 4), target, g)
    want, _ = kernel.run(state, target, torch.Generator().manual_seed(1), 16)
    with pytest.warns(UserWarning, match="steps run eagerly: the compile failed"):
        got, _ = kernel.run(state, target, torch.Generator().manual_seed(1), 16, compiled=True)
    assert torch.equal(got.position, want.position) and tries == [1]
    length = kernel.noise_for(state, target, g, most=16).length  # the chunk's block
    again = compiled_forest.ForestChunk(kernel, target, state, length, False)
    assert cache.refused(again.key()) and not again.wait() and tries == [1]
    network = landscapes.make("dln", device="cpu")
    net_state = kernel.init(network.initial(g, 2), network, g)
    assert chunk_for(kernel, network, net_state, 8, False) is None
