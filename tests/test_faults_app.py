"""Faults the app must survive (issue 38): a pid file naming a stranger, user text carrying
Markdown, tracebacks in the browser."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from apptest import ROOT, errors, no_pool, page, wait_for_runs  # noqa: F401 (no_pool: a fixture)

from runs import liveness, pool
from runs.spec import parse_spec
from runs.store import Store

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]  # a live pid that is no supervisor
QUICK = {
    "target": {"name": "gaussian"},
    "sampler": {"name": "sgld"},
    "chains": 8,
    "steps": 200,
    "device": "cpu",
    "compile": "never",
    "seed": 1,
}


# -- 8. the supervisor is identified by its pid and its start time ------------------------------


@pytest.fixture
def stranger():
    """A live process that is no supervisor (its pid is what a stale pid file would name)."""
    process = subprocess.Popen(SLEEPER)
    # start times are clock ticks (Linux: 10 ms): a supervisor started within the same tick
    # would share the stranger's, and the test's pid-plus-start-time stranger would pass for it
    time.sleep(3 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100))
    yield process
    process.kill()
    process.wait(10)


def test_a_pid_file_naming_a_stranger_starts_the_pool_and_spares_the_stranger(home, stranger):
    # a real pool of its own: the test is that one starts (and stops) despite a stale pid file
    store = Store(home)
    run_id = store.create(parse_spec(QUICK).model_dump(mode="json"))
    pidfile = home / "supervisor.pid"
    pidfile.write_text(f"{stranger.pid}\n")  # left by a supervisor whose pid was reused
    assert pool.supervisor_pid(store) is None
    assert pool.stop_supervisor(store, timeout=1) is False
    assert stranger.poll() is None

    pid = pool.ensure_supervisor(store, slots=1)
    assert pid != stranger.pid
    assert pool.supervisor_pid(store) == pid
    (record,) = wait_for_runs(home)  # the queued run ran: the pool is real
    assert record.id == run_id and record.status == "completed", record.error
    assert record.worker_pid not in (None, stranger.pid)
    own = pidfile.read_text().split(maxsplit=1)[1]  # the real supervisor's start time
    assert pool.stop_supervisor(store) is True
    assert pool.supervisor_pid(store) is None
    assert stranger.poll() is None

    # the stranger's pid with the start time of the supervisor it replaced: still a stranger
    pidfile.write_text(f"{stranger.pid} {own}")
    assert pool.supervisor_pid(store) is None
    assert pool.stop_supervisor(store, timeout=1) is False
    assert stranger.poll() is None


def _legacy(pid: int, form: str) -> str:
    """The start time of ``pid`` as an older Basin wrote it in a pid file: Linux's clock ticks
    after boot (/proc/PID/stat), or ``ps -o lstart=`` in UTC ('Mon Jan  1 00:00:00 2024')."""
    ticks = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    if form == "proc":
        return ticks
    boot = next(
        int(line.split()[1])
        for line in Path("/proc/stat").read_text().splitlines()
        if line.startswith("btime ")
    )
    seconds = boot + int(ticks) / os.sysconf("SC_CLK_TCK")
    return time.strftime("%a %b %e %H:%M:%S %Y", time.gmtime(seconds))


@pytest.mark.parametrize("form", ["psutil", "proc", "ps"])
def test_a_process_start_time_is_read_from_the_operating_system(form):
    if form != "psutil" and not Path("/proc/self/stat").exists():
        pytest.skip("an older Basin's start times are written from /proc (Linux)")
    before = time.time()
    process = subprocess.Popen(SLEEPER)
    try:
        started = liveness.started(process.pid)
        assert started is not None
        assert liveness.started(process.pid) == started  # stable while it lives
        assert abs(float(started) - before) < 2.5  # seconds since the epoch
        recorded = started if form == "psutil" else _legacy(process.pid, form)
        assert liveness.same_start(process.pid, recorded) is True  # an older pid file is read
        assert liveness.same_start(os.getpid(), recorded) is False  # and names no other process
    finally:
        process.kill()
        process.wait(10)
    assert liveness.started(process.pid) is None  # gone (reaped): nothing to name


# -- 9. user text is shown as typed, never as Markdown -----------------------------------------

INJECTED = "step_size=![x](http://127.0.0.1:9/x.png) <img src=x> **bold** `c` $x$ & :red[r]"
# every character Markdown (or Streamlit's LaTeX and colour directives) would act on, escaped,
# and an invisible word joiner where an autolink or a directive would start (ui.text.plain)
WJ = "\u2060"
ESCAPED = (
    rf"step\_size=!\[x\](http:{WJ}//127.0.0.1:{WJ}9/x.png) \<img src=x> \*\*bold\*\* \`c\` "
    rf"\$x\$ \& :{WJ}red\[r\]"
)


def unescaped(markdown: str) -> str:
    """What CommonMark shows for text without markup: a backslash before ASCII punctuation
    shows that character alone (and a word joiner shows nothing)."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown).replace(WJ, "")


