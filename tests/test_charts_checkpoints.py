"""charts.checkpoint_llc_figure: lambda_hat against the training step with its ±2 SE band and
the training loss on a second axis, each trace's numbers checked against the cells given."""

from __future__ import annotations

import pytest

from charts import checkpoint_llc_figure
from charts.llc import FLAG_COLOR, PALETTE, WARN_COLOR


def cell(step, llc, se, loss, status="completed", warnings=(), verdict="good"):
    return {
        "step": step,
        "checkpoint": f"step-{step}.pt",
        "status": status,
        "llc": llc,
        "se": se,
        "train_loss": loss,
        "warnings": list(warnings),
        "verdict": verdict,
    }


def traces(fig) -> dict:
    return {t.name: t for t in fig.data}


def test_points_band_and_loss_are_the_cells_numbers_by_step():
    cells = [
        cell(300, 40.0, 2.0, 0.05, warnings=["loss_spikes"]),
        cell(0, 10.0, 1.0, 2.3),
        cell(100, 25.0, 0.5, 0.2, verdict="fail"),
        cell(1000, None, None, None, status="running", verdict=None),
    ]
    fig = checkpoint_llc_figure(cells)
    shown = traces(fig)
    points = shown["λ̂ (mean over chains)"]
    assert list(points.x) == [0, 100, 300]  # by step; the running cell has no point yet
    assert list(points.y) == [10.0, 25.0, 40.0]
    assert points.marker.color == PALETTE[0]
    warned, failed = shown["warned (verdict warn or LLC warnings)"], shown["verdict fail"]
    assert (list(warned.x), list(warned.y), warned.marker.color) == ([300], [40.0], WARN_COLOR)
    assert (list(failed.x), list(failed.y), failed.marker.color) == ([100], [25.0], FLAG_COLOR)
    band = shown["λ̂ ± 2 SE"]
    assert list(band.x) == [0, 100, 300, 300, 100, 0]
    assert list(band.y) == pytest.approx([12.0, 26.0, 44.0, 36.0, 24.0, 8.0])
    loss = shown["training loss L_n(w0)"]
    assert list(loss.x) == [0, 100, 300] and list(loss.y) == [2.3, 0.2, 0.05]
    assert loss.yaxis == "y2" and points.yaxis == "y"  # the loss on its own axis
    assert fig.layout.yaxis2.type == "log"  # a training loss spans decades
    assert fig.layout.title.text == "LLC over training"
    assert not fig.layout.annotations


def test_clean_cells_draw_no_flag_markers_and_a_zero_loss_stays_linear():
    fig = checkpoint_llc_figure([cell(0, 1.0, 0.1, 0.0), cell(5, 2.0, 0.1, 1.0)])
    assert set(traces(fig)) == {"λ̂ ± 2 SE", "λ̂ (mean over chains)", "training loss L_n(w0)"}
    assert fig.layout.yaxis2.type == "linear"


def test_no_finished_cell_says_so():
    fig = checkpoint_llc_figure([cell(0, None, None, None, status="queued", verdict=None)])
    assert "No checkpoint finished yet (1 running or queued)" in fig.layout.annotations[0].text


def test_a_model_run_is_named_by_its_factory_and_checkpoint_files():
    from charts import table

    spec = {"name": "model", "params": {"factory": "/m/digits_mlp.py:make"}}
    assert table.target({"target": spec}) == "model · digits_mlp:make"
    spec["params"]["checkpoint"] = "/m/ckpt/step-00100.pt"
    assert table.target({"target": spec}) == "model · digits_mlp:make @ step-00100.pt"
    assert table.target({"target": {"name": "dln", "params": {"seed": 3}}}) == "dln"
