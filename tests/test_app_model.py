"""The model target on Networks & LLC: factories listed from BASIN_MODELS by parsing (never
imported to list them), uploaded checkpoints that are weights only and fit the module (a pickle
that would run code is refused and runs nothing), and the LLC over training: one run per chosen
checkpoint, whose figure shows the sweep's own numbers."""

from __future__ import annotations

import io
import pathlib
import shutil

import numpy as np
import pytest
import torch
from apptest import array, errors, figures, no_pool, page, run_queued  # noqa: F401 (a fixture)

from examples import digits_mlp
from landscapes import ParamError
from runs.store import Store
from runs.worker import torch_threads
from studies import checkpoints, registry
from ui import models

ROOT = pathlib.Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("no_pool")  # runs executed here (`home`: a conftest fixture)

OTHER = """
import pathlib
pathlib.Path(__file__).with_name("imported").touch()  # listing must not import this file

def make_tiny():
    return None

def make_sized(width):  # an argument without a default: not a factory
    return None

def make_default(width=3, *, depth=1):
    return None

def helper():
    return None

async def make_async():
    return None

class Holder:
    def make(self):
        return None
"""


@pytest.fixture
def models_dir(tmp_path, monkeypatch):
    """BASIN_MODELS: the digits factory (digits.py:make), a file whose import would leave a
    mark, one without a factory, one that does not parse."""
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copy(ROOT / "examples" / "digits_mlp.py", folder / "digits.py")
    (folder / "other.py").write_text(OTHER)
    (folder / "plain.py").write_text("def build():\n    return None\n")
    (folder / "broken.py").write_text("def make(:\n")
    (folder / "notes.txt").write_text("def make(): pass\n")
    monkeypatch.setenv("BASIN_MODELS", str(folder))
    return folder


def saved(state: dict) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def trained_state(steps: int, seed: int = 0) -> dict:
    """The digits MLP after ``steps`` full-batch SGD steps from its initialisation."""
    module = digits_mlp.model(seed)
    x, y = digits_mlp.data()
    optimiser = torch.optim.SGD(module.parameters(), lr=0.5)
    with torch_threads(1):
        for _ in range(steps):
            optimiser.zero_grad()
            torch.nn.functional.cross_entropy(module(x), y).backward()
            optimiser.step()
    return module.state_dict()


class Touch:
    """Unpickling this calls ``Path.touch(marker)``: code a checkpoint must never run."""

    def __init__(self, marker: pathlib.Path):
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (self.marker,))


