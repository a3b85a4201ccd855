"""The app's server (issue 60): a websocket from a foreign Host is refused (DNS rebinding), a
server bound beyond 127.0.0.1 says what it shares, and every Run click that queued runs says so.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from apptest import ROOT, errors, no_pool, page  # noqa: F401 (no_pool: a fixture)
from streamlit import config
from streamlit.testing.v1 import AppTest

from bench.faults_server import FOREIGN, foreign_host
from runs.spec import parse_spec
from runs.store import Store


def test_a_websocket_naming_a_foreign_host_gets_no_upgrade(tmp_path):
    """DNS rebinding: a page on evil.example whose name resolves to 127.0.0.1 reaches the
    server with ``Host: evil.example:PORT``; the server must not switch protocols for it."""
    said = dict(line.split(": ", 1) for line in foreign_host(tmp_path).stdout.splitlines())
    assert " 101 " not in said[FOREIGN], said
    assert said["127.0.0.1"].startswith("HTTP/1.1 101"), said


def test_streamlit_reads_the_loopback_host_list_from_the_config():
    # a subprocess from the repository's root: Streamlit reads ./.streamlit/config.toml there
    read = "from streamlit import config; print(config.get_option('server.allowedHosts'))"
    shown = subprocess.run(
        [sys.executable, "-c", read], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == "['localhost', '127.0.0.1', '::1']"


@pytest.fixture
def bound(request):
    """The server's address as ``--server.address`` would set it, for one test."""
    before = config.get_option("server.address")
    config.set_option("server.address", request.param)
    yield request.param
    config.set_option("server.address", before)


SIDEBAR = """
from ui import shell
shell.shared_notice()
"""


@pytest.mark.parametrize("bound", ["0.0.0.0", "127.0.0.1"], indirect=True)
def test_a_server_bound_beyond_loopback_says_every_session_shares_every_run(bound, home):
    at = AppTest.from_string(SIDEBAR, default_timeout=60).run()
    shown = [w.value for w in at.sidebar.warning]
    if bound == "127.0.0.1":
        assert shown == []
        return
    (text,) = shown
    text = re.sub(r"\\(.)", r"\1", text).replace("\u2060", "")  # as shown, Markdown escapes read
    assert "listening on 0.0.0.0" in text
    assert "sees, cancels and deletes every run" in text
    assert "localhost, 127.0.0.1, ::1" in text  # the Host names a browser may use


@pytest.mark.usefixtures("no_pool")
def test_each_run_click_that_queued_a_run_is_confirmed_with_a_count(home):
    """A click sent while the browser was disconnected never reaches the server: the page
    cannot report it, so every click that did queue a run says so (a toast with the run id,
    the time and this tab's count, and the sidebar's line), and a lost one is seen missing."""
    at = page("playground")
    for count in (1, 2):
        at.button(key="pg.run").click().run()
        assert not errors(at), errors(at)
        ids = [r.id for r in Store(home).list()]
        assert len(ids) == count
        toasts = [t.value for t in at.toast]
        assert any(
            re.fullmatch(rf"Queued run {ids[0]} at \d\d:\d\d:\d\d \({count} from this tab\)", t)
            for t in toasts
        ), toasts
    at = AppTest.from_string("import ui\nui.sidebar()\n", default_timeout=60)
    at.session_state["pool.queued"] = {"count": 2, "last": ids[0], "at": "12:00:00"}
    at.run()
    badge = " ".join(c.value for c in at.sidebar.caption)
    assert f"**Queued from this tab** 2 runs, the last {ids[0]} at 12:00:00" in badge


@pytest.mark.usefixtures("no_pool")
def test_queued_runs_with_no_worker_say_so_in_the_sidebar_and_the_runs_page(home):
    store = Store(home)
    spec = parse_spec({"target": {"name": "banana"}, "sampler": {"name": "mala"}})
    store.create(spec.model_dump(mode="json"))
    notice = "1 run queued: no worker running; start the app or `python -m jobs worker`"
    at = page("runs")
    assert not errors(at), errors(at)
    assert notice in [w.value for w in at.warning]
    at = AppTest.from_string("import ui\nui.sidebar()\n", default_timeout=60).run()
    assert notice in [w.value for w in at.sidebar.warning]
