"""Compare's EQN (issue 41, item 4): its walkers and eta, and the "IAT per direction" chart that
shows why it helps. The IAT of projections against AR(1) chains of known tau, the PCA fallback
against a rotated Gaussian's known axes, the chart's bars, and an AppTest of eqn vs baoab."""

from __future__ import annotations

import numpy as np
import pytest
from apptest import array, errors, figures, page, run_queued  # `home`: a conftest fixture

import charts
import landscapes
from runs.store import Store
from samplers import diagnostics
from studies import compare
from ui import plain

PHI = np.array([0.9, 0.6, 0.0])  # AR(1) coefficients: tau = (1 + phi) / (1 - phi) = 19, 4, 1
C, T = 16, 20_000


def ar1(phi: np.ndarray, chains: int, steps: int, seed: int) -> np.ndarray:
    """[chains, steps, len(phi)] stationary AR(1) coordinates z_t = phi z_{t-1} + e_t."""
    rng = np.random.default_rng(seed)
    noise = rng.normal(size=(steps, chains, len(phi)))
    z = np.empty_like(noise)
    z[0] = noise[0] / np.sqrt(1 - phi**2)  # started in the stationary law
    for t in range(1, steps):
        z[t] = phi * z[t - 1] + noise[t]
    return np.moveaxis(z, 0, 1)


def rotation(d: int, seed: int) -> np.ndarray:
    q, r = np.linalg.qr(np.random.default_rng(seed).normal(size=(d, d)))
    return q * np.sign(np.diag(r))


def test_iat_per_direction_is_the_ar1_tau_of_each_projection():
    """x = z Q^T for independent AR(1) coordinates z, so x projected on Q's columns is z and the
    IAT along column j is (1 + phi_j) / (1 - phi_j). Tolerance: Madras & Sokal's variance of
    the windowed estimator, var(tau_hat) ~ 2 (2M + 1) tau^2 / T per chain with window M ~ 5 tau
    (M >= 5 for tau near 1), over C chains averaged; five of those standard deviations."""
    q = rotation(3, seed=1)
    x = ar1(PHI, C, T, seed=0) @ q.T
    tau = (1 + PHI) / (1 - PHI)
    window = np.maximum(5 * tau, 5)
    sd = tau * np.sqrt(2 * (2 * window + 1) / (T * C))
    got = diagnostics.iat_per_direction(x, q)
    assert got.shape == (3,)
    assert np.all(np.abs(got - tau) <= 5 * sd), (got, tau, sd)
    # Along the coordinate axes the three modes mix: every axis is slower than the fastest mode.
    assert diagnostics.iat_per_direction(x, np.eye(3)).min() > 2 * tau[-1]
    # A constant (stuck) chain has no IAT: left out of the mean, not NaN for the direction.
    stuck = np.concatenate([x[:4], np.zeros((1, T, 3))])
    np.testing.assert_allclose(
        diagnostics.iat_per_direction(stuck, q), diagnostics.iat(x[:4] @ q).mean(0)
    )
    assert np.isnan(diagnostics.iat_per_direction(x[:, :, :1] * 0, np.ones((1, 1)))[0])
    one = diagnostics.iat_per_direction(x, q[:, 0])  # a single direction as a vector
    assert one.shape == (1,) and one[0] == pytest.approx(got[0], rel=1e-12)
    with pytest.raises(ValueError, match="directions"):
        diagnostics.iat_per_direction(x, np.ones((4, 2)))
    with pytest.raises(ValueError, match="chain, draw, dim"):
        diagnostics.iat_per_direction(x[0], q)


def gaussian(**params):
    return landscapes.make(
        "gaussian", dim=3, scales=(3.0, 1.0, 0.3), rotate=True, seed=5, dtype="float64", **params
    )