def files_under(folder: pathlib.Path) -> list[pathlib.Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def model_page():
    at = page("networks")
    at.selectbox(key="net.target_name").set_value("model").run()
    return at


def upload(at, name: str, data: bytes):
    at.file_uploader(key="net.model.upload").set_value((name, data, "application/octet-stream"))
    return at.run()


# -- headless ------------------------------------------------------------------------------


def test_factories_are_listed_by_parsing_not_importing(models_dir, monkeypatch):
    listed = models.list_factories(models_dir)
    digits, other = models_dir / "digits.py", models_dir / "other.py"
    assert listed == [
        f"{digits}:make",
        f"{other}:make_tiny",
        f"{other}:make_default",
    ]
    assert not (models_dir / "imported").exists()  # nothing was imported to list them
    assert models.factories() == listed
    monkeypatch.delenv("BASIN_MODELS")
    assert models.factories() == [models.BUNDLED]
    assert models.found_checkpoints() == []


def test_accept_checkpoint_keeps_weights_only(tmp_path, models_dir):
    factory = f"{models_dir / 'digits.py'}:make"
    good = saved(trained_state(2))
    kept = models.accept_checkpoint(good, "../step-00002.pt", factory, tmp_path)
    assert pathlib.Path(kept).parent == models.checkpoint_dir(tmp_path, factory)
    assert pathlib.Path(kept).name == "step-00002.pt"  # no folder of the upload's name
    assert pathlib.Path(kept).read_bytes() == good
    # the same name with other weights is kept beside it: a stored run may name the first
    other = models.accept_checkpoint(saved(trained_state(3)), "step-00002.pt", factory, tmp_path)
    assert other != kept and checkpoints.checkpoint_step(other) == 2
    assert models.accept_checkpoint(good, "step-00002.pt", factory, tmp_path) == kept
    with pytest.raises(ParamError, match=r"cap of 1000 B") as refused:
        models.accept_checkpoint(good, "big.pt", factory, tmp_path, cap=1000)
    assert refused.value.field == "model.checkpoint"
    with pytest.raises(ParamError, match=r"must be one of \.pt"):
        models.accept_checkpoint(good, "weights.pkl", factory, tmp_path)
    assert sorted(map(str, files_under(models.checkpoint_root(tmp_path)))) == sorted([kept, other])
    assert models.by_step([other, kept, "/x/final.pt", "/x/step-1.pt"])[-1] == "/x/final.pt"


def test_loss_convention_in_words():
    assert models.loss_text("regression", "sum") == (
        "Loss: squared error summed over outputs, averaged over samples (loss_convention=sum)"
    )
    assert "F.mse_loss" in models.loss_text("regression", "mean")
    assert "loss_convention unused" in models.loss_text("classification", "sum")


def test_checkpoint_rows_tint_warned_and_failed_cells():
    cells = [
        {"step": 0, "checkpoint": "a.pt", "status": "completed", "llc": 3.0, "se": 0.5,
         "train_loss": 2.0, "warnings": [], "verdict": "good"},
        {"step": 10, "checkpoint": "b.pt", "status": "completed", "llc": 9.0, "se": 1.0,
         "train_loss": 1.0, "warnings": ["loss_spikes"], "verdict": "good"},
        {"step": 20, "checkpoint": "c.pt", "status": "completed", "llc": 5.0, "se": 1.0,
         "train_loss": 0.5, "warnings": [], "verdict": "fail"},
        {"step": 30, "checkpoint": "d.pt", "status": "running", "llc": None, "se": None,
         "train_loss": None, "warnings": [], "verdict": None},
    ]  # fmt: skip
    rows, flags = models.checkpoint_rows(cells)
    assert [r["λ̂ ± SE"] for r in rows] == ["3 ± 0.5", "9 ± 1", "5 ± 1", "–"]
    assert [set(f.values()) for f in flags] == [set(), {"warn"}, {"fail"}, set()]
    assert rows[1]["warnings"] == "loss_spikes" and rows[2]["verdict"] == "fail"


# -- the page --------------------------------------------------------------------------------


def test_the_page_offers_the_listed_factories_and_says_the_loss(home, models_dir):
    at = model_page()
    assert not errors(at), errors(at)
    box = at.selectbox(key="net.model.factory")
    assert box.options == ["digits.py:make", "other.py:make_tiny", "other.py:make_default"]
    assert box.value == f"{models_dir / 'digits.py'}:make"
    assert not (models_dir / "imported").exists()
    captions = " ".join(c.value for c in at.caption)
    assert "d = 9610 parameters" in captions
    assert "Loss: cross-entropy averaged over samples" in captions and "eval mode" in captions
    assert [t.label for t in at.tabs][-1] == "LLC over training"
    at.selectbox(key="net.target_name").set_value("rrr").run()
    at.selectbox(key="net.target.rrr.loss_convention").set_value("mean").run()
    captions = " ".join(c.value for c in at.caption)
    assert "F.mse_loss) (loss_convention=mean)" in captions
    assert "LLC over training" not in [t.label for t in at.tabs]


def test_bad_checkpoints_are_refused_and_nothing_runs(home, models_dir, tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    evil = saved({"layers.0.weight": Touch(marker)})
    at = upload(model_page(), "step-00001.pt", evil)
    shown = " ".join(errors(at))
    assert "**model.checkpoint**" in shown and "not a weights-only checkpoint" in shown, shown
    assert "its pickle calls code" in shown and "\x1b" not in shown  # no torch load-anyway advice
    assert not marker.exists()  # never unpickled beyond tensors
    checkpoints = models.checkpoint_root(home)
    assert files_under(checkpoints) == []  # the temporary copy is gone
    assert at.selectbox(key=f"net.model.checkpoint.{models_dir / 'digits.py'}:make").value == ""
    at.button(key="net.run").click().run()  # the module's own weights: Run still works ...
    # ... a mismatched state dict: the first tensor that differs, by name
    small = digits_mlp.DigitsMLP(hidden=32).state_dict()
    at = upload(at, "small.pt", saved(small))
    shown = " ".join(errors(at))
    assert "**model.checkpoint**" in shown and r"'layers.0.weight' has shape \[32, 64\]" in shown
    # ... and one over the cap, named with the cap
    monkeypatch.setattr(models, "MAX_CHECKPOINT_BYTES", 1000)
    at.run()  # the uploader is drawn anew with its new limit (and no file)
    at = upload(at, "big.pt", saved(trained_state(1)))
    shown = " ".join(errors(at))
    assert "**model.checkpoint**" in shown and "over the cap of 1000 B" in shown, shown
    assert files_under(checkpoints) == []
    store = Store(home)
    assert [r.spec["target"]["params"]["checkpoint"] for r in store.list()] == [None]
    assert store.list_sweeps() == []
    # the payload is real: unpickled as torch.load would without weights_only, it runs
    torch.load(io.BytesIO(evil), weights_only=False)
    assert marker.exists()


def test_llc_over_training_runs_one_llc_per_checkpoint(home, models_dir):
    factory = f"{models_dir / 'digits.py'}:make"
    for step in (0, 6):  # found under BASIN_MODELS
        torch.save(trained_state(step), models_dir / f"step-{step:05d}.pt")
    at = model_page()
    at = upload(at, "step-00003.pt", saved(trained_state(3)))  # uploaded and kept
    assert not errors(at), errors(at)
    kept = str(models.checkpoint_dir(home, factory) / "step-00003.pt")
    assert at.selectbox(key=f"net.model.checkpoint.{factory}").value == kept
    assert any("Kept step-00003.pt" in s.value for s in at.success)
    chooser = at.multiselect(key=f"ckpt.chosen.{factory}")
    found = [str(models_dir / f"step-{s:05d}.pt") for s in (0, 6)]
    assert chooser.value == [found[0], kept, found[1]]  # every one, by step
    at.number_input(key="net.chains").set_value(2)
    at.number_input(key="net.steps").set_value(40)
    at.number_input(key="net.burn_in").set_value(20)
    chosen = [found[1], kept]
    at.multiselect(key=f"ckpt.chosen.{factory}").set_value(chosen).run()
    at.button(key="ckpt.run").click().run()
    assert not errors(at), errors(at)
    store = Store(home)
    (sweep,) = store.list_sweeps()
    assert sweep["kind"] == "checkpoints"
    assert sweep["spec"]["checkpoints"] == [kept, found[1]]  # by step
    runs = {r.id: r for r in store.list()}
    assert sorted(r.spec["target"]["params"]["checkpoint"] for r in runs.values()) == sorted(chosen)
    assert {r.spec["llc"]["w0"] for r in runs.values()} == {"truth"}
    run_queued(home)
    at.run()
    assert not at.exception
    result = registry.results(store, sweep["id"])
    cells = result["cells"]
    assert [c["step"] for c in cells] == [3, 6] and all(c["llc"] is not None for c in cells)
    figure = figures(at)["LLC over training"]
    points = next(t for t in figure["data"] if t["name"] == "λ̂ (mean over chains)")
    assert array(points["x"]).tolist() == [3, 6]
    assert array(points["y"]) == pytest.approx([c["llc"] for c in cells], rel=1e-12)
    loss = next(t for t in figure["data"] if t["name"].startswith("training loss"))
    assert array(loss["y"]) == pytest.approx([c["train_loss"] for c in cells], rel=1e-12)
    assert np.all(np.diff([c["train_loss"] for c in cells]) < 0)  # training lowered it
    (table,) = [d.value for d in at.dataframe if "checkpoint" in d.value.columns]
    assert table["checkpoint"].tolist() == ["step-00003.pt", "step-00006.pt"]
