"""torch's CPU tensors from malloc (samplers/allocator.py) and glibc's tunables for the processes
Basin starts (jobs.tuned_environ): memory comes back aligned, intact and freed from any thread,
sampling gives the same numbers bit for bit, and a worker starts with the tunables."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

import jobs
import landscapes
import samplers
from samplers import allocator

ROOT = Path(__file__).resolve().parents[1]
# bytes: around the 64-byte alignment, the page alignment from 64 KB, and c10's THP threshold
SIZES = [1, 63, 64, 65, 1000, (1 << 16) - 1, 1 << 16, 3 << 20]

need = pytest.mark.skipif(
    not (allocator.wanted() and shutil.which(os.environ.get("CXX", "c++"))),
    reason="the malloc allocator is built on Linux with a C++ compiler",
)


@need
def test_samplers_import_installs_the_malloc_allocator():
    assert allocator.active()  # built and loaded, or this machine's compiler failed it


@need
@pytest.mark.parametrize("huge", [False, True])
def test_tensors_are_aligned_and_keep_their_values(monkeypatch, huge):
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "1" if huge else "0")
    try:
        assert allocator.install()
        for size in SIZES:
            t = torch.empty(size, dtype=torch.uint8)
            page = huge and size >= 1 << 16  # page-aligned from 64 KB when THP is asked for
            assert t.data_ptr() % (os.sysconf("SC_PAGESIZE") if page else 64) == 0, size
            t.copy_(torch.arange(size) % 251)
            # sum of (i mod 251) over i < size, in closed form
            full, rest = divmod(size, 251)
            assert int(t.sum(dtype=torch.int64)) == full * 250 * 251 // 2 + rest * (rest - 1) // 2
        assert torch.empty(0).data_ptr() == 0
    finally:  # the process's own setting (``import jobs`` set it) for the tests after this one
        monkeypatch.undo()
        allocator.install()


@need
def test_an_allocation_past_memory_is_torchs_out_of_memory_error_not_a_crash():
    with pytest.raises(torch.OutOfMemoryError, match="not enough memory"):
        torch.empty(2**62, dtype=torch.uint8)
    assert float(torch.ones(3).sum()) == 3.0  # and the allocator goes on


@need
def test_tensors_free_from_any_thread_and_across_a_switch():
    made: list[torch.Tensor] = []

    def make():
        made.extend(torch.full((n,), float(n)) for n in range(1, 300))

    thread = threading.Thread(target=make)
    thread.start()
    thread.join()
    assert all(float(t.sum()) == len(t) ** 2 for t in made)
    made.clear()  # freed here, made on the other thread

    allocator.uninstall()  # made by torch's allocator, freed by ours, and the other way round
    theirs = [torch.ones(n) for n in (10, 5000, 1 << 20)]
    assert not allocator.active()
    assert allocator.install()
    ours = [torch.ones(n) for n in (10, 5000, 1 << 20)]
    allocator.uninstall()
    del ours
    assert allocator.install()
    assert sum(float(t.sum()) for t in theirs) == 10 + 5000 + (1 << 20)
    del theirs


@need
@pytest.mark.parametrize("fused", [False, True])
def test_sampling_is_the_same_bit_for_bit_under_either_allocator(fused):
    def run():
        target = landscapes.make("banana", device="cpu", dtype="float32")
        kernel = samplers.make("hmc", step_size=0.1, leapfrog_steps=5)
        g = torch.Generator().manual_seed(4)
        state = kernel.init(target.initial(g, 64), target, g)
        state, info = kernel.run(state, target, g, 40, fused=fused)
        return state.position, info.loss

    try:
        allocator.uninstall()
        reference = run()
        assert allocator.install()
        got = run()
    finally:
        allocator.install()
    assert torch.equal(got[0], reference[0]) and torch.equal(got[1], reference[1])


def test_tuned_environ_adds_each_tunable_once():
    tuned = ":".join(f"{name}={value}" for name, value in jobs.TUNABLES.items())
    assert jobs.tuned_environ({})["GLIBC_TUNABLES"] == tuned
    mixed = jobs.tuned_environ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})
    assert mixed["GLIBC_TUNABLES"] == f"glibc.malloc.arena_max=2:{tuned}"
    mine = {"GLIBC_TUNABLES": "glibc.malloc.tcache_count=7"}  # the user's own value stays
    got = jobs.tuned_environ(mine)["GLIBC_TUNABLES"].split(":")
    assert got[0] == "glibc.malloc.tcache_count=7" and len(got) == len(jobs.TUNABLES)
    assert jobs.tuned_environ(got := {"GLIBC_TUNABLES": ":".join(got)}) == got  # all set: as is
    assert "GLIBC_TUNABLES" not in jobs.tuned_environ({"BASIN_ALLOCATOR": "torch"})


# Holds 8 blocks of 8 MB from malloc, touches them, frees them all, three times; prints the page
# faults of the third round. glibc's defaults mmap the first round's blocks, then (its threshold
# raised to 8 MB) take the next from the heap and trim the heap's 64 MB free top back to the
# kernel: each round faults its 16,384 pages in anew.
ROUNDS = """
import ctypes, resource
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
size = 8 << 20
for round in range(3):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    blocks = [libc.malloc(size) for _ in range(8)]
    for block in blocks:
        ctypes.memset(block, 1, size)
    for block in blocks:
        libc.free(block)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not (jobs.glibc() and sys.platform.startswith("linux")), reason="glibc")
def test_the_tunables_keep_freed_blocks_for_the_next_ones():
    def faults(env: dict[str, str]) -> int:
        out = subprocess.run(
            [sys.executable, "-c", ROUNDS], env=env, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        return int(out.stdout)

    plain = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "BASIN_ALLOCATOR")}
    pages = 8 * (8 << 20) // os.sysconf("SC_PAGE_SIZE")
    assert faults(plain) >= pages // 2  # glibc's defaults: the blocks come back as new pages
    assert faults(jobs.tuned_environ(plain)) < pages // 20  # tuned: the same pages again


@pytest.mark.skipif(
    not (jobs.glibc() and Path("/proc/self/environ").exists()),
    reason="glibc's tunables, read from /proc",
)
def test_a_worker_starts_again_with_the_tunables_under_its_own_pid(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "BASIN_TUNED")}
    env |= {"BASIN_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "jobs", "worker"], cwd=ROOT, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:  # the pid's environment changes when it has started again
            environ = Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
            if b"BASIN_TUNED=1" in environ or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        # glibc cuts GLIBC_TUNABLES at its colons in place as it reads them: each one is there
        tunables = [f"{name}={value}".encode() for name, value in jobs.TUNABLES.items()]
        assert all(any(t in entry for entry in environ) for t in tunables), environ
    finally:
        proc.terminate()
        proc.wait(30)
