"""The app's shell and its security promises: navigation, the sidebar badge, the worker pool,
no eval of typed formulas, no user text as HTML, a server bound to 127.0.0.1."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest
import streamlit as st
from apptest import ROOT, errors, no_pool  # noqa: F401 (no_pool: a fixture)
from streamlit.runtime.pages_manager import PagesManager
from streamlit.runtime.scriptrunner_utils.script_run_context import ScriptRunContext
from streamlit.testing.v1 import AppTest

import landscapes
from runs.pool import supervisor_pid
from runs.store import Store
from ui.shell import PAGES
from ui.widgets import plain

FRONT = [
    ROOT / "app.py",
    *sorted((ROOT / "pages").glob("*.py")),
    *sorted((ROOT / "ui").glob("*.py")),
]


@pytest.fixture(autouse=True)
def one_server_process(monkeypatch):
    """AppTest runs as one server process does. A folder named pages/ beside app.py is
    Streamlit's legacy multipage discovery (MPA v1), which ``st.navigation`` turns off for the
    process (the class attribute ``PagesManager.uses_pages_directory``, set False there).
    AppTest sets it back to "unknown" before every run, so every run after the first built
    the legacy pages and ran the requested page's file alone, without app.py (no sidebar, no
    ``ui.keep_values``). Here, once app.py has called st.navigation, it stays off."""
    navigated = []
    navigation, init = st.navigation, PagesManager.__init__

    def navigation_seen(*args, **kwargs):
        navigated.append(True)
        return navigation(*args, **kwargs)

    def init_in_one_process(self, *args, **kwargs):
        if navigated:  # AppTest has just set it to None: as the process had it, off
            PagesManager.uses_pages_directory = False
        init(self, *args, **kwargs)

    monkeypatch.setattr(st, "navigation", navigation_seen)
    monkeypatch.setattr(PagesManager, "__init__", init_in_one_process)
    yield
    PagesManager.uses_pages_directory = None  # as AppTest leaves it for the next test


def test_the_app_starts_its_worker_pool_and_shows_the_device(home):
    # a real pool of its own: the test is that the app starts one, and a second session finds it
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    assert not errors(at), errors(at)
    pid = supervisor_pid(Store(home))
    assert pid is not None  # started (or found) by the app, in its own process
    badge = " ".join(c.value for c in at.sidebar.caption)
    assert "Device" in badge and "CPU" in badge and f"pid {pid}" in badge
    # a second session finds the same pool instead of starting another
    AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    assert supervisor_pid(Store(home)) == pid


def test_a_store_home_that_cannot_be_used_is_named_not_raised(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("not a directory")
    monkeypatch.setenv("BASIN_HOME", str(tmp_path / "file" / "home"))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    assert not at.exception
    (error,) = at.error
    assert error.value.startswith(plain("BASIN_HOME: cannot keep runs in"))  # escaped
    assert "Not a directory" in error.value


@pytest.mark.usefixtures("no_pool")  # the pages, not their runs
def test_every_page_is_reachable_from_the_navigation(home):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    for page in sorted((ROOT / "pages").glob("*.py")):
        at.switch_page(f"pages/{page.name}").run()
        assert not errors(at), (page.name, errors(at))


# The titles app.py gives its pages, in its order: what the navigation must list, and all of it.
DECLARED = [
    "Playground",
    "Compare",
    "Funnel",
    "Integrators",
    "Networks & LLC",
    "Wide networks",
    "DLN benchmark",
    "Landscape",
    "Runs",
]


def declared_page_files() -> list[str]:
    """The files of the shell's pages (``ui.shell.PAGES``, which app.py navigates over)."""
    return [path for path, _, _ in PAGES]


def test_every_page_hands_a_legacy_run_to_the_shell_first():
    """Each page's first statement after its imports is ``ui.legacy_guard()``: a fresh server's
    first deep link runs the page file alone (the browser test opens one)."""
    for path in declared_page_files():
        body = ast.parse((ROOT / path).read_text()).body
        first = next(
            n
            for n in body
            if not isinstance(n, ast.Import | ast.ImportFrom | ast.Expr)
            or (isinstance(n, ast.Expr) and isinstance(n.value, ast.Call))
        )
        assert ast.unparse(first) == "ui.legacy_guard()", path


