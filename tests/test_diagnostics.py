"""samplers.diagnostics against exact answers: AR(1) IAT/ESS, equipartition, KS critical values.

Tolerances come from the Monte Carlo error of each estimate (stated next to each assert) and
every test uses a fixed seed, so a pass is deterministic.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.signal
import scipy.stats
import torch

from samplers import diagnostics as diag


def ar1(rng: np.random.Generator, phi: float, chains: int, draws: int, dim: int = 0) -> np.ndarray:
    """Stationary AR(1) x_{t+1} = phi x_t + sqrt(1 - phi^2) eps with N(0, 1) marginals.

    Its IAT is (1 + phi)/(1 - phi). Returns [chains, draws], or [chains, draws, dim] when dim > 0.
    """
    shape = (chains, dim) if dim else (chains,)
    eps = rng.standard_normal((*shape, draws))
    x_prev = rng.standard_normal((*shape, 1))  # stationary start
    x, _ = scipy.signal.lfilter([math.sqrt(1 - phi**2)], [1, -phi], eps, axis=-1, zi=phi * x_prev)
    return np.moveaxis(x, -1, 1) if dim else x


# --------------------------------------------------------------------------- 1. IAT


def test_iat_ar1_matches_exact_tau():
    rng = np.random.default_rng(0)
    x = ar1(rng, 0.9, chains=32, draws=20_000)
    tau = diag.iat(x)
    assert tau.shape == (32,)
    # Sokal: sd(tau_hat)/tau ~ sqrt(2(2M+1)/K) ~ 14% per chain at M ~ 95, K = 2e4; the mean of 32
    # chains has ~2.5% error, so 15% is > 5 sd.
    assert tau.mean() == pytest.approx(19.0, rel=0.15)
    assert np.median(tau) == pytest.approx(19.0, rel=0.15)


def test_iat_iid_is_one_and_dims_are_separate():
    rng = np.random.default_rng(1)
    iid = rng.standard_normal((16, 10_000))
    assert diag.iat(iid).mean() == pytest.approx(1.0, abs=0.05)  # sd of the mean ~ 0.01

    # Three coordinates with phi = 0, 0.5, 0.8: tau = 1, 3, 9, each estimated in its own column.
    x = np.stack([ar1(rng, phi, 16, 10_000) for phi in (0.0, 0.5, 0.8)], axis=-1)
    tau = diag.iat(x)
    assert tau.shape == (16, 3)
    np.testing.assert_allclose(tau.mean(axis=0), [1.0, 3.0, 9.0], rtol=0.15)


def test_iat_of_antithetic_ar1_chains_matches_exact_tau():
    # tau = (1 + phi) / (1 - phi) < 1 for phi < 0. Sokal's window alone closed at lag 1 for
    # phi <= -0.4 (tau(1) = 1 + 2 phi below 1/5) and returned the floor 1/log10(K), 0.23.
    rng = np.random.default_rng(2)
    for phi in (-0.2, -0.4, -0.5):
        tau = diag.iat(ar1(rng, phi, chains=32, draws=20_000))
        exact = (1 + phi) / (1 - phi)
        # the chains' spread gives the mean's Monte Carlo error
        assert abs(tau.mean() - exact) < 5 * tau.std() / math.sqrt(32), (phi, tau.mean(), exact)
    # phi = -0.8: tau = 1/9 lies below ArviZ's floor 1/log10(K), where it stops
    floor = 1 / math.log10(20_000)
    np.testing.assert_allclose(diag.iat(ar1(rng, -0.8, chains=4, draws=20_000)), floor)


def test_iat_degenerate_chains_give_nan_not_errors():
    assert np.isnan(diag.iat(np.zeros((2, 100)))).all()  # constant chains: undefined
    x = np.random.default_rng(13).standard_normal((2, 100))
    x[0, 5] = np.nan  # a diverged chain does not poison the others
    tau = diag.iat(x)
    assert np.isnan(tau[0]) and np.isfinite(tau[1])
    # Fewer than 4 draws: NaN rather than a wild number.
    assert np.isnan(diag.iat(x[:, :3])).all()
    # An alternating chain has tau(M) -> 0 or below; the floor keeps its ESS finite and positive.
    alternating = np.tile([1.0, -1.0], (1, 500))
    assert diag.iat(alternating)[0] == pytest.approx(1 / math.log10(1000))
    assert 0 < diag.ess_from_iat(alternating) <= 1000 * math.log10(1000)


# --------------------------------------------------------------------------- 2. ESS


def test_ess_bulk_and_ess_from_iat_on_ar1():
    rng = np.random.default_rng(2)
    x = ar1(rng, 0.9, chains=32, draws=20_000)
    expected = x.size / 19.0
    ess_az = diag.ess_bulk(x)
    ess_ours = diag.ess_from_iat(x)
    assert isinstance(ess_az, float) and isinstance(ess_ours, float)
    # Both have a few % Monte Carlo error here (see the IAT test); 20% is the tolerance.
    assert ess_az == pytest.approx(expected, rel=0.2)
    assert ess_ours == pytest.approx(ess_az, rel=0.2)
    # Tail ESS follows the 5%/95% indicators, which decorrelate faster than x itself (for a
    # Gaussian AR(1) their autocorrelation is at most phi^k), so it is not below the bulk ESS.
    assert 0.8 * expected < diag.ess_tail(x) < x.size


def test_ess_per_dim_shapes():
    rng = np.random.default_rng(3)
    x = np.stack([rng.standard_normal((4, 500)), ar1(rng, 0.9, 4, 500)], axis=-1)
    for f in (diag.ess_bulk, diag.ess_tail, diag.rhat, diag.mcse_mean, diag.ess_from_iat):
        out = f(x)
        assert isinstance(out, np.ndarray) and out.shape == (2,), f.__name__
        assert float(f(x[..., 0])) == pytest.approx(out[0]), f.__name__  # same per-dim answer
    ess = diag.ess_bulk(x)
    assert ess[0] > 3 * ess[1]  # the iid coordinate has far more effective draws


def test_more_chains_than_draws_is_fine():
    x = np.random.default_rng(4).standard_normal((64, 10, 2))
    assert np.isfinite(diag.ess_bulk(x)).all()


# --------------------------------------------------------------------------- 3. R-hat


def test_rhat_well_mixed_and_shifted():
    rng = np.random.default_rng(5)
    assert diag.rhat(rng.standard_normal((4, 1000))) < 1.01
    # Two chains, one shifted by 1 sd: split R-hat ~ sqrt(1 + 1/3) ~ 1.15. (With four chains and
    # one shifted it is only ~ sqrt(1 + 3/14) ~ 1.10, right at the threshold.)
    x = rng.standard_normal((2, 1000))
    x[0] += 1.0
    assert diag.rhat(x) > 1.1


# --------------------------------------------------------------------------- 4. MCSE


def test_mcse_mean_iid():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((4, 2500))
    # MCSE = sd / sqrt(ESS); both have ~1-2% error for 1e4 iid draws, so 10% is safe.
    assert diag.mcse_mean(x) == pytest.approx(1 / math.sqrt(x.size), rel=0.1)


# --------------------------------------------------------------------------- 5. virial


def quadratic_draws(rng: np.random.Generator, temperature: float, shape: tuple[int, ...]):
    """Exact draws of exp(-U/T) with U = w^T A w / 2, i.e. w ~ N(0, T A^-1), and grad U = A w."""
    d = shape[-1]
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    eig = np.linspace(0.5, 4.0, d)
    a = (q * eig) @ q.T
    z = rng.standard_normal(shape)
    w = math.sqrt(temperature) * (z * eig**-0.5) @ q.T  # Cov = T Q diag(1/eig) Q^T = T A^-1
    return a, w, w @ a


def test_virial_equipartition_and_configurational_temperature():
    rng = np.random.default_rng(7)
    temperature, chains, draws, d = 0.7, 8, 2000, 5
    a, w, grad = quadratic_draws(rng, temperature, (chains, draws, d))
    n = chains * draws

    vir = diag.virial(w, grad)
    assert vir.shape == (chains, draws)
    # w . grad U = T z^T z ~ T chi2_d: mean d T, sd T sqrt(2 d).
    se = temperature * math.sqrt(2 * d / n)
    assert abs(vir.mean() - d * temperature) < 4 * se

    t_vir = diag.configurational_temperature(w, grad)
    assert abs(t_vir - temperature) < 4 * se / d

    # |grad U|^2 = T z^T A' z with A' = diag(eig): mean T tr A, sd T sqrt(2 tr A^2); Laplacian tr A.
    lap = np.full((chains, draws), np.trace(a))
    t_conf = diag.configurational_temperature(w, grad, laplacian=lap)
    se_conf = temperature * math.sqrt(2 * np.trace(a @ a) / n) / np.trace(a)
    assert abs(t_conf - temperature) < 4 * se_conf


# --------------------------------------------------------------------------- 6. kinetic energy


def test_kinetic_energy_equipartition():
    rng = np.random.default_rng(8)
    temperature, chains, draws, d = 2.5, 16, 1000, 3
    p = math.sqrt(temperature) * rng.standard_normal((chains, draws, d))
    k = diag.kinetic_energy(p)
    assert k.shape == (chains, draws)
    assert diag.kinetic_energy(p[:, 0]).shape == (chains,)  # one state [C, d]
    # K = T chi2_d / 2: mean d T / 2, sd T sqrt(d / 2).
    se = temperature * math.sqrt(d / 2) / math.sqrt(k.size)
    assert abs(k.mean() - d * temperature / 2) < 3 * se


def test_acceptance_rate():
    accepted = np.array([[True, False, True, True], [False, False, False, True]])
    rate = diag.acceptance_rate(accepted)
    np.testing.assert_allclose(rate.per_chain, [0.75, 0.25])
    assert rate.overall == pytest.approx(0.5)
    per_chain, overall = diag.acceptance_rate(torch.tensor([[0.2, 0.4]]))  # MH probabilities
    assert per_chain == pytest.approx([0.3]) and overall == pytest.approx(0.3)


# --------------------------------------------------------------------------- 7. KS


def test_ks_same_law_below_bound_shifted_law_above():
    rng = np.random.default_rng(9)
    x = ar1(rng, 0.9, chains=8, draws=2000, dim=2)  # N(0, 1) marginals, tau = 19
    exact = rng.standard_normal((5000, 2))
    bound = diag.ks_bound(diag.ess_bulk(x), exact.shape[0])
    assert bound.shape == (2,)
    ks = diag.ks_distance(x, exact)
    assert ks.shape == (2,)
    assert np.all(ks < bound)
    assert np.all(diag.ks_distance(x + 0.5, exact) > bound)


def test_ks_distance_matches_scipy_and_accepts_layouts():
    rng = np.random.default_rng(10)
    s, e = rng.standard_normal((300, 2)), rng.standard_normal((200, 2)) + 0.2
    expected = [scipy.stats.ks_2samp(s[:, j], e[:, j]).statistic for j in range(2)]
    np.testing.assert_allclose(diag.ks_distance(s, e), expected)
    np.testing.assert_allclose(diag.ks_distance(s.reshape(3, 100, 2), e), expected)
    np.testing.assert_allclose(diag.ks_distance(s[:, 0], e[:, 0]), expected[:1])


def test_ks_bound_matches_kolmogorov_distribution():
    alpha = 1e-3
    # Asymptotic: sqrt(n m / (n + m)) D -> Kolmogorov distribution (scipy kstwobign).
    n = m = 10**6
    scale = math.sqrt(n * m / (n + m))
    assert diag.ks_bound(n, m, alpha) * scale == pytest.approx(
        scipy.stats.kstwobign.isf(alpha), rel=1e-9
    )
    # One-sample exact law at large n (the m -> infinity limit): within its O(1/sqrt n) correction.
    n = 100_000
    assert diag.ks_bound(n, 1e15, alpha) == pytest.approx(scipy.stats.kstwo.isf(alpha, n), rel=1e-3)
    np.testing.assert_allclose(
        diag.ks_bound(np.array([100.0, 400.0]), 100, alpha),
        [diag.ks_bound(100, 100, alpha), diag.ks_bound(400, 100, alpha)],
    )


# --------------------------------------------------------------------------- summary


def test_summary_table():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((4, 500, 3)) + np.array([0.0, 1.0, -2.0])
    table = diag.summary(x)
    assert set(table) == {"mean", "sd", "mcse_mean", "ess_bulk", "ess_tail", "rhat"}
    assert all(v.shape == (3,) for v in table.values())
    np.testing.assert_allclose(table["mean"], [0.0, 1.0, -2.0], atol=5 / math.sqrt(2000))
    np.testing.assert_allclose(table["sd"], 1.0, rtol=0.1)
    np.testing.assert_allclose(table["ess_bulk"], diag.ess_bulk(x))
    assert all(v.shape == (1,) for v in diag.summary(x[..., 0]).values())


# --------------------------------------------------------------------------- 8. inputs


def test_torch_and_numpy_inputs_agree():
    rng = np.random.default_rng(12)
    x = ar1(rng, 0.5, 4, 300, dim=2).astype(np.float32)
    t = torch.from_numpy(x).requires_grad_()
    for f in (diag.ess_bulk, diag.ess_tail, diag.rhat, diag.mcse_mean, diag.iat, diag.ess_from_iat):
        np.testing.assert_array_equal(f(t), f(x), err_msg=f.__name__)
    np.testing.assert_array_equal(diag.kinetic_energy(t), diag.kinetic_energy(x))
    np.testing.assert_array_equal(diag.virial(t, 2 * t), diag.virial(x, 2 * x))
    np.testing.assert_array_equal(diag.ks_distance(t, t[0]), diag.ks_distance(x, x[0]))
    for key, value in diag.summary(t).items():
        np.testing.assert_array_equal(value, diag.summary(x)[key], err_msg=key)
    accepted = rng.random((3, 20)) < 0.5
    np.testing.assert_array_equal(
        diag.acceptance_rate(torch.from_numpy(accepted)).per_chain,
        diag.acceptance_rate(accepted).per_chain,
    )


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: diag.ess_bulk(np.zeros(10)), "x"),
        (lambda: diag.rhat(np.zeros((2, 3, 4, 5))), "x"),
        (lambda: diag.iat(np.zeros((2, 0))), "x"),
        (lambda: diag.iat(np.zeros((2, 10)), c=0), "c"),
        (lambda: diag.summary(np.zeros(10)), "draws"),
        (lambda: diag.acceptance_rate(np.zeros(10)), "accepted"),
        (lambda: diag.kinetic_energy(np.zeros(3)), "p"),
        (lambda: diag.virial(np.zeros((2, 3)), np.zeros((2, 4))), "grad"),
        (lambda: diag.virial(np.zeros(3), np.zeros(3)), "w"),
        (
            lambda: diag.configurational_temperature(np.ones((2, 3)), np.ones((2, 3)), np.ones(3)),
            "laplacian",
        ),
        (lambda: diag.ks_distance(np.zeros((2, 3, 4, 5)), np.zeros((5, 5))), "samples"),
        (lambda: diag.ks_distance(np.zeros((10, 2)), np.zeros((10, 3))), "exact"),
        (lambda: diag.ks_bound(0, 10), "n_eff"),
        (lambda: diag.ks_bound(10, -1), "m"),
        (lambda: diag.ks_bound(10, 10, alpha=1.5), "alpha"),
    ],
)
def test_bad_input_names_the_argument(call, name):
    with pytest.raises(ValueError, match=rf"^{name}:"):
        call()
