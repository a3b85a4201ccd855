"""Faults the store must survive (issue 38): a kill mid-export, damaged record bytes, a corrupted
index (object dtypes, empty or garbage files), damaged run metadata, exports to pipes. Every
fault is made here by hand, on a store written through the Store API."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from clitest import jobs, process

from runs.spec import parse_spec
from runs.store import DamagedStore, Store
from runs.store_db import CorruptRecords

ROOT = Path(__file__).resolve().parents[1]
CHAINS, DIM = 3, 4
SPEC = parse_spec(
    {
        "target": {"name": "banana"},
        "sampler": {"name": "mala", "params": {"step_size": 0.1}},
        "chains": CHAINS,
        "steps": 1000,
        "device": "cpu",
    }
).model_dump(mode="json")


def _chunk(rng, start: int, n: int) -> dict[str, np.ndarray]:
    return {
        "step": np.arange(start, start + n, dtype=np.int64),
        "loss": rng.standard_normal((n, CHAINS)).astype(np.float32),
        "diverged": rng.random((n, CHAINS)) < 0.1,
        "position": rng.standard_normal((n, CHAINS, DIM)),
    }


def _write_run(store: Store, sizes: list[int], seed: int = 0) -> tuple[str, list[dict]]:
    """A completed run whose records are chunks of ``sizes``; returns its id and the chunks."""
    run_id, rng, start, chunks = store.create(SPEC), np.random.default_rng(seed), 0, []
    for n in sizes:
        chunks.append(_chunk(rng, start, n))
        store.append(run_id, start, chunks[-1])
        start += n
    store.finish(run_id, "completed")
    return run_id, chunks


def _join(chunks: list[dict]) -> dict[str, np.ndarray]:
    return {name: np.concatenate([c[name] for c in chunks]) for name in chunks[0]}


def _settle(home: Path) -> None:
    """Fold every WAL into its database file, so that bytes edited there are what is read."""
    for path in [home / "basin.sqlite", *(home / "runs").glob("*.sqlite")]:
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()


def _one_line_error(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


# -- 3. exports are atomic ---------------------------------------------------------------------


def _dies_midway(paths: list[Path]):
    """A writer that puts 1000 bytes out and then dies, as a kill or a full disk would; it
    notes where it wrote."""

    def write(target, *args, **kwargs):
        if isinstance(target, (str, os.PathLike)):
            with open(target, "wb") as f:
                f.write(b"\x00" * 1000)
        else:
            target.write(b"\x00" * 1000)
        paths.append(Path(getattr(target, "name", target)))
        raise OSError(28, "No space left on device")

    return write


@pytest.mark.parametrize("kind", ["npz", "netcdf"])
def test_an_export_that_dies_midway_leaves_the_old_file_and_no_temp_file(tmp_path, kind):
    import xarray as xr

    store = Store(tmp_path / "home")
    run_id, _ = _write_run(store, [5, 5])
    out = tmp_path / "out" / f"run.{kind}"
    out.parent.mkdir()
    export = store.export_npz if kind == "npz" else store.export_netcdf
    export(run_id, out)
    old = out.read_bytes()
    paths, patch = [], pytest.MonkeyPatch()
    with patch.context() as m:
        if kind == "npz":
            m.setattr(np, "savez", _dies_midway(paths))
        else:
            m.setattr(xr.DataTree, "to_netcdf", lambda self, f, **k: _dies_midway(paths)(f))
        with pytest.raises(OSError, match="No space left"):
            export(run_id, out)
    assert len(paths) == 1 and paths[0].parent == out.parent and paths[0] != out  # beside it
    assert out.read_bytes() == old  # the old export is whole ...
    assert os.listdir(out.parent) == [out.name]  # ... and the temporary file is gone
    export(run_id, out)  # a later export replaces it, again leaving nothing beside it
    assert os.listdir(out.parent) == [out.name]


# -- 4. records carry checksums ----------------------------------------------------------------


def _damage(path: Path, at: int, count: int, seed: int) -> bytes:
    """Overwrite ``count`` bytes of ``path`` from ``at`` with random ones; returns the old bytes."""
    data = path.read_bytes()
    noise = np.random.default_rng(seed).integers(0, 256, count, dtype=np.uint8).tobytes()
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(noise)
    return data


def _changed_chunks(old: bytes, new: bytes, chunks: list[dict]) -> list[tuple[int, int]]:
    """(first, last) records of each chunk with a byte that differs, from the layout written:
    a chunk's names one after another, in the order given, each array's raw bytes."""
    ranges, at, start = [], 0, 0
    for chunk in chunks:
        size = sum(a.nbytes for a in chunk.values())
        n = len(chunk["step"])
        if old[at : at + size] != new[at : at + size]:
            ranges.append((start, start + n - 1))
        at, start = at + size, start + n
    assert at == len(old)  # the layout accounts for every byte of the file
    return ranges


def test_damaged_bytes_are_reported_by_record_range_and_the_good_chunks_still_read(tmp_path):
    store = Store(tmp_path)
    sizes = [25] * 20
    run_id, chunks = _write_run(store, sizes)
    full = _join(chunks)
    data = tmp_path / "runs" / f"{run_id}.bin"
    old = _damage(data, at=15_000, count=2000, seed=1)
    bad = _changed_chunks(old, data.read_bytes(), chunks)
    assert 1 <= len(bad) < len(sizes)
    with pytest.raises(CorruptRecords) as caught:
        store.read(run_id)
    assert [(a, b) for a, b, _ in caught.value.ranges] == bad
    assert isinstance(caught.value, ValueError) and run_id in str(caught.value)
    for a, b in bad:
        assert f"records {a}-{b} (" in str(caught.value)
    # what lies after the last damaged chunk reads back exactly
    after = bad[-1][1] + 1
    got = store.read(run_id, since=after)
    for name, want in full.items():
        np.testing.assert_array_equal(got[name], want[after:])
    # an export keeps every good record and says which it left out
    keep = np.ones(len(full["step"]), bool)
    for a, b in bad:
        keep[a : b + 1] = False
    with pytest.raises(CorruptRecords):
        store.export_npz(run_id, tmp_path / "strict.npz")
    damaged = []
    store.export_npz(run_id, tmp_path / "run.npz", damaged=damaged)
    assert [(a, b) for a, b, _ in damaged] == bad
    assert all("checksum" in why for _, _, why in damaged)
    with np.load(tmp_path / "run.npz") as npz:
        np.testing.assert_array_equal(npz["step"], full["step"][keep])
        for name in ("loss", "diverged", "position"):
            np.testing.assert_array_equal(npz[name], np.swapaxes(full[name][keep], 0, 1))


def test_the_cli_exports_the_good_chunks_and_names_the_damaged_ones(tmp_path):
    store = Store(tmp_path)
    run_id, chunks = _write_run(store, [40] * 10, seed=2)
    full = _join(chunks)
    data = tmp_path / "runs" / f"{run_id}.bin"
    old = _damage(data, at=9_000, count=2000, seed=3)
    bad = _changed_chunks(old, data.read_bytes(), chunks)
    out = tmp_path / "run.npz"
    printed = jobs(tmp_path, "export", run_id, "--out", str(out))
    assert printed.returncode == 1
    assert printed.stdout.strip() == str(out) and "Traceback" not in printed.stderr
    warned = printed.stderr.strip().splitlines()
    assert len(warned) == len(bad)
    for line, (a, b) in zip(warned, bad, strict=True):
        assert line.startswith(f"warning: run {run_id}: records {a}-{b} left out")
    keep = np.ones(len(full["step"]), bool)
    for a, b in bad:
        keep[a : b + 1] = False
    with np.load(out) as npz:
        np.testing.assert_array_equal(npz["step"], full["step"][keep])
        np.testing.assert_array_equal(npz["loss"], np.swapaxes(full["loss"][keep], 0, 1))
    checked = jobs(tmp_path, "check")
    assert checked.returncode == 1
    report = checked.stdout
    assert all(f"{a}-{b}" in report for a, b in bad) and run_id in report


def test_a_store_from_before_checksums_reads_and_gains_the_column(tmp_path):
    store = Store(tmp_path)
    run_id, chunks = _write_run(store, [4, 6])
    store.close()
    index = tmp_path / "runs" / f"{run_id}.sqlite"
    with sqlite3.connect(index) as conn:  # the layout before checksums: no crc column
        for table in ("chunks", "flushes", "snapshots"):
            conn.execute(f"ALTER TABLE {table} DROP COLUMN crc")
    conn.close()
    store = Store(tmp_path)
    for name, want in _join(chunks).items():
        np.testing.assert_array_equal(store.read(run_id)[name], want)
    rng = np.random.default_rng(5)
    chunks.append(_chunk(rng, 10, 3))
    store.append(run_id, 10, chunks[-1])  # a new chunk is checked ...
    data = tmp_path / "runs" / f"{run_id}.bin"
    _damage(data, at=0, count=8, seed=0)  # ... the old ones are not (no checksum to compare)
    np.testing.assert_array_equal(store.read(run_id, since=4)["step"], np.arange(4, 13))
    size = data.stat().st_size
    _damage(data, at=size - 8, count=8, seed=0)
    with pytest.raises(CorruptRecords, match=r"records 10-12 \(position: checksum mismatch\)"):
        store.read(run_id)
    with sqlite3.connect(index) as conn:
        rows = conn.execute("SELECT start, crc IS NULL FROM chunks ORDER BY start").fetchall()
    conn.close()
    assert sorted(set(rows)) == [(0, 1), (4, 1), (10, 0)]


def test_a_file_cut_short_is_damage_named_by_run_not_by_out(tmp_path):
    store = Store(tmp_path)
    run_id, _ = _write_run(store, [5, 5])
    data = tmp_path / "runs" / f"{run_id}.bin"
    with open(data, "r+b") as f:
        f.truncate(data.stat().st_size - 1)
    out = tmp_path / "run.npz"
    exported = jobs(tmp_path, "export", run_id, "--out", str(out))
    assert exported.returncode == 1
    err = exported.stderr
    assert f"run {run_id}: records 5-9 left out of the export (position: cut short)" in err
    assert "--out" not in err
    with np.load(out) as npz:
        np.testing.assert_array_equal(npz["step"], np.arange(5))
    data.unlink()  # no records file at all: the run is named, not --out
    exported = jobs(tmp_path, "export", run_id, "--out", str(out))
    assert exported.returncode == 2
    line = _one_line_error(exported.stderr)
    assert f"run {run_id}: cannot read its records file {data}" in line and "--out" not in line


# -- 5. a corrupted index never crashes the process --------------------------------------------


def test_an_object_dtype_in_the_index_is_a_clear_error_not_a_segfault(tmp_path):
    store = Store(tmp_path)
    run_id, _ = _write_run(store, [4, 4])
    good, _ = _write_run(store, [3])
    store.put_array(run_id, "projection", np.eye(3))
    store.close()
    _settle(tmp_path)
    with sqlite3.connect(tmp_path / "runs" / f"{run_id}.sqlite") as conn:
        conn.execute("UPDATE chunks SET dtype = '|O' WHERE name = 'loss'")
        conn.execute("UPDATE arrays SET dtype = '|O' WHERE name = 'projection'")
    conn.close()
    # a fresh process (``process``): a segfault here must fail this test, not end pytest
    out = process(tmp_path, "export", run_id, "--out", str(tmp_path / "x.npz"))
    assert out.returncode == 2, out  # not -11 (SIGSEGV)
    line = _one_line_error(out.stderr)
    assert f"run {run_id}" in line and "'|O'" in line and "loss" in line
    out = process(tmp_path, "check")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert f"run {run_id}" in out.stdout and "'|O'" in out.stdout and good not in out.stdout
    store = Store(tmp_path)
    with pytest.raises(DamagedStore, match=rf"run {run_id}: loss has dtype '\|O'"):
        store.read(run_id)
    with pytest.raises(DamagedStore, match=rf"run {run_id}: projection has dtype '\|O'"):
        store.get_array(run_id, "projection")
    np.testing.assert_array_equal(store.read(good)["step"], np.arange(3))


def test_an_index_row_that_disagrees_with_its_bytes_is_an_error_naming_the_run(tmp_path):
    store = Store(tmp_path)
    run_id, _ = _write_run(store, [4, 4])
    store.close()
    _settle(tmp_path)
    with sqlite3.connect(tmp_path / "runs" / f"{run_id}.sqlite") as conn:
        conn.execute("UPDATE chunks SET nbytes = 1 << 40 WHERE name = 'position' AND start = 4")
    conn.close()
    with pytest.raises(DamagedStore, match=rf"run {run_id}: .*records 4-7 \(position\)"):
        Store(tmp_path).read(run_id)


def test_blobs_of_other_dtypes_are_refused_on_write(tmp_path):
    store = Store(tmp_path)
    run_id = store.create({})
    for array in (np.array(["a"]), np.zeros(2, complex), np.array([1], object)):
        with pytest.raises(ValueError, match="cannot store arrays of dtype"):
            store.put_array(run_id, "x", array)
        with pytest.raises(ValueError, match="cannot store arrays of dtype"):
            store.append(run_id, 0, {"x": array})
    assert store.records(run_id) == 0 and store.get_array(run_id, "x") is None


# -- 6. damaged metadata gives errors, not tracebacks ------------------------------------------


def test_a_bad_spec_in_one_row_leaves_list_serving_the_others(tmp_path):
    store = Store(tmp_path)
    ids = [_write_run(store, [3], seed=i)[0] for i in range(3)]
    store.close()
    with sqlite3.connect(tmp_path / "basin.sqlite") as conn:
        conn.execute("UPDATE runs SET spec = '{\"target\": ' WHERE id = ?", (ids[1],))
    conn.close()
    listed = jobs(tmp_path, "list")
    assert listed.returncode == 0
    lines = listed.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines] == ids[::-1]
    for line, run_id in zip(lines, ids[::-1], strict=True):
        if run_id == ids[1]:
            assert "damaged" in line and "spec" in line
        else:
            assert "completed" in line and "banana" in line and "mala" in line
    shown = jobs(tmp_path, "show", ids[1])
    assert shown.returncode == 2
    line = _one_line_error(shown.stderr)
    assert f"run {ids[1]}" in line and "spec" in line
    shown = jobs(tmp_path, "show", ids[0], "--json")
    assert shown.returncode == 0
    assert json.loads(shown.stdout)["run_id"] == ids[0]
    checked = jobs(tmp_path, "check")
    assert checked.returncode == 1
    report = checked.stdout.strip().splitlines()
    assert len(report) == 1 and f"run {ids[1]}" in report[0] and "spec" in report[0]
    store = Store(tmp_path)
    assert [r.id for r in store.list()] == [ids[2], ids[0]]
    with pytest.raises(DamagedStore, match=f"run {ids[1]}: its spec"):
        store.get(ids[1])


def test_a_queued_run_with_a_damaged_row_fails_and_the_queue_goes_on(tmp_path):
    store = Store(tmp_path)
    damaged, good = store.create(SPEC), store.create(SPEC)
    with sqlite3.connect(tmp_path / "basin.sqlite") as conn:
        conn.execute("UPDATE runs SET progress = '[1, 2]' WHERE id = ?", (damaged,))
    conn.close()
    assert store.claim(worker_pid=123).id == good  # the oldest was damaged: not claimed
    with sqlite3.connect(tmp_path / "basin.sqlite") as conn:
        status, error = conn.execute(
            "SELECT status, error FROM runs WHERE id = ?", (damaged,)
        ).fetchone()
    conn.close()
    assert status == "failed" and f"run {damaged}: its progress is not a JSON object" in error
    assert store.claim(worker_pid=123) is None


def _garbage_page(path: Path, page: int) -> None:
    size = sqlite3.connect(path).execute("PRAGMA page_size").fetchone()[0]
    with open(path, "r+b") as f:
        f.seek((page - 1) * size)
        f.write(np.random.default_rng(page).integers(0, 256, size, dtype=np.uint8).tobytes())


def test_a_garbage_page_in_basin_sqlite_is_named_in_one_line(tmp_path):
    # in process (``jobs``): seven commands in subprocesses took 13-20 s of torch imports
    store = Store(tmp_path)
    run_id, _ = _write_run(store, [3])
    for i in range(60):  # enough rows for the runs table to span pages
        store.create({**SPEC, "pad": "x" * 300, "i": i})
    store.close()
    _settle(tmp_path)
    meta = tmp_path / "basin.sqlite"
    with sqlite3.connect(meta) as conn:
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'runs'").fetchone()
    conn.close()
    _garbage_page(meta, root[0])
    for argv in (["list"], ["show", run_id], ["export", run_id, "--out", str(tmp_path / "x")]):
        done = jobs(tmp_path, *argv)
        assert done.returncode == 2, argv
        line = _one_line_error(done.stderr)
        assert str(meta) in line and "damaged" in line
    out = jobs(tmp_path, "check")
    assert out.returncode == 1
    assert "Traceback" not in out.stderr and str(meta) in out.stdout and "damaged" in out.stdout
    _garbage_page(meta, 1)  # the header too: no command can open the store
    for argv in (["list"], ["check"], ["submit", "--target", "banana", "--sampler", "mala"]):
        done = jobs(tmp_path, *argv)
        assert done.returncode == 2, argv
        line = _one_line_error(done.stderr)
        assert str(meta) in line and "damaged" in line


@pytest.mark.parametrize("damage", ["empty", "garbage"])
def test_a_damaged_run_index_is_named_and_other_runs_still_serve(tmp_path, damage):
    store = Store(tmp_path)
    run_id, _ = _write_run(store, [3, 3])
    good, chunks = _write_run(store, [2, 2], seed=1)
    store.close()
    _settle(tmp_path)
    index = tmp_path / "runs" / f"{run_id}.sqlite"
    garbage = b"" if damage == "empty" else b"Basin? no: garbage " * 300
    index.write_bytes(garbage)
    for suffix in ("-wal", "-shm"):
        index.with_name(index.name + suffix).unlink(missing_ok=True)
    out = tmp_path / "x.npz"
    exported = jobs(tmp_path, "export", run_id, "--out", str(out))
    assert exported.returncode == 2
    line = _one_line_error(exported.stderr)
    assert f"run {run_id}: its index {index}" in line and not out.exists()
    assert jobs(tmp_path, "show", run_id).returncode == 0  # its metadata is intact
    listed = jobs(tmp_path, "list")
    assert listed.returncode == 0
    assert {line.split()[0] for line in listed.stdout.splitlines()} == {run_id, good}
    assert jobs(tmp_path, "export", good, "--out", str(out)).returncode == 0
    with np.load(out) as npz:
        np.testing.assert_array_equal(npz["step"], _join(chunks)["step"])
    checked = jobs(tmp_path, "check")
    assert checked.returncode == 1
    report = checked.stdout.strip().splitlines()
    assert len(report) == 1 and f"run {run_id}: its index {index}" in report[0]
    if damage == "empty":  # opening it must not have written a schema into it
        assert index.read_bytes() == b""


def test_check_passes_a_healthy_store(tmp_path):
    store = Store(tmp_path)
    _write_run(store, [3, 4])
    run_id = store.create(SPEC)
    store.append(run_id, 0, {"llc": np.ones((2, CHAINS))}, series="flushes")
    store.put_array(run_id, "w0", np.arange(4.0))
    assert store.check() == []
    checked = jobs(tmp_path, "check")
    assert checked.returncode == 0
    assert "no damage" in checked.stdout


# -- 12. exports to what a rename cannot replace -----------------------------------------------


def test_export_to_dev_null_or_a_pipe_is_refused_clearly(tmp_path):
    store = Store(tmp_path)
    run_id, _ = _write_run(store, [3])
    targets = [os.devnull]
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "pipe")
        targets.append(str(tmp_path / "pipe"))
    for target in targets:
        # a fresh process (``process``) for its timeout: a FIFO with no reader blocks its writer
        out = process(tmp_path, "export", run_id, "--out", target, timeout=60)
        assert out.returncode == 2, out
        line = _one_line_error(out.stderr)
        assert f"--out: {target} is not a regular file" in line and "renamed" in line
        with pytest.raises(ValueError, match="not a regular file"):
            store.export_npz(run_id, target)
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]  # no temporary file


def test_a_cli_process_leaves_each_run_file_whole_with_no_write_ahead_log(tmp_path):
    """The process skips the collector's teardown (cli.main.run), so the CLI closes the store
    itself: SQLite folds each write-ahead log back into its file, and a run's index is one
    file a user can copy (the faults census damaged a leftover -wal instead of the index)."""
    out = process(
        tmp_path, "run", "--target", "banana", "--sampler", "mala", "--param",
        "step_size=0.1", "--chains", "4", "--steps", "400", "--flush-every", "100",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    left = sorted(p.name for p in tmp_path.rglob("*") if p.name.endswith(("-wal", "-shm")))
    assert left == [], left
    assert len(list((tmp_path / "runs").glob("*.sqlite"))) == 1