@pytest.mark.usefixtures("no_pool")
def test_the_navigation_lists_the_declared_pages_not_the_folders_files(home, monkeypatch):
    """A folder named pages/ beside the entry script is Streamlit's legacy multipage discovery
    (MPA v1: one entry per file, named after it: "app", "dln benchmark", "wide networks").
    st.navigation turns it off (``PagesManager.uses_pages_directory = False`` in
    streamlit/commands/navigation.py; the script runner builds the legacy pages only while that
    flag is set): the navigation the browser keeps, the last one sent, is app.py's, exactly."""
    sent = []
    enqueue = ScriptRunContext.enqueue

    def record(self, msg):
        if msg.HasField("navigation"):
            sent.append([page.page_name for page in msg.navigation.app_pages])
        return enqueue(self, msg)

    monkeypatch.setattr(ScriptRunContext, "enqueue", record)
    # A fresh process's first run builds the legacy list from the folder first (AppTest sets
    # the flag back to "unknown" before its first run too), then app.py's replaces it.
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    assert not errors(at), errors(at)
    assert sent and sent[-1] == DECLARED
    assert PagesManager.uses_pages_directory is False  # the folder is ignored from now on
    sent.clear()
    at.switch_page("pages/wide_networks.py").run()  # a later run: app.py's navigation only
    assert not errors(at), errors(at)
    assert sent == [DECLARED]
    legacy = {"app"} | {p.stem.replace("_", " ") for p in (ROOT / "pages").glob("*.py")}
    assert not legacy & set(sent[-1])  # "wide networks", "dln benchmark": no name of a file
    # every file of pages/ is declared once: none is reachable only through the discovery
    declared = declared_page_files()
    assert sorted(declared) == sorted(f"pages/{p.name}" for p in (ROOT / "pages").glob("*.py"))


@pytest.mark.usefixtures("no_pool")
def test_a_pages_setup_outlives_a_visit_to_another_page(home):
    # Streamlit drops the state of widgets a run does not draw: the Playground's potential,
    # sampler, its parameters and the run length came back at their defaults
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    at.selectbox(key="pg.target_name").select("banana").run()
    at.selectbox(key="pg.sampler_name").select("mala").run()
    at.text_input(key="pg.sampler.mala.step_size").input("0.3").run()
    at.text_input(key="pg.chains").input("16").run()
    for page in ("runs", "networks", "playground"):
        at.switch_page(f"pages/{page}.py").run()
        assert not errors(at), (page, errors(at))
    assert at.selectbox(key="pg.target_name").value == "banana"
    assert at.selectbox(key="pg.sampler_name").value == "mala"
    assert at.text_input(key="pg.sampler.mala.step_size").value == "0.3"
    assert at.text_input(key="pg.chains").value == "16"


def test_typed_formulas_never_reach_eval():
    source = (ROOT / "landscapes" / "formula.py").read_text()
    calls = {
        node.func.id
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    assert not calls & {"eval", "exec", "compile", "__import__"}
    for formula in [
        "__import__('os').system('true')",
        "x.__class__",
        "open('f')",
        "[x for x in y]",
    ]:
        with pytest.raises(landscapes.ParamError, match="formula"):
            landscapes.make("custom", formula=formula, device="cpu")


def test_user_text_is_never_rendered_as_html():
    for path in FRONT:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == "unsafe_allow_html":
                assert isinstance(node.value, ast.Constant) and node.value.value is False, path
        assert "st.html(" not in path.read_text() and "components.html(" not in path.read_text()


def test_the_server_binds_localhost_unless_told_otherwise():
    config = tomllib.loads(Path(ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["address"] == "127.0.0.1"
    assert config["browser"]["gatherUsageStats"] is False