def test_the_directions_are_the_target_s_axes_or_the_pca_of_the_draws():
    """Exact draws of a rotated N(0, R diag(9, 1, 0.09) R^T) as a run's records: with the
    target's covariance the directions are its eigenvectors, widest first; without it (another
    density), the PCA of the draws finds the same axes, within the sampling error of n = 20,000
    draws (angle ~ sqrt(l_i l_j / (n (l_i - l_j)^2)) < 0.003 rad here). iid draws have tau = 1;
    thin k counts k steps a record."""
    import torch

    target = gaussian()
    draws = target.exact_sample(torch.Generator().manual_seed(0), 8 * 2500).numpy()
    position = draws.reshape(2500, 8, 3)  # [records, chains, d], as the store keeps them
    diverged = np.zeros((2500, 8), bool)
    true_var, true_vec = np.linalg.eigh(target.cov.numpy())
    true_var, true_vec = true_var[::-1], true_vec[:, ::-1]
    np.testing.assert_allclose(true_var, [9.0, 1.0, 0.09])

    known = compare.iat_by_direction(target, {"iid": (position, diverged, 1)}, 100, exact=True)
    assert known["source"] == "the target's covariance"
    np.testing.assert_allclose(known["variance"], true_var, rtol=1e-12)
    np.testing.assert_allclose(np.abs(known["directions"].T @ true_vec), np.eye(3), atol=1e-12)
    np.testing.assert_allclose(known["iat"]["iid"], 1.0, atol=0.15)

    thinned = compare.iat_by_direction(target, {"iid": (position, diverged, 5)}, 100, exact=False)
    assert thinned["source"] == "the runs' own draws (PCA)"
    cosines = np.abs(thinned["directions"].T @ true_vec)  # signs are arbitrary
    np.testing.assert_allclose(cosines, np.eye(3), atol=0.01)
    np.testing.assert_allclose(thinned["variance"], true_var, rtol=0.05)
    np.testing.assert_allclose(thinned["iat"]["iid"], 5.0, atol=0.75)  # 5 steps a record

    # A diverged chain is left out; the k widest directions only; too few records: no IAT.
    bad = diverged.copy()
    bad[-1, 3] = True
    blown = position.copy()
    blown[:, 3] = 1e300
    some = compare.iat_by_direction(
        target, {"a": (blown, bad, 1), "b": (position[:3], bad[:3], 1)}, 0, exact=False, k=2
    )
    assert some["directions"].shape == (3, 2) and some["variance"][0] == pytest.approx(9, rel=0.05)
    assert some["iat"]["b"] is None and np.isfinite(some["iat"]["a"]).all()


def test_the_iat_chart_has_a_bar_group_per_sampler_on_a_log_axis():
    variance = [9.0, 1.0, 0.09]
    fig = charts.iat_direction_figure(
        variance, {"eqn": [2.0, 1.5, 1.1], "baoab": [19.0, 3.0, np.nan], "late": None}
    )
    assert [t.type for t in fig.data] == ["bar"] * 3
    assert [t.name for t in fig.data] == ["eqn", "baoab", "late"]
    assert all(len(t.x) == 3 for t in fig.data)
    assert list(fig.data[0].x) == ["1 (var 9)", "2 (var 1)", "3 (var 0.09)"]
    assert np.isnan(fig.data[1].y[2]) and np.isnan(np.asarray(fig.data[2].y, float)).all()
    assert fig.layout.yaxis.type == "log" and fig.layout.barmode == "group"
    (line,) = fig.layout.shapes  # the ideal tau = 1, in data coordinates
    assert (line.y0, line.y1, line.yref) == (1.0, 1.0, "y")
    (label,) = fig.layout.annotations  # an annotation on a log axis sits at log10(1) = 0
    assert label.y == 0.0 and "ideal" in label.text


