"""runs.store: run metadata, claims across processes, chunked arrays, exports."""

import multiprocessing as mp
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise

import numpy as np
import pytest

from runs.store import STATUSES, RunRecord, Store, StoreError
from runs.store_db import CorruptRecords

CHAINS, DIM = 3, 4


def _chunk(rng, start, n, chains=CHAINS, dim=DIM):
    """A random chunk of records in the layout a run loop flushes (time-major)."""
    return {
        "step": np.arange(start, start + n, dtype=np.int64),
        "loss": rng.standard_normal((n, chains)).astype(np.float32),
        "accepted": rng.random((n, chains)).astype(np.float32),
        "diverged": rng.random((n, chains)) < 0.1,
        "position": rng.standard_normal((n, chains, dim)).astype(np.float32),
    }


def _fill(store, run_id, sizes, seed=0):
    """Append chunks of the given sizes; returns the concatenation of what was appended."""
    rng, start, chunks = np.random.default_rng(seed), 0, []
    for n in sizes:
        chunks.append(_chunk(rng, start, n))
        store.append(run_id, start, chunks[-1])
        start += n
    return {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}


# -- metadata ----------------------------------------------------------------------------------


def test_create_get_list(tmp_path):
    store = Store(tmp_path)
    ids = [store.create({"target": "banana", "i": i}) for i in range(3)]
    assert len(set(ids)) == 3 and ids == sorted(ids)  # sortable by creation
    run = store.get(ids[1])
    assert isinstance(run, RunRecord) and run.spec == {"target": "banana", "i": 1}
    assert run.status == "queued" and run.started is None and not run.cancel_requested
    assert [r.id for r in store.list()] == ids[::-1]
    assert [r.id for r in store.list("queued")] == ids[::-1] and store.list("running") == []
    assert (tmp_path / "basin.sqlite").exists()
    assert (tmp_path / "runs" / f"{ids[0]}.sqlite").exists()
    with pytest.raises(KeyError, match="nope"):
        store.get("nope")
    with pytest.raises(ValueError, match="status"):
        store.list("done")


