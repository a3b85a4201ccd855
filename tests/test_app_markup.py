"""Markup from data never reaches a page as markup (issue 60, security 2). A run's error, the
factory and checkpoint files under BASIN_MODELS and what a factory names (its loss) are shown
where Streamlit renders Markdown, GitHub's flavour: there a bare ``http://...`` or ``www.``
becomes a link even after a backslash, and ``![x](http://host/x)`` fetches an image from any
host. Every page is walked with hostile names and texts, and every Markdown string on it that
carries them is checked for anything Markdown would still act on (AppTest gives the Markdown
source, not the HTML: the check reads the source as GitHub's Markdown would). A Chromium check
reads the Runs page's HTML itself."""

from __future__ import annotations

import re

import pytest
from apptest import ROOT, errors, no_pool, page  # noqa: F401  (no_pool: a fixture)
from streamlit.testing.v1 import AppTest

from bench.faults_markup import (
    ERROR,
    FACTORY_FILE,
    FLAT_CHECKPOINT,
    HOSTILE,
    LOSS_NAME,
    NESTED_CHECKPOINT,
    as_shown,
    build,
    hostile_markup,
    live,
    markdown_texts,
    walk_page,
)
from ui.shell import PAGES
from ui.text import WORD_JOINER, plain


@pytest.fixture
def hostile(home, monkeypatch, tmp_path) -> dict:
    """BASIN_MODELS with a hostile factory file and checkpoints, and a store holding a failed
    run of that factory whose error echoes links, tags and a bare URL, a running one, and a
    failed Playground run with that error (bench.faults_markup.build)."""
    monkeypatch.setenv("BASIN_MODELS", str(tmp_path / "models"))
    return build(home, tmp_path / "models")


def test_plain_shows_text_as_typed_with_nothing_live():
    for text in (ERROR, LOSS_NAME, FACTORY_FILE, NESTED_CHECKPOINT, FLAT_CHECKPOINT):
        assert live(text), text  # the check sees the markup in the raw text ...
        assert live(plain(text)) == [], plain(text)  # ... and none in the escaped
        assert as_shown(plain(text)) == text  # every character, as typed
    # Streamlit's words: colours, icons and emoji ("spec:red" lost its ":red" unescaped)
    for text in ("spec:red", ":material/home:", ":smile:", "WWW.evil.example", "x@y.z"):
        assert live(plain(text)) == [] and as_shown(plain(text)) == text
    assert plain("12: 30 and a: b") == "12: 30 and a: b"  # a colon before a space is left alone


@pytest.mark.usefixtures("no_pool")
def test_the_runs_page_shows_a_hostile_error_and_file_names_as_text(hostile):
    at = page("runs")
    at.multiselect(key="runs.open").set_value([hostile["failed"], hostile["running"]]).run()
    assert not at.exception, errors(at)
    assert hostile_markup(at) == []
    (error,) = [e.value for e in at.error if e.value.startswith("failed:")]
    assert as_shown(error) == f"failed: {ERROR}"
    headings = [as_shown(h.value) for h in at.subheader]
    headings = [h for h in headings if h.startswith(hostile["failed"])]
    label = f"model · {FACTORY_FILE[:-3]}:make @ {FLAT_CHECKPOINT} / sgld"
    assert headings == [f"{hostile['failed']}: {label}"]


@pytest.mark.usefixtures("no_pool")
def test_the_networks_page_shows_hostile_factories_and_checkpoints_as_text(hostile):
    at = page("networks")
    at.selectbox(key="net.target_name").set_value("model").run()
    assert not at.exception, errors(at)
    factory = f"{hostile['folder'] / FACTORY_FILE}:make"
    assert at.selectbox(key="net.model.factory").value == factory
    captions = [as_shown(c.value) for c in at.caption]
    assert any(f"your loss, {LOSS_NAME}(outputs, targets)" in c for c in captions), captions
    assert hostile_markup(at) == []
    # a hostile checkpoint chosen: the refusal names its file, as text
    flat = str(hostile["folder"] / FLAT_CHECKPOINT)
    at.selectbox(key=f"net.model.checkpoint.{factory}").set_value(flat).run()
    assert any(f"{FLAT_CHECKPOINT} is not" in as_shown(e.value) for e in at.error), errors(at)
    assert hostile_markup(at) == []