def test_compare_runs_eqn_with_its_walkers_and_eta_beside_baoab(home, monkeypatch):

    monkeypatch.setenv("BASIN_NO_WORKERS", "1")  # the runs are executed here
    at = page("compare")
    assert "eqn" in at.multiselect(key="cmp.samplers").options
    at.button(key="cmp.eqn_demo").click().run()
    assert not errors(at), errors(at)
    assert at.selectbox(key="cmp.target_name").value == "gaussian"
    assert at.multiselect(key="cmp.samplers").value == ["eqn", "baoab"]
    assert at.checkbox(key="cmp.target.gaussian.rotate").value
    # EQN's walkers and eta in its expander, at their defaults (8, the registry's 10)
    assert at.text_input(key="cmp.sampler.eqn.walkers").value == "8"
    assert at.text_input(key="cmp.sampler.eqn.eta").value == "10"
    assert "cmp.sampler.baoab.walkers" not in [w.key for w in at.text_input]
    step = at.text_input(key="cmp.sampler.eqn.step_size").value
    assert step == at.text_input(key="cmp.sampler.baoab.step_size").value == "0.1"

    at.text_input(key="cmp.sampler.eqn.walkers").input("1").run()
    assert errors(at) == ["**eqn.walkers**: " + plain("must be an integer in [2, 256], got '1'")]
    at.button(key="cmp.run").click().run()
    assert Store(home).list() == []
    at.text_input(key="cmp.sampler.eqn.walkers").input("6").run()
    at.text_input(key="cmp.sampler.eqn.eta").input("5").run()
    at.text_input(key="cmp.chains").input("8").run()
    at.text_input(key="cmp.steps").input("600").run()
    at.button(key="cmp.run").click().run()
    assert not errors(at), errors(at)

    store = run_queued(home)
    specs = {r.spec["sampler"]["name"]: r.spec for r in store.list()}
    assert specs["eqn"]["chains"] == 6 and specs["eqn"]["sampler"]["params"]["eta"] == 5.0
    assert specs["baoab"]["chains"] == 8
    assert {k: specs["eqn"][k] for k in ("steps", "burn_in", "thin", "seed", "target")} == {
        k: specs["baoab"][k] for k in ("steps", "burn_in", "thin", "seed", "target")
    }
    at.run()
    assert not errors(at), errors(at)
    box = at.selectbox(key="cmp.shown")  # one comparison, despite the chains
    assert box.format_func(box.value).endswith("8 chains × 600 steps (eqn: 6 walkers)")
    assert sorted(at.dataframe[0].value["sampler"]) == ["baoab", "eqn"]
    (title,) = [t for t in figures(at) if t.startswith("IAT per direction")]
    assert "the target's covariance" in title
    bars = figures(at)[title]["data"]
    assert sorted(b["name"] for b in bars) == ["baoab", "eqn"]
    assert all(len(b["x"]) == 4 for b in bars)  # d = 4 directions
    (why,) = [c.value for c in at.caption if c.value.startswith("IAT τ")]
    assert "eqn rescales its kicks and drifts by B = chol(I + η cov)" in why
    assert all(np.isfinite(array(b["y"])).all() for b in bars)


def test_an_ensemble_s_own_walkers_do_not_split_a_comparison():
    def spec(name: str, chains: int, steps: int = 600) -> dict:
        target = {"name": "gaussian", "params": {"dim": 4}}
        return {"target": target, "sampler": {"name": name}, "chains": chains, "steps": steps}

    assert compare.same_budget(spec("eqn", 6), spec("baoab", 8))
    assert not compare.same_budget(spec("mala", 6), spec("baoab", 8))  # a budget's chains
    assert not compare.same_budget(spec("eqn", 6), spec("baoab", 8, steps=700))
    runs = [
        type("R", (), {"id": str(i), "spec": s, "created": 100.0 + i})
        for i, s in enumerate([spec("baoab", 8), spec("eqn", 6), spec("mala", 16)])
    ]
    assert [[r.id for r in g] for g in compare.comparisons(runs)] == [["0", "1"]]