def test_a_home_that_cannot_hold_runs_is_named_in_the_error(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(StoreError, match=r"BASIN_HOME: .*file/home \(Not a directory\)"):
        Store(tmp_path / "file" / "home")


def test_home_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("BASIN_HOME", str(tmp_path / "h"))
    assert Store().home == (tmp_path / "h").resolve()


def test_status_transitions(tmp_path):
    store = Store(tmp_path)
    a, b = store.create({"n": 1}), store.create({"n": 2})
    assert store.claim(worker_pid=123).id == a  # the oldest first
    run = store.get(a)
    assert (run.status, run.worker_pid) == ("running", 123)
    assert run.started is not None and run.heartbeat is not None
    store.set_progress(a, {"steps_done": 5, "steps_total": 10, "steps_per_second": 2.0})
    assert store.get(a).progress["steps_done"] == 5
    store.finish(a, "completed", summary={"llc": 1.5})
    run = store.get(a)
    assert run.status == "completed" and run.summary == {"llc": 1.5} and run.finished is not None
    with pytest.raises(StoreError, match="is completed; only interrupted, cancelled or failed"):
        store.requeue(a)  # nothing to resume
    assert store.get(a).summary == {"llc": 1.5}
    store.finish(a, "interrupted")
    assert store.requeue(a) is True
    assert store.get(a).status == "queued" and store.get(a).progress["steps_done"] == 5
    # a requeued run keeps its place: it is still the oldest
    assert store.claim(1).id == a and store.claim(1).id == b and store.claim(1) is None
    store.finish(b, "failed", error="boom")
    assert (store.get(b).status, store.get(b).error) == ("failed", "boom")
    with pytest.raises(ValueError, match="finish status"):
        store.finish(a, "running")
    with pytest.raises(KeyError):
        store.heartbeat("nope")
    assert set(STATUSES) >= {r.status for r in store.list()}


def test_request_cancel(tmp_path):
    store = Store(tmp_path)
    queued, running = store.create({}), store.create({})
    store.claim(1)  # takes `queued`, the oldest
    queued, running = running, queued
    store.request_cancel(queued)
    assert store.get(queued).status == "cancelled" and store.get(queued).finished is not None
    store.request_cancel(running)
    run = store.get(running)
    assert run.status == "running" and run.cancel_requested
    store.finish(running, "cancelled")
    store.request_cancel(running)  # already over: nothing changes
    assert store.get(running).status == "cancelled"
    with pytest.raises(KeyError):
        store.request_cancel("nope")


def test_mark_stale_old_heartbeat(tmp_path):
    store = Store(tmp_path)
    run_id = store.create({})
    store.claim(os.getpid())
    assert store.mark_stale(timeout_s=60) == []  # fresh heartbeat, live pid
    time.sleep(0.05)
    assert store.mark_stale(timeout_s=0.01) == [run_id]
    run = store.get(run_id)
    assert run.status == "interrupted" and f"worker {os.getpid()} stopped" in run.error
    assert "no heartbeat for" in run.error


def test_mark_stale_dead_pid(tmp_path):
    store = Store(tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", "pass"])  # a real pid, gone once it exits
    proc.wait()
    live, dead = store.create({}), store.create({})
    store.claim(os.getpid())
    store.claim(proc.pid)
    assert store.mark_stale(timeout_s=60) == [dead]
    assert store.get(live).status == "running"
    run = store.get(dead)
    assert run.status == "interrupted" and f"worker {proc.pid} stopped" in run.error
    assert store.mark_stale(timeout_s=60, alive=lambda pid: False) == [live]


def _claim_all(home, out):
    store = Store(home)
    while (run := store.claim(os.getpid())) is not None:
        out.put(run.id)
        time.sleep(0.01)  # let the other claimer in


def test_concurrent_claims_take_each_run_once(tmp_path):
    store = Store(tmp_path)
    ids = [store.create({"i": i}) for i in range(10)]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_claim_all, args=(str(tmp_path), out)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    claimed = [out.get(timeout=10) for _ in ids]
    assert sorted(claimed) == sorted(ids) and out.empty()
    assert {r.status for r in store.list()} == {"running"}


# -- arrays ------------------------------------------------------------------------------------


def test_append_read_round_trip(tmp_path):
    store = Store(tmp_path)
    run_id = store.create({})
    assert store.read(run_id) == {} and store.records(run_id) == 0
    sizes = [5, 1, 7, 3, 4]
    full = _fill(store, run_id, sizes)
    assert store.records(run_id) == sum(sizes) == 20
    got = store.read(run_id)
    assert set(got) == set(full)
    for name in full:
        assert got[name].dtype == full[name].dtype
        np.testing.assert_array_equal(got[name], full[name])
    # at boundaries (0, 5, 6, 13, 16), inside chunks, at the end and past it
    for since in [0, 2, 5, 6, 7, 12, 13, 16, 19, 20, 25]:
        got = store.read(run_id, since=since)
        for name in full:
            np.testing.assert_array_equal(got[name], full[name][since:])
    empty = store.read(run_id, since=20)
    assert empty["position"].shape == (0, CHAINS, DIM) and empty["step"].shape == (0,)
    assert empty["diverged"].dtype == bool
    only = store.read(run_id, since=3, names=["loss", "never-recorded"])
    assert list(only) == ["loss"]
    np.testing.assert_array_equal(only["loss"], full["loss"][3:])
    with pytest.raises(KeyError):
        store.read("nope")


def test_a_chunk_given_in_parts_reads_back_as_their_concatenation(tmp_path):
    store = Store(tmp_path)
    run_id = store.create({})
    rng = np.random.default_rng(2)
    blocks = [_chunk(rng, 0, 3), _chunk(rng, 3, 5), _chunk(rng, 8, 1)]
    store.append(run_id, 0, {name: [b[name] for b in blocks] for name in blocks[0]})
    store.append(run_id, 9, _chunk(rng, 9, 2))  # a plain chunk after it
    got = store.read(run_id)
    for name in blocks[0]:
        want = np.concatenate([b[name] for b in blocks])
        np.testing.assert_array_equal(got[name][:9], want)
    assert store.records(run_id) == 11
    np.testing.assert_array_equal(store.read(run_id, since=5)["step"], np.arange(5, 11))
    with pytest.raises(ValueError, match="parts"):  # parts must agree in dtype and shape
        parts = [np.zeros((1, CHAINS), np.float32), np.zeros((1, CHAINS))]
        store.append(run_id, 11, {**_chunk(rng, 11, 2), "loss": parts})
    assert store.records(run_id) == 11


ODD_SIZES = [(1, 3, 7, 150, 13)[i % 5] for i in range(40)]  # records per chunk


def _odd_values(step: np.ndarray) -> dict[str, np.ndarray]:
    """Records whose names have odd byte sizes a record, every value derived from its step."""
    return {
        "step": step,
        "code": (step[:, None] * 7 + np.arange(3)).astype(np.int8),  # 3 bytes a record
        "diverged": (step[:, None] + np.arange(5)) % 3 == 0,  # 5 bytes a record
        "position": np.sin(step[:, None, None] + np.arange(6).reshape(2, 3)).astype(np.float32),
    }


def _odd_chunk(start: int, n: int) -> dict[str, list[np.ndarray]]:
    """``n`` records from ``start``, each name in four parts, the second one empty."""
    cuts = [0, n // 3, n // 3, n // 2, n]
    values = _odd_values(np.arange(start, start + n, dtype=np.int64))
    return {k: [v[a:b] for a, b in pairwise(cuts)] for k, v in values.items()}


def test_odd_sizes_in_many_parts_read_back_exactly_while_a_thread_writes_them(tmp_path):
    """Every read while chunks are appended is a whole-chunk prefix equal to what was written;
    the .bin file holds exactly the parts' bytes, one after another, and a retried chunk is
    refused without writing a byte."""
    store = Store(tmp_path)
    run_id = store.create({})
    ends, written = np.cumsum(ODD_SIZES), []

    def write() -> None:
        for start, n in zip([0, *ends[:-1]], ODD_SIZES, strict=True):
            written.append(_odd_chunk(int(start), n))
            store.append(run_id, int(start), written[-1])  # this thread's own connection and file
            time.sleep(0.001)

    seen = set()
    with ThreadPoolExecutor(1) as pool:
        writing = pool.submit(write)
        while not writing.done():
            got = store.read(run_id)
            n = len(got.get("step", ()))
            assert n == 0 or n in ends
            for name, want in (_odd_values(np.arange(n)) if n else {}).items():
                assert got[name].dtype == want.dtype
                np.testing.assert_array_equal(got[name], want)
            seen.add(n)
        writing.result()  # the writer's error, if any
    total = int(ends[-1])
    assert seen - {0, total}  # the reader saw partial runs
    got = store.read(run_id)
    for name, want in _odd_values(np.arange(total)).items():
        np.testing.assert_array_equal(got[name], want)
    path = tmp_path / "runs" / f"{run_id}.bin"
    parts = [p.tobytes() for chunk in written for name in chunk for p in chunk[name]]
    assert path.read_bytes() == b"".join(parts)
    with pytest.raises(ValueError, match=f"expected {total}"):
        store.append(run_id, 0, _odd_chunk(0, 1))
    assert path.stat().st_size == len(b"".join(parts)) and store.records(run_id) == total


def test_bytes_left_without_an_index_row_are_skipped_and_a_cut_file_is_an_error(tmp_path):
    store = Store(tmp_path)
    run_id = store.create({})
    full = _fill(store, run_id, [3])
    path = tmp_path / "runs" / f"{run_id}.bin"
    with open(path, "ab") as f:
        f.write(b"\xff" * 13)  # a writer that died between its write and its commit
    rest = _chunk(np.random.default_rng(9), 3, 4)
    store.append(run_id, 3, rest)
    got = store.read(run_id)
    for name in full:
        np.testing.assert_array_equal(got[name], np.concatenate([full[name], rest[name]]))
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 1)
    with pytest.raises(CorruptRecords, match=rf"run {run_id}: records 3-6 \(position: cut short"):
        store.read(run_id)


def test_a_store_keeps_at_most_open_run_files_per_thread(tmp_path, monkeypatch):
    import runs.store as S

    monkeypatch.setattr(S, "OPEN_RUN_FILES", 2)
    store = Store(tmp_path)
    runs = [store.create({}) for _ in range(4)]
    for run_id in runs:
        _fill(store, run_id, [2])
    state = store._state()
    assert list(state.runs) == runs[2:] and sorted(state.appenders) == sorted(runs[2:])
    for run_id in runs:  # an evicted run reopens
        assert store.records(run_id) == 2


def test_append_refuses_bad_chunks(tmp_path):
    store = Store(tmp_path)
    run_id = store.create({})
    rng = np.random.default_rng(1)
    store.append(run_id, 0, _chunk(rng, 0, 4))
    with pytest.raises(ValueError, match="expected 4"):
        store.append(run_id, 0, _chunk(rng, 0, 4))  # a retried flush
    with pytest.raises(ValueError, match="expected 4"):
        store.append(run_id, 6, _chunk(rng, 6, 4))  # a gap
    with pytest.raises(ValueError, match="leading length"):
        store.append(run_id, 4, {"loss": np.zeros((2, 3)), "step": np.zeros(3)})
    with pytest.raises(ValueError, match="names"):
        store.append(run_id, 4, {"loss": np.zeros((2, CHAINS), np.float32)})
    bad = _chunk(rng, 4, 2, dim=DIM + 1)
    with pytest.raises(ValueError, match="position"):
        store.append(run_id, 4, bad)
    assert store.records(run_id) == 4
    store.append(run_id, 4, _chunk(rng, 4, 2))
    assert store.records(run_id) == 6


def test_side_arrays(tmp_path):
    store = Store(tmp_path)
    run_id = store.create({})
    assert store.get_array(run_id, "projection") is None
    store.put_array(run_id, "projection", np.eye(3))
    store.put_array(run_id, "projection", np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(store.get_array(run_id, "projection"), [[0, 1, 2], [3, 4, 5]])


def test_delete(tmp_path):
    store = Store(tmp_path)
    run_id, other = store.create({}), store.create({})
    _fill(store, run_id, [3, 3])
    path = tmp_path / "runs" / f"{run_id}.sqlite"
    assert path.exists()
    store.delete(run_id)
    assert not path.exists() and not list((tmp_path / "runs").glob(f"{run_id}*"))
    assert [r.id for r in store.list()] == [other]
    with pytest.raises(KeyError):
        store.get(run_id)
    with pytest.raises(KeyError):
        store.read(run_id)
    with pytest.raises(KeyError):
        store.append(run_id, 6, _chunk(np.random.default_rng(), 6, 1))
    with pytest.raises(KeyError):
        store.delete(run_id)
    assert not path.exists()  # a refused append never recreates the file


def test_a_sweep_counts_its_deleted_runs_as_done(tmp_path):
    from studies import sweeps

    store = Store(tmp_path)
    ids = [store.create({"i": i}) for i in range(3)]
    sweep_id = store.create_sweep("dln", {}, [{"run_id": i} for i in ids])
    store.finish(store.claim(1).id, "completed")
    store.delete(ids[1])
    progress = sweeps.progress(store, store.get_sweep(sweep_id))
    assert progress == {
        "runs": 3,
        "done": 2,
        "by_status": {"completed": 1, "deleted": 1, "queued": 1},
    }


# -- concurrency: readers in one process, writers in others ------------------------------------

N_CHUNKS, C_CONC, D_CONC = 200, 8, 16


def _size(i):
    return 1 + i % 7


def _marked_chunk(i, start):
    """Every value in chunk i says i, so a torn or mixed-up chunk shows."""
    n = _size(i)
    return {
        "step": np.arange(start, start + n, dtype=np.int64),
        "chunk": np.full(n, i, dtype=np.int64),
        "loss": np.full((n, C_CONC), i, dtype=np.float32),
        "diverged": np.full((n, C_CONC), i % 2 == 1),
        "position": np.full((n, C_CONC, D_CONC), i, dtype=np.float64),
    }


def _write_marked(home, run_id):
    store, start = Store(home), 0
    for i in range(N_CHUNKS):
        store.append(run_id, start, _marked_chunk(i, start))
        start += _size(i)
        time.sleep(0.002)


def _check_prefix(got, since=0):
    """A read from `since` must end on a chunk boundary, and each record agree across arrays."""
    ends = np.cumsum([_size(i) for i in range(N_CHUNKS)])
    length = since + len(got["step"]) if got else 0
    assert length == 0 or length in ends
    if not got:
        return length
    np.testing.assert_array_equal(got["step"], np.arange(since, length))
    chunk_of = np.searchsorted(ends, got["step"], side="right")
    np.testing.assert_array_equal(got["chunk"], chunk_of)
    np.testing.assert_array_equal(got["loss"], np.repeat(chunk_of, C_CONC).reshape(-1, C_CONC))
    np.testing.assert_array_equal(got["diverged"], (got["loss"] % 2) == 1)
    np.testing.assert_array_equal(got["position"], got["loss"][..., None].repeat(D_CONC, -1))
    return length


def _watch(store, run_ids, procs):
    """Poll every run while the writers work: full reads and incremental reads by `since`."""
    seen = {run_id: set() for run_id in run_ids}
    done = dict.fromkeys(run_ids, 0)
    while any(p.is_alive() for p in procs):
        for run_id in run_ids:
            seen[run_id].add(_check_prefix(store.read(run_id)))
            since = done[run_id]
            done[run_id] = _check_prefix(store.read(run_id, since=since), since) or since
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    total = sum(_size(i) for i in range(N_CHUNKS))
    for run_id in run_ids:
        assert _check_prefix(store.read(run_id)) == total == store.records(run_id)
        assert len(seen[run_id] - {0, total}) >= 1  # the reader saw partial runs
    return seen


def test_reader_sees_whole_chunks_while_a_process_writes(tmp_path):
    store = Store(tmp_path)
    run_id = store.create({})
    proc = mp.get_context("spawn").Process(target=_write_marked, args=(str(tmp_path), run_id))
    proc.start()
    _watch(store, [run_id], [proc])


def test_two_writers_two_runs_one_reader(tmp_path):
    store = Store(tmp_path)
    run_ids = [store.create({}), store.create({})]
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_write_marked, args=(str(tmp_path), r)) for r in run_ids]
    for p in procs:
        p.start()
    _watch(store, run_ids, procs)


# -- export ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("burn_in", "thin"), [(0, 1), (5, 3), (7, 2), (40, 1)])
def test_export_npz_is_chain_major(tmp_path, burn_in, thin):
    store = Store(tmp_path)
    run_id = store.create({})
    full = _fill(store, run_id, [4, 9, 2, 8])
    path = store.export_npz(run_id, tmp_path / "run.data", burn_in=burn_in, thin=thin)
    assert path == tmp_path / "run.data"
    keep = slice(burn_in, None, thin)
    draws = len(range(23)[keep])
    with np.load(path) as npz:
        assert set(npz.files) == set(full)
        assert npz["position"].shape == (CHAINS, draws, DIM)
        assert npz["loss"].shape == (CHAINS, draws)
        np.testing.assert_array_equal(npz["step"], full["step"][keep])
        for name in ("position", "loss", "accepted", "diverged"):
            np.testing.assert_array_equal(npz[name], np.swapaxes(full[name][keep], 0, 1))


def test_export_netcdf_round_trips_through_xarray(tmp_path):
    import xarray as xr

    store = Store(tmp_path)
    run_id = store.create({})
    full = _fill(store, run_id, [6, 6, 11])
    path = store.export_netcdf(run_id, tmp_path / "run.nc", burn_in=3, thin=2)
    idata = xr.open_datatree(path)  # ArviZ's layout: a DataTree with posterior and sample_stats
    position = idata.posterior["position"]
    assert position.dims == ("chain", "draw", "dim")
    np.testing.assert_array_equal(position.values, np.swapaxes(full["position"][3::2], 0, 1))
    np.testing.assert_array_equal(position["draw"].values, full["step"][3::2])
    for name in ("loss", "accepted", "diverged"):
        np.testing.assert_array_equal(
            idata.sample_stats[name].values, np.swapaxes(full[name][3::2], 0, 1)
        )


def test_export_before_any_records(tmp_path):
    import xarray as xr

    store = Store(tmp_path)
    run_id = store.create({})
    with np.load(store.export_npz(run_id, tmp_path / "empty.npz")) as npz:
        assert npz.files == []
    _fill(store, run_id, [2])
    idata = xr.open_datatree(store.export_netcdf(run_id, tmp_path / "late.nc", burn_in=5))
    assert idata.posterior["position"].shape == (CHAINS, 0, DIM)


# -- a lost run index (issue 60, item B) -----------------------------------------------------


def _store_with_runs(home, count=2):
    """A store of ``count`` runs with records, their files dated a minute back."""
    store = Store(home)
    ids = [store.create({"i": i}) for i in range(count)]
    for run_id in ids:
        _fill(store, run_id, [4])
    store.close()
    old = time.time() - 60
    for path in (home / "runs").iterdir():
        os.utime(path, (old, old))
    return ids


def _one_line(out):
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


def test_an_empty_basin_sqlite_beside_run_files_is_reported_never_reinitialised(tmp_path):
    from clitest import jobs

    _store_with_runs(tmp_path)
    meta = tmp_path / "basin.sqlite"
    for suffix in ("-wal", "-shm"):
        meta.with_name(meta.name + suffix).unlink(missing_ok=True)
    meta.write_bytes(b"")  # `: > basin.sqlite`
    for command in ("list", "check"):
        out = jobs(tmp_path, command)
        line = _one_line(out)
        assert out.returncode == 2 and "Traceback" not in out.stderr
        assert f"{meta} is empty (0 bytes)" in line and "holds 2 runs' files" in line
        assert "restore basin.sqlite from a backup" in line
    with pytest.raises(StoreError, match="is empty"):
        Store(tmp_path)
    assert meta.stat().st_size == 0  # nothing re-initialised it


def test_a_missing_or_recreated_basin_sqlite_beside_run_files_is_reported(tmp_path):
    import sqlite3

    _store_with_runs(tmp_path)
    meta = tmp_path / "basin.sqlite"
    for suffix in ("", "-wal", "-shm"):
        meta.with_name(meta.name + suffix).unlink(missing_ok=True)
    with pytest.raises(StoreError, match=r"basin.sqlite is missing but .* holds 2 runs' files"):
        Store(tmp_path)
    assert not meta.exists()
    with sqlite3.connect(meta) as db:  # recreated, as Basin itself did before: empty tables
        db.execute("CREATE TABLE runs (id TEXT PRIMARY KEY, spec TEXT, status TEXT, "
                   "created REAL, started REAL, finished REAL, progress TEXT, error TEXT, "
                   "summary TEXT, worker_pid INTEGER, heartbeat REAL, "
                   "cancel_requested INTEGER NOT NULL DEFAULT 0)")  # fmt: skip
    with pytest.raises(StoreError, match=r"lists no runs .* holds 2 runs' files"):
        Store(tmp_path)


def test_a_new_store_and_a_run_being_created_are_not_damage(tmp_path):
    store = Store(tmp_path)
    store._run("20990101-000000000-abcd", create=True)  # its row not written yet
    Store(tmp_path)  # opens: the file is younger than the index
    assert store.check() == []


def test_a_garbage_write_ahead_log_is_named_not_blamed_on_permissions(tmp_path):
    _store_with_runs(tmp_path)
    holder = subprocess.Popen(  # the app, still open: its -shm indexes the log's frames
        [sys.executable, "-c", HOLDER, str(tmp_path / "basin.sqlite")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "2"  # it sees both runs, through the log
        wal = tmp_path / "basin.sqlite-wal"
        wal.write_bytes(b"garbage")
        with pytest.raises(StoreError) as caught:
            Store(tmp_path)
    finally:
        holder.communicate("", timeout=30)
    message = str(caught.value)
    assert str(wal) in message and "write-ahead log" in message
    assert "BASIN_HOME" not in message and "this user can write" not in message
    assert len(Store(tmp_path).list()) == 2  # the holder gone, SQLite drops the bad log


HOLDER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
db.execute("CREATE TABLE held (a)")  # the schema, read by every opening, is in the log now
print(db.execute("SELECT count(*) FROM runs").fetchone()[0], flush=True)
sys.stdin.read()
"""


def test_check_lists_orphaned_run_files_lost_sweep_runs_and_rows_of_wrong_types(tmp_path):
    import sqlite3

    from clitest import jobs

    a, b, c = _store_with_runs(tmp_path, 3)
    store = Store(tmp_path)
    sweep_id = store.create_sweep("dln", {}, [{"run_id": a}, {"run_id": b}])
    store.claim(os.getpid())  # a is running
    with sqlite3.connect(tmp_path / "basin.sqlite") as db:
        db.execute("DELETE FROM runs WHERE id = ?", (b,))  # its row lost, its files kept
        db.execute("UPDATE runs SET heartbeat = 'soon' WHERE id = ?", (a,))
        db.execute("UPDATE runs SET created = 'yesterday' WHERE id = ?", (c,))
    problems = store.check()
    assert any(f"run {b}: its files in" in p and "have no row in basin.sqlite" in p
               for p in problems), problems  # fmt: skip
    assert any(f"sweep {sweep_id}: 1 of its 2 runs ({b})" in p for p in problems), problems
    assert any(f"run {a}: its heartbeat is text ('soon')" in p for p in problems), problems
    assert any(f"run {c}: its created is text ('yesterday')" in p for p in problems), problems
    out = jobs(tmp_path, "check")
    assert out.returncode == 1 and b in out.stdout and "Traceback" not in out.stderr
    listed = jobs(tmp_path, "list")  # the rows of wrong types are listed as damaged
    assert listed.returncode == 0, listed.stderr
    assert f"{a}  damaged" in listed.stdout and f"{c}  damaged" in listed.stdout
