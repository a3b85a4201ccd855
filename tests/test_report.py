"""studies.diagnostics (and the calibration's live curve), the headless numbers the pages draw,
against values computed here: runs whose records this file writes through the Store (known numpy
draws, no sampler), ESS and R-hat by arviz-stats, KS by scipy, the funnel's closed forms; and
``python -m jobs show ID --diagnostics``, which prints the same table."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import arviz_stats
import numpy as np
import pytest
import scipy.stats
import torch

import landscapes
from charts.llc import chain_stats
from runs.spec import parse_spec
from runs.store import Store
from studies import calibrate, diagnostics

ROOT = Path(__file__).resolve().parents[1]
RECORDS, CHAINS, BURN_IN = 400, 4, 100
ALPHA = math.sqrt(-math.log(0.001 / 2) / 2)  # the Kolmogorov quantile at alpha = 0.001


def funnel_run(home, sampler_params=None, status="completed", seed=0):
    """A 2-D funnel run of 4 chains x 400 records written directly (chain 3 diverged at record
    300: NaN after), with the summary the run loop writes: acceptance and, per coordinate,
    arviz-stats' bulk ESS and R-hat of the good chains after the burn-in. Returns (store, id, draws
    [records, chains, 2], accepted)."""
    store = Store(home)
    spec = {
        "target": {"name": "funnel", "params": {"dim": 2}},
        "sampler": {"name": "mala", "params": {"step_size": 0.5, **(sampler_params or {})}},
        "chains": CHAINS,
        "steps": RECORDS,
        "burn_in": BURN_IN,
    }
    run_id = store.create(parse_spec(spec).model_dump(mode="json"))
    rng = np.random.default_rng(seed)
    draws = rng.normal(size=(RECORDS, CHAINS, 2)) * [9.0, 3.0]
    draws[300:, 3] = np.nan
    diverged = np.zeros((RECORDS, CHAINS), bool)
    diverged[300:, 3] = True
    accepted = (rng.random((RECORDS, CHAINS)) < 0.6).astype(np.float32)
    store.append(
        run_id,
        0,
        {
            "step": np.arange(RECORDS),
            "position": draws,
            "loss": rng.normal(size=(RECORDS, CHAINS)),
            "accepted": accepted,
            "diverged": diverged,
        },
    )
    if status == "running":
        store.claim(os.getpid(), run_id)
        return store, run_id, draws, accepted
    kept = np.moveaxis(draws[BURN_IN:, :3], 0, 1)  # [chain, draw, 2], the good chains
    summary = {
        "acceptance": float(accepted[BURN_IN:, :3].mean()),
        "seconds": 1.5,
        "diverged_chains": 1,
        "coordinates": {
            "ess_bulk": [float(arviz_stats.ess(kept[..., i], method="bulk")) for i in range(2)],
            "rhat": [float(arviz_stats.rhat(kept[..., i], method="rank")) for i in range(2)],
        },
    }
    store.finish(run_id, status, summary=summary)
    return store, run_id, draws, accepted


def exact_funnel() -> np.ndarray:
    target = landscapes.make("funnel", device="cpu", dtype="float64", dim=2)
    g = torch.Generator().manual_seed(diagnostics.EXACT_SEED)
    return target.exact_sample(g, diagnostics.EXACT_DRAWS).numpy()


def test_the_diagnostics_table_holds_the_numbers_computed_here(tmp_path):
    store, run_id, draws, accepted = funnel_run(tmp_path)
    table = diagnostics.diagnostics_table(store, run_id)
    rows = table["rows"]
    assert [r["coordinate"] for r in rows] == ["x", "v"]
    kept = draws[BURN_IN:, :3]  # chain 3 diverged: left out throughout
    chains = np.moveaxis(kept, 0, 1)
    exact = exact_funnel()
    summary = store.get(run_id).summary["coordinates"]
    for i, (row, t) in enumerate(zip(rows, [-20 + 40 / 3, -9 + 18 / 3], strict=True)):
        x = kept[..., i].ravel()
        assert row["t"] == round(t, 2)
        assert row["mean"] == pytest.approx(x.mean(), rel=1e-12)
        assert row["sd"] == pytest.approx(x.std(ddof=1), rel=1e-12)
        assert row["P(< t)"] == pytest.approx(np.mean(x < row["t"]), abs=1e-15)
        ks = scipy.stats.ks_2samp(x, exact[:, i]).statistic
        assert row["KS distance"] == pytest.approx(ks, abs=1e-12)
        ess = summary["ess_bulk"][i]
        bound = ALPHA * math.sqrt((min(ess, x.size) + len(exact)) / (min(ess, x.size) * len(exact)))
        assert row[diagnostics.KS_COLUMN] == pytest.approx(bound, rel=1e-12)
        assert row["ESS bulk"] == pytest.approx(arviz_stats.ess(chains[..., i], method="bulk"))
        assert row["R-hat"] == pytest.approx(arviz_stats.rhat(chains[..., i], method="rank"))
        # the 5% and 95% quantiles, as legacy ArviZ; arviz-stats' array call needs prob, and its
        # Dataset default is 1 - ci_prob (0.89): the 11% and 89% quantiles
        tail = arviz_stats.ess(chains[..., i], method="tail", prob=0.05)
        assert row["ESS tail"] == pytest.approx(tail, rel=1e-9)
    # the funnel's closed forms: x has variance E[exp(v)] = e^(9/2), v ~ N(0, 9)
    assert (rows[0]["exact mean"], rows[1]["exact mean"]) == (0.0, 0.0)
    assert rows[0]["exact sd"] == pytest.approx(math.exp(9 / 4), rel=1e-3)
    assert rows[1]["exact sd"] == pytest.approx(3.0, rel=1e-12)
    assert rows[1]["exact P(< t)"] == pytest.approx(scipy.stats.norm.cdf(-3.0, scale=3), abs=1e-7)
    assert rows[0]["exact P(< t)"] == pytest.approx(np.mean(exact[:, 0] < rows[0]["t"]))
    facts = table["metrics"]
    assert facts["acceptance"] == pytest.approx(accepted[BURN_IN:, :3].mean(), rel=1e-6)
    assert facts["mh"] and facts["diverged chains"] == 1 and facts["seconds"] == 1.5
    assert facts["draws after burn-in"] == (RECORDS - BURN_IN) * 3


def test_a_running_run_has_live_numbers_and_no_ess_yet(tmp_path):
    store, run_id, _, accepted = funnel_run(tmp_path, status="running")
    table = diagnostics.diagnostics_table(store, run_id)
    assert table["metrics"]["acceptance"] == pytest.approx(accepted[BURN_IN:, :3].mean())
    assert table["metrics"]["seconds"] is None
    for row in table["rows"]:
        ks_bound = row[diagnostics.KS_COLUMN]
        assert row["ESS bulk"] is row["ESS tail"] is row["R-hat"] is ks_bound is None
        assert row["KS distance"] is not None and row["mean"] is not None


def test_a_run_of_another_density_is_not_compared_with_the_exact_one(tmp_path):
    store, run_id, _, _ = funnel_run(tmp_path, sampler_params={"nbeta": 2.0})
    for row in diagnostics.diagnostics_table(store, run_id)["rows"]:
        for column in ("exact mean", "exact sd", "exact P(< t)", "KS distance"):
            assert row[column] is None, column
        assert row["ESS bulk"] is not None


def test_the_density_grid_is_the_closed_form():
    target = landscapes.make("gaussian", device="cpu", dtype="float64", dim=2, scales=[1.0, 2.0])
    grid = diagnostics.density_grid(target, nbeta=2.0, temperature=0.5)
    (x0, x1), (y0, y1) = target.bounds
    np.testing.assert_allclose(grid["xs"], np.linspace(x0, x1, diagnostics.GRID))
    np.testing.assert_allclose(grid["ys"], np.linspace(y0, y1, diagnostics.GRID))
    yy, xx = np.meshgrid(grid["ys"], grid["xs"], indexing="ij")
    energy = 0.5 * (xx**2 + yy**2 / 4)  # U = w^T cov^-1 w / 2
    np.testing.assert_allclose(grid["log_density"], -2.0 * energy / 0.5, rtol=1e-12, atol=1e-12)


def test_exact_tails_and_moments_of_a_gaussian():
    target = landscapes.make("gaussian", device="cpu", dtype="float64", dim=2, scales=[1.0, 2.0])
    for i, sd in enumerate([1.0, 2.0]):
        for t in (-1.5, 0.0, 0.7):
            p = diagnostics.exact_tail(target, None, i, t)
            assert p == pytest.approx(scipy.stats.norm.cdf(t, scale=sd), abs=1e-8)
        assert diagnostics.exact_moments(target, None, i) == pytest.approx((0.0, sd))
    funnel = landscapes.make("funnel", device="cpu", dtype="float64", dim=2)
    assert 0 not in funnel.marginals  # x: from exact draws
    draws = np.random.default_rng(1).normal(size=(5000, 2))
    assert diagnostics.exact_tail(funnel, draws, 0, 0.3) == np.mean(draws[:, 0] < 0.3)
    assert diagnostics.exact_tail(funnel, None, 0, 0.3) is None


def test_the_live_calibration_curve_is_the_charts_mean_over_finite_chains():
    x = np.random.default_rng(3).normal(size=(7, 4))
    x[1, 2], x[2, :], x[3, 0] = np.nan, np.nan, np.inf
    np.testing.assert_array_equal(calibrate.finite_mean(x), chain_stats(x)[0])


# -- the CLI: python -m jobs show ID --diagnostics -----------------------------------------------


def main(home, monkeypatch, *argv: str) -> int:
    from cli.main import main as jobs_main

    monkeypatch.setenv("BASIN_HOME", str(home))
    return jobs_main(list(argv))


def test_show_diagnostics_prints_the_playgrounds_table(tmp_path, monkeypatch, capsys):
    store, run_id, _, _ = funnel_run(tmp_path)
    table = diagnostics.diagnostics_table(store, run_id)
    assert main(tmp_path, monkeypatch, "show", run_id, "--json") == 0
    plain = json.loads(capsys.readouterr().out)
    assert "diagnostics" not in plain  # the scripted output is as it was without the flag
    assert main(tmp_path, monkeypatch, "show", run_id, "--json", "--diagnostics") == 0
    shown = json.loads(capsys.readouterr().out)
    assert {k: v for k, v in shown.items() if k != "diagnostics"} == plain
    assert shown["diagnostics"] == json.loads(json.dumps(table))
    assert main(tmp_path, monkeypatch, "show", run_id, "--diagnostics") == 0
    out = capsys.readouterr().out
    assert f"run_id: {run_id}" in out and "status: completed" in out
    head, *lines = out.split("\n\n", 1)[1].strip().split("\n")
    assert head.startswith("acceptance 0.") and "diverged chains 1" in head
    assert lines[0].split()[:3] == ["coordinate", "mean", "exact"]
    v = lines[2].split()
    assert v[0] == "v" and float(v[1]) == pytest.approx(table["rows"][1]["mean"], rel=1e-3)


def test_show_diagnostics_of_a_run_without_records_names_it(tmp_path, monkeypatch, capsys):
    spec = {"target": {"name": "banana", "params": {}}, "sampler": {"name": "mala"}, "steps": 10}
    run_id = Store(tmp_path).create(parse_spec(spec).model_dump(mode="json"))
    assert main(tmp_path, monkeypatch, "show", run_id, "--diagnostics") == 2
    captured = capsys.readouterr()
    assert captured.out == "" and f"run {run_id} has no records yet" in captured.err


def test_the_headless_module_never_imports_streamlit():
    modules = "studies.diagnostics, studies.compare, studies.registry, cli.main"
    code = f"import sys, {modules}; sys.exit('streamlit' in sys.modules)"
    env = {**os.environ}
    # a subprocess: this process may have imported streamlit already (the app's tests)
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env).returncode == 0