def test_plain_escapes_what_markdown_would_act_on():
    import ui

    assert ui.plain(INJECTED) == ESCAPED
    assert unescaped(ESCAPED) == INJECTED
    # at a line's start: headings, quotes, lists and rules would restructure the text
    lines = "a\n# h\n> q\n- l\n+ l\n12. o\n3) o\n  ===\nplain 4. text"
    assert (
        ui.plain(lines) == "a\n\\# h\n\\> q\n\\- l\n\\+ l\n12\\. o\n3\\) o\n  \\===\nplain 4. text"
    )
    assert unescaped(ui.plain(lines)) == lines


@pytest.mark.usefixtures("no_pool")
def test_a_run_error_echoing_user_text_is_shown_literally(home):
    store = Store(home)
    run_id = store.create(parse_spec(QUICK).model_dump(mode="json"))
    store.finish(store.claim(os.getpid(), run_id).id, "failed", error=f"bad {INJECTED}")
    at = page("runs").multiselect(key="runs.open").set_value([run_id]).run()
    assert not at.exception, errors(at)
    shown = [e.value for e in at.error if e.value.startswith("failed")]
    assert shown == [f"failed: bad {ESCAPED}"]
    assert unescaped(shown[0]) == f"failed: bad {INJECTED}"  # every character, as typed
    assert not re.search(r"(?<!\\)[\[\]<*]", shown[0])  # no image, tag or bold left to act on


# -- 15. tracebacks go to the server log, not the browser -----------------------------------------


def test_error_details_are_off_in_the_config_and_streamlit_reads_them_so():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["client"]["showErrorDetails"] == "none"
    # a subprocess: Streamlit's own command reads the config as a server process would
    shown = subprocess.run(
        [sys.executable, "-m", "streamlit", "config", "show"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    section = shown.stdout.split("[client]", 1)[1].split("\n[", 1)[0]
    assert re.findall(r"(?m)^showErrorDetails = .*$", section) == ['showErrorDetails = "none"']


@pytest.mark.usefixtures("no_pool")
def test_typing_huge_widths_on_the_networks_page_builds_nothing(home, monkeypatch):
    """11 x 5000 widths once grew the server by 2 GB as the page built the DLN to read its
    facts; the page now reads them from parameter arithmetic and names the field at once."""
    import landscapes

    built = []
    make = landscapes.make
    monkeypatch.setattr(
        landscapes, "make", lambda name, **kw: built.append(name) or make(name, **kw)
    )
    at = page("networks")
    key = next(w.key for w in at.text_input if w.key.endswith(".widths"))
    at.text_input(key=key).set_value(",".join(["5000"] * 11)).run()
    assert not at.exception
    assert any("n" in e or "widths" in e for e in errors(at)), errors(at)
    assert "dln" not in built


@pytest.mark.usefixtures("no_pool")
def test_the_runs_page_names_a_damaged_run_and_lists_the_others(home):
    import sqlite3

    store = Store(home)
    spec = parse_spec({"target": {"name": "banana"}, "sampler": {"name": "mala"}})
    good = store.create(spec.model_dump(mode="json"))
    bad = store.create(spec.model_dump(mode="json"))
    with sqlite3.connect(home / "basin.sqlite") as conn:
        conn.execute("UPDATE runs SET spec = '{oops' WHERE id = ?", (bad,))
    at = page("runs")
    assert not at.exception
    assert any(bad in w.value and "damaged" in w.value for w in at.warning)
    assert list(at.dataframe[0].value["id"]) == [good]