@pytest.mark.usefixtures("no_pool")
def test_the_sidebar_shows_a_hostile_run_label_as_text(hostile):
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    assert not at.exception, errors(at)
    badge = [as_shown(c.value) for c in at.sidebar.caption]
    assert [b for b in badge if b.startswith(hostile["running"])] == [
        f"{hostile['running']} · model · {FACTORY_FILE[:-3]}:make @ {FLAT_CHECKPOINT} / sgld · 0%"
    ]
    assert hostile_markup(at) == []


@pytest.mark.slow
@pytest.mark.usefixtures("no_pool")
def test_no_page_renders_hostile_markup(hostile):
    """Every page of the shell, with the hostile store and models folder; the pages that show
    those runs and files must show them (as text)."""
    carrying = set()
    for path, _, _ in PAGES:
        name = path.removeprefix("pages/").removesuffix(".py")
        at = walk_page(name, hostile)
        assert not at.exception, (path, errors(at))
        assert hostile_markup(at) == [], path
        if any(h in t for t in markdown_texts(at) for h in HOSTILE):
            carrying.add(name)
    assert carrying >= {"playground", "networks", "runs"}, carrying


FOREIGN = """() => [...document.querySelectorAll("a[href], img[src]")]
    .map(e => e.getAttribute("href") ?? e.getAttribute("src"))"""


def foreign_links(page, url: str) -> list[str]:
    """The links and images on the page that lead anywhere but the app itself."""
    own = ("#", "/", url, "data:", "blob:")
    return [u for u in page.evaluate(FOREIGN) if not u.startswith(own)]


@pytest.mark.browser
def test_in_chromium_the_runs_and_networks_pages_link_nothing_from_the_data(
    hostile, home, tmp_path, monkeypatch
):
    """The HTML Streamlit renders: a run's hostile error on the Runs page and the hostile
    factory's loss on the Networks page show as text, with no link or image to any host."""
    from browser import need_browser

    from bench.server import chromium, serve

    need_browser()
    monkeypatch.setenv("BASIN_NO_WORKERS", "1")  # the pages, not their runs
    load = 90_000  # the first page load imports torch in the server
    with serve(home, tmp_path / "streamlit.log") as url, chromium() as page:

        def settle():
            page.wait_for_timeout(300)
            page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=load)

        page.goto(f"{url}/runs", timeout=load)
        page.get_by_text("Every run in the store").wait_for(timeout=load)
        settle()
        page.locator('[data-testid="stMultiSelect"]').filter(has_text="Open runs").click()
        page.get_by_role("option", name=re.compile(hostile["failed"])).click()
        page.keyboard.press("Escape")
        error = page.locator('[data-testid="stAlertContentError"]').filter(has_text="evil")
        error.first.wait_for(timeout=load)
        settle()
        text = error.first.locator('[data-testid="stMarkdownContainer"]').inner_text()
        assert text.replace(WORD_JOINER, "") == f"failed: {ERROR}"  # every character, as typed
        assert foreign_links(page, url) == []
        page.locator('[data-testid="stSidebarNav"]').get_by_text("Networks & LLC").click()
        page.get_by_text("Network", exact=True).first.wait_for(timeout=load)
        settle()
        page.locator('[data-testid="stSelectbox"]').filter(has_text="Network").first.click()
        page.get_by_role("option", name="model", exact=True).click()
        caption = page.get_by_text("your loss", exact=False).first
        caption.wait_for(timeout=load)
        settle()
        assert LOSS_NAME in caption.inner_text().replace(WORD_JOINER, "")
        assert foreign_links(page, url) == []
