"""Probe of issue 60, security 2, for ``python -m bench faults``: markup from data on a page.

A store and a BASIN_MODELS folder hold hostile text: a run's error with a bare URL, a tag, a
link, an e-mail address and a colour directive; a factory file named like an ``<img>`` tag whose
loss function is named like a link and an image; checkpoint files named like images. Every page
of the app is then walked with Streamlit's AppTest in a subprocess. Each Markdown string a page
shows that carries that text must show it as typed: nothing GitHub's Markdown would turn into a
link, an image or a tag, and no Streamlit directive. ``tests/test_app_markup.py`` uses the same
store and the same check.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from bench.faults import LIMIT_S, ROOT
from runs.spec import parse_spec
from runs.store import Store
from ui.text import WORD_JOINER  # what ui.text.plain puts inside the words autolinks look for

ERROR = (
    "see http://evil.example/x and <a href=http://e>x</a>; note [x](http://e), "
    "mail a@evil.example, :red[r] www.evil.example"
)
LOSS_NAME = "[x](http://e) ![i](http://127.0.0.1:9/loss.png)"  # the factory's loss function
FACTORY_FILE = "<img src=x onerror=alert(1)>.py"
NESTED_CHECKPOINT = "![md](http://127.0.0.1:9/x).pt"  # in folders "![md](http:/127.0.0.1:9"
FLAT_CHECKPOINT = "![md](www.evil.example).pt"
HOSTILE = ("evil", "onerror", "127.0.0.1")  # every hostile text above holds one of these

FACTORY = f"""
import torch
from torch import nn


def loss(outputs, targets):
    return nn.functional.cross_entropy(outputs, targets)


loss.__name__ = {LOSS_NAME!r}


def make():
    with torch.random.fork_rng():
        torch.manual_seed(0)
        x = torch.randn(40, 2)
        return nn.Linear(2, 2), (x, (x[:, 0] > 0).long()), loss
"""

LLC_RUN = {
    "target": {"name": "mlp", "params": {"n": 50}},
    "sampler": {"name": "sgld", "params": {"step_size": 1e-4}},
    "chains": 1,
    "steps": 10,
    "observables": ["llc"],
}
PLAYGROUND_RUN = {"target": {"name": "banana"}, "sampler": {"name": "mala"}, "steps": 100}


def build(home: Path, folder: Path) -> dict:
    """The hostile models ``folder`` and, in the store at ``home``, a failed LLC run of its
    factory (with a hostile checkpoint) whose error is ``ERROR``, a running one, and a failed
    Playground run with the same error. Returns their ids and the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    factory = folder / FACTORY_FILE
    factory.write_text(FACTORY)
    nested = folder / NESTED_CHECKPOINT  # a path: its "//" is one "/"
    nested.parent.mkdir(parents=True, exist_ok=True)
    for path in (nested, folder / FLAT_CHECKPOINT):
        path.write_bytes(b"not a checkpoint")
    store = Store(home)
    spec = parse_spec(LLC_RUN).model_dump(mode="json")
    params = {"factory": f"{factory}:make", "checkpoint": str(folder / FLAT_CHECKPOINT)}
    spec["target"] = {"name": "model", "params": params}  # as stored when the file was good
    failed = store.create(spec)
    store.finish(store.claim(os.getpid(), failed).id, "failed", error=ERROR)
    running = store.create(spec)
    store.claim(os.getpid(), running)
    played = store.create(parse_spec(PLAYGROUND_RUN).model_dump(mode="json"))
    store.finish(store.claim(os.getpid(), played).id, "failed", error=ERROR)
    return {"failed": failed, "running": running, "played": played, "folder": folder}


# What GitHub's Markdown (and Streamlit's directives) would act on, once escaped characters
# are taken out: a link or image "](", an HTML tag or autolink "<", a bare URL or e-mail address,
# a directive or emoji ":name".
LIVE = {
    "link or image": re.compile(r"\]\("),
    "tag or autolink": re.compile(r"<[A-Za-z/!?]"),
    "bare URL": re.compile(r"(?i)https?://|www\."),
    "e-mail address": re.compile(r"[\w.+-]@[\w-]"),
    "directive": re.compile(r":[A-Za-z]"),
}


def live(markdown: str) -> list[str]:
    """The kinds of markup ``markdown`` would still render (empty: it shows as typed)."""
    bare = re.sub(r"\\.", "", markdown, flags=re.DOTALL)  # a backslash shows its character
    return [kind for kind, pattern in LIVE.items() if pattern.search(bare)]


