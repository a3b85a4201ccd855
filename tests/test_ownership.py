"""A run's ownership (issue 60, items A and 10): only an interrupted or cancelled run goes back
to the queue, a resume takes its run in one step, and a writer whose run was taken over stops
without writing a record, a status or a summary."""

from __future__ import annotations

import contextlib
import io
import multiprocessing as mp
import os
import threading
import time

import pytest

from runs.spec import parse_spec
from runs.store import Store, StoreError
from runs.worker import run_one

ROUNDS = 6  # resumes raced: the old code lost 6 of 12 such races


def _spec(steps: int, chains: int = 4) -> dict:
    spec = {
        "target": {"name": "banana"},
        "sampler": {"name": "mala", "params": {"step_size": 0.1}},
    }
    spec.update(chains=chains, steps=steps, seed=3, compile="never", flush_every=50)
    return parse_spec(spec).model_dump(mode="json")


def _wait_for(condition, timeout: float = 60.0) -> None:
    """Until ``condition()`` holds (another thread's run reaching a point), at most ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_resume_pressed_again_on_a_running_run_is_refused_and_the_run_keeps_its_summary(
    tmp_path,
):
    """The issue's 5 of 5: Resume pressed on a run a worker runs requeued it, a second worker
    replayed it, and its failure ("chunk starts at ...") left the completed run failed, its
    summary NULL."""
    steps = 4000
    first = Store(tmp_path)
    run_id = first.create(_spec(steps))
    worker = threading.Thread(target=run_one, args=(first, first.claim(101)))
    worker.start()
    page = Store(tmp_path)
    _wait_for(lambda: page.records(run_id) >= steps * 3 // 4)
    refused = []
    for _ in range(2):  # a double click, or a second tab
        try:
            page.requeue(run_id)
        except StoreError as exc:
            refused.append(str(exc))
    if not refused:  # the old code: queued again, and a second worker replays it
        second = Store(tmp_path)
        run_one(second, second.claim(202))
    worker.join(120)
    record = page.get(run_id)
    assert record.status == "completed" and record.summary is not None, record.error
    assert refused and all(f"run {run_id} is running" in line for line in refused)
    assert page.records(run_id) == steps


def test_a_writer_whose_run_was_taken_over_stops_and_leaves_it_to_the_new_one(tmp_path):
    """A worker marked stale (silent, not dead) while its run is resumed elsewhere: it stops at
    its next block, appends nothing more, and never sets the status or the summary; the new
    writer completes the run with every record."""
    steps = 3000
    old = Store(tmp_path)
    run_id = old.create(_spec(steps))
    writer = threading.Thread(target=run_one, args=(old, old.claim(101)))
    writer.start()
    other = Store(tmp_path)
    _wait_for(lambda: other.records(run_id) >= 500)
    assert other.mark_stale(timeout_s=0, alive=lambda pid: False) == [run_id]
    other.requeue(run_id)  # the user resumes it: back to the queue
    new = Store(tmp_path)
    assert new.claim(202).id == run_id
    writer.join(120)
    kept = other.records(run_id)
    record = other.get(run_id)
    assert (record.status, record.worker_pid, record.summary) == ("running", 202, None)
    assert kept < steps  # the old writer stopped at its next block
    run_one(new, new.get(run_id))
    record = other.get(run_id)
    assert record.status == "completed" and record.summary["steps"] == steps
    assert other.records(run_id) == steps


def test_requeue_takes_only_interrupted_or_cancelled_runs(tmp_path):
    store = Store(tmp_path)
    run_id = store.create({})
    assert store.requeue(run_id) is False  # queued already: nothing to do
    store.claim(7)
    with pytest.raises(StoreError, match=f"run {run_id} is running; only interrupted or "):
        store.requeue(run_id, ("interrupted", "cancelled"))
    store.finish(run_id, "completed", summary={"x": 1})
    with pytest.raises(StoreError, match="is completed; only interrupted or cancelled runs"):
        store.requeue(run_id, ("interrupted", "cancelled"))
    assert store.get(run_id).summary == {"x": 1}


def _resume_at(home: str, run_ids: list[str], barrier, out) -> None:
    """A ``python -m jobs resume`` process: each round waits for the other, then resumes."""
    os.environ["BASIN_HOME"] = home
    from cli.main import main

    for run_id in run_ids:
        barrier.wait(60)
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                code = main(["resume", run_id])
            except BaseException as exc:  # a traceback, as the interpreter would print it
                code, _ = 1, err.write(f"Traceback: {type(exc).__name__}: {exc}\n")
        out.put((run_id, code, err.getvalue()))


@pytest.mark.slow  # two fresh interpreters, and a run per round: about 15 s
def test_two_resumes_at_once_one_runs_the_other_exits_2(tmp_path):
    """Two processes resume each run at the same moment: one takes it and completes it with
    every record, the other says in one line that it is already being resumed."""
    store = Store(tmp_path)
    steps = 200
    run_ids = []
    for _ in range(ROUNDS):
        run_id = store.create(_spec(steps, chains=2))
        store.finish(run_id, "interrupted", error="its worker stopped")
        run_ids.append(run_id)
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [
        ctx.Process(target=_resume_at, args=(str(tmp_path), run_ids, barrier, out))
        for _ in range(2)
    ]
    for p in procs:
        p.start()
    results = {run_id: [] for run_id in run_ids}
    for _ in range(2 * ROUNDS):
        run_id, code, err = out.get(timeout=120)
        results[run_id].append((code, err))
    for p in procs:
        p.join(60)
    for run_id, pair in results.items():
        codes = sorted(code for code, _ in pair)
        lost = [err for code, err in pair if code != 0]
        assert codes == [0, 2], pair
        lines = lost[0].strip().splitlines()
        assert len(lines) == 1 and f"resume: run {run_id} is already being resumed" in lines[0]
        record = store.get(run_id)
        assert record.status == "completed" and record.summary is not None
        assert store.records(run_id) == steps


def test_the_runs_page_refuses_a_resume_of_a_run_resumed_meanwhile_and_says_why(home, monkeypatch):
    """A tab still showing a cancelled run's Resume after another tab (or `jobs resume`) took
    it: the click leaves the running run alone and says why beside the button."""
    from apptest import errors, page

    monkeypatch.setenv("BASIN_NO_WORKERS", "1")  # no worker: the run stays as the test puts it
    store = Store(home)
    run_id = store.create(_spec(200, chains=2))
    store.request_cancel(run_id)  # queued: cancelled at once
    at = page("runs")
    at.multiselect(key="runs.open").set_value([run_id]).run()
    assert store.hold(run_id, os.getpid(), ("interrupted", "cancelled"))  # the other tab's
    at.button(key=f"runs.resume.{run_id}").click().run()
    record = store.get(run_id)
    assert (record.status, record.worker_pid) == ("running", os.getpid())
    said = f"run {run_id} is running; only interrupted or cancelled runs can be resumed"
    assert [e for e in errors(at) if said in e], errors(at)