def as_shown(markdown: str) -> str:
    """The text a reader sees: escapes resolved, word joiners (invisible) dropped."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown).replace(WORD_JOINER, "")


def markdown_texts(at) -> list[str]:
    """Every string on an AppTest's page that Streamlit renders as Markdown: text elements,
    alerts, headings, widget labels and help, radio options, tabs, expanders, metrics and
    progress texts. (Selectbox and multiselect options and dataframes show text as it is.)"""
    out = []
    for kind in ("markdown", "caption", "error", "warning", "info", "success", "toast"):
        out += [e.value for e in getattr(at, kind)]
    for kind in ("title", "header", "subheader", "exception"):
        out += [e.value for e in getattr(at, kind)]
    widgets = ("button", "checkbox", "toggle", "selectbox", "multiselect", "radio", "text_input")
    widgets += ("number_input", "text_area", "slider", "select_slider", "download_button")
    for kind in widgets:
        out += [text for w in getattr(at, kind) for text in (w.label, w.help) if text]
    out += [o for r in at.radio for o in r.options]
    out += [t for m in at.metric for t in (m.label, str(m.value))]
    out += [e.label for e in at.expander] + [t.label for t in at.tabs]
    out += [p.proto.text for p in at.get("progress")]
    return [str(text) for text in out]


def carries(text: str) -> bool:
    return any(h in text for h in HOSTILE)


def hostile_markup(at) -> list[tuple[str, list[str]]]:
    """(text, what it would render) for every Markdown string on the page that carries
    hostile text and would render something of it."""
    return [(t, live(t)) for t in markdown_texts(at) if carries(t) and live(t)]


def walk_page(name: str, ids: dict):
    """An AppTest of ``pages/<name>.py`` showing what it has of the hostile runs and files."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "pages" / f"{name}.py"), default_timeout=LIMIT_S).run()
    if name == "networks":
        at.selectbox(key="net.target_name").set_value("model").run()
    if name == "runs":
        at.multiselect(key="runs.open").set_value([ids["failed"], ids["played"]]).run()
    return at


def walk(home: Path) -> int:
    """Every page of the shell on the hostile store and folder (BASIN_HOME and BASIN_MODELS
    under ``home``, no worker pool), one line each; 0 when no page renders hostile markup and
    the pages that show those runs and files show them."""
    from ui.shell import PAGES

    os.environ.update(
        BASIN_HOME=str(home / "store"), BASIN_MODELS=str(home / "models"), BASIN_NO_WORKERS="1"
    )
    ids = build(home / "store", home / "models")
    bad, carrying = 0, set()
    for path, _, _ in PAGES:
        name = Path(path).stem
        at = walk_page(name, ids)
        found = hostile_markup(at) + [(e.value, ["exception"]) for e in at.exception]
        carrying |= {name} if any(carries(t) for t in markdown_texts(at)) else set()
        bad += bool(found)
        for text, kinds in found:
            print(f"{name}: {', '.join(kinds)}: {text[:200]!r}")
    missing = {"playground", "networks", "runs"} - carrying
    if missing:
        print(f"hostile text not shown on {', '.join(sorted(missing))}: the walk saw nothing there")
    if bad or missing:
        return 1
    print(f"{len(PAGES)} pages walked, no live markup from the data")
    return 0


def markup_walk(home: Path) -> subprocess.CompletedProcess:
    """``walk`` in a fresh interpreter (AppTest runs pages as ``__main__``)."""
    command = [sys.executable, "-c", f"import sys; from {__name__} import walk; "]
    command[-1] += f"sys.exit(walk(__import__('pathlib').Path({str(home)!r})))"
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=4 * LIMIT_S)
    noise = ("missing ScriptRunContext", "No runtime found")  # Streamlit's, outside a server
    kept = [line for line in out.stderr.splitlines() if not any(n in line for n in noise)]
    return subprocess.CompletedProcess(command, out.returncode, out.stdout, "\n".join(kept))


def probes(home: Path) -> list[tuple[str, Callable[[], subprocess.CompletedProcess], Callable]]:
    """(name, setup running its own processes, check of the outcome)."""
    return [
        (
            "markup from data (run error, factory and checkpoint names) on every page",
            lambda: markup_walk(home),
            lambda out: out.returncode == 0 and "no live markup from the data" in out.stdout,
        )
    ]
