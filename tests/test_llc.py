"""The LLC estimator: arithmetic, probes, health signals and training, against values derived
independently (closed forms, Hitchcock & Hoogland's numbers, devinterp's unit-test vectors,
lstsq)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import landscapes
from samplers import llc
from samplers.training import random_init, train


def test_default_nbeta_is_n_over_log_n():
    # docs/methods/local-sampling.md: n = 1e6 -> 72382.41, 1e5 -> 8685.89, 1e4 -> 1085.74.
    assert llc.default_nbeta(10**6) == pytest.approx(72382.41, abs=0.01)
    assert llc.default_nbeta(10**5) == pytest.approx(8685.89, abs=0.01)
    assert llc.default_nbeta(10**4) == pytest.approx(1085.74, abs=0.01)
    assert llc.default_nbeta(None) == 1.0


def test_estimate_is_nbeta_times_mean_excess_after_burn_in():
    rng = np.random.default_rng(0)
    losses = 2.0 + rng.random((1000, 5))
    losses[:900] += 100.0  # the burn-in (B = 0.9 T) must be dropped
    nbeta, baseline = 7.0, 1.5
    est = llc.estimate(losses, baseline, nbeta, burn_in=900)
    per_chain = [nbeta * (losses[900:, c].mean() - baseline) for c in range(5)]
    assert est.per_chain == pytest.approx(per_chain, rel=1e-12)
    assert est.mean == pytest.approx(np.mean(per_chain), rel=1e-12)
    assert est.std == pytest.approx(np.std(per_chain, ddof=1), rel=1e-12)
    assert est.se == pytest.approx(np.std(per_chain, ddof=1) / math.sqrt(5), rel=1e-12)
    assert est.draws == 100 and est.nan_chains == 0


def test_nan_chains_are_counted_and_never_averaged_in():
    losses = np.ones((50, 4))
    losses[:, 0] = 3.0
    losses[20:, 2] = np.nan  # a chain that diverged mid-run
    est = llc.estimate(losses, baseline=1.0, nbeta=2.0)
    assert est.nan_chains == 1 and est.chains == 4
    assert est.per_chain[2] is None
    assert est.mean == pytest.approx((4.0 + 0.0 + 0.0) / 3)


def test_no_draws_after_the_burn_in_is_no_estimate_not_divergence():
    # A run cancelled during its burn-in: every chain is fine, there is just nothing to average.
    est = llc.estimate(np.ones((30, 4)), baseline=1.0, nbeta=2.0, burn_in=30)
    assert (est.mean, est.draws, est.nan_chains, est.chains) == (None, 0, 0, 4)
    assert [w["code"] for w in llc.health(est, dim=20)] == ["no_draws"]


def test_running_estimate_ends_at_the_estimate():
    rng = np.random.default_rng(1)
    losses = rng.random((200, 3))
    run = llc.running(losses, 0.1, 3.0, burn_in=50)
    assert np.isnan(run[:50]).all()
    assert run[50] == pytest.approx(3.0 * (losses[50] - 0.1))
    assert run[-1] == pytest.approx(llc.estimate(losses, 0.1, 3.0, 50).per_chain)


def test_wbic_is_n_times_the_mean_loss_at_beta_one_over_log_n():
    n = 1000
    assert llc.wbic(0.3, n, n / math.log(n)) == pytest.approx(300.0)
    assert llc.wbic(0.3, n, 2 * n / math.log(n)) is None  # another temperature: not WBIC
    assert llc.wbic(0.3, None, 1.0) is None


@pytest.mark.parametrize(
    "w, g, u, w_new, g_new, u_new, eps, expected",
    [
        # devinterp's unit-test vectors (docs/methods/local-sampling.md)
        ((0.0, 0.0), (0.0, 0.0), 0.0, (1.5, 5.5), (1.5, 5.5), 16.25, 0.1, 0.6661436),
        ((1.0, 1.0), (1.0, 1.0), 1.0, (1.5, 0.5), (1.5, 0.5), 1.25, 0.5, 0.9692332),
    ],
)
def test_mala_acceptance_matches_devinterp_vectors(w, g, u, w_new, g_new, u_new, eps, expected):
    t = lambda x: torch.tensor([x], dtype=torch.float64)  # noqa: E731
    a = llc.mala_acceptance(t(w), t(w_new), t(u)[0], t(u_new)[0], t(g), t(g_new), eps)
    assert float(a[0]) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("name", ["rmsprop-sgld", "adam-sgld"])
def test_the_acceptance_probe_proposes_with_the_preconditioned_step(name):
    """RMSProp/Adam-SGLD move each coordinate by eps_t = eps / (sqrt(v_hat) + a), up to 10x eps:
    the probe must propose with that step (here 10x eps on U = (w0^2 + 50 w1^2) / 2, where
    eps_t lam = 2 makes MALA reject often), not with eps (eps lam = 0.2: accepted ~always).
    The expected value is MALA's ratio for a diagonal step, written out here in numpy."""
    import samplers

    target = landscapes.make("custom", formula="(w0**2 + 50 * w1**2) / 2", dtype="float64")
    eps, lam = 0.004, np.array([1.0, 50.0])
    kernel = samplers.make(name, step_size=eps)
    g = torch.Generator().manual_seed(0)
    state = kernel.init(torch.randn(256, 2, generator=g, dtype=torch.float64) * 0.1, target, g)
    state.v, state.t = torch.zeros_like(state.v), state.t + 5  # v_hat = 0: eps_t = eps / a
    got = llc.sgld_acceptance(kernel, state, target, torch.Generator().manual_seed(1)).numpy()
    w = state.position.numpy()
    xi = torch.randn(w.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)

    def mala(step):  # [C] min(1, ratio) of the proposal of ``step`` with the probe's draws
        new = w - 0.5 * step * lam * w + math.sqrt(step) * xi.numpy()

        def log_q(to, frm):  # the Langevin proposal density frm -> to, up to a constant
            return -(((to - frm + 0.5 * step * lam * frm) ** 2) / (2 * step)).sum(-1)

        u, u_new = 0.5 * (lam * w * w).sum(-1), 0.5 * (lam * new * new).sum(-1)
        return np.minimum(1.0, np.exp(u - u_new + log_q(w, new) - log_q(new, w)))

    np.testing.assert_allclose(got, mala(eps / kernel.a), rtol=1e-10)  # 10x eps
    assert mala(eps).mean() > 0.95 > 0.8 > got.mean()  # the raw step would have looked fine


def test_gradient_noise_ratio_matches_the_per_sample_variance():
    # Linear regression (a one-layer DLN): per-sample gradients have a closed form, so
    # Var(g_m) = Var_i(grad l_i) / m for minibatches drawn with replacement.
    target = landscapes.make("dln", widths=(3, 2), n=2000, seed=3, device="cpu", dtype="float64")
    w = target.w0 + 0.01
    W = w.reshape(2, 3)
    residual = target.x @ W.T - target.y  # [n, 2]
    per_sample = 2 * residual[:, :, None] * target.x[:, None, :]  # d l_i / d W
    var = per_sample.reshape(target.n, -1).var(0, unbiased=False).mean()
    m, eps, nbeta = 50, 1e-6, 300.0
    expected = eps / 4 * nbeta**2 * float(var) / m
    g = torch.Generator().manual_seed(0)
    got = llc.gradient_noise_ratio(target, w, nbeta, eps, m, g, batches=800)
    # The estimate is a sample variance over 800 batches: relative sd ~ sqrt(2/799) = 0.05.
    assert got == pytest.approx(expected, rel=0.2)
    assert llc.gradient_noise_ratio(target, w, nbeta, eps, None, g) == 0.0


def test_spikes_flag_outliers_and_spare_a_gamma_trace():
    rng = np.random.default_rng(2)
    nbeta, dim = 100.0, 20
    # A healthy trace: nbeta (L - L0) ~ Gamma(d/2, 1), the regular model's posterior law.
    losses = rng.gamma(dim / 2, 1.0, size=(20_000, 4)) / nbeta
    assert llc.spikes(losses, 0.0, nbeta, dim).sum() == 0
    losses[5000, 1] = 50.0  # nbeta (L - L0) = 5000, far past anything the posterior reaches
    assert llc.spikes(losses, 0.0, nbeta, dim).tolist() == [0, 1, 0, 0]


def test_health_names_the_problem_and_its_cause():
    ok = llc.summarise(np.array([3.0, 3.2, 2.9]), 100)
    assert llc.health(ok, dim=20) == []
    codes = lambda est, **kw: [w["code"] for w in llc.health(est, 20, **kw)]  # noqa: E731
    assert codes(llc.summarise(np.array([30.0, 31.0]), 100)) == ["above_max"]
    assert codes(llc.summarise(np.array([-3.0, -2.0]), 100)) == ["negative"]
    assert codes(llc.summarise(np.array([3.0, np.nan]), 100)) == ["nan"]
    assert codes(ok, noise_ratio=2.0) == ["gradient_noise"]
    assert codes(ok, spike_counts=np.array([0, 2])) == ["spikes"]
    assert "step size" in llc.health(llc.summarise(np.array([30.0]), 9), 20)[0]["message"]
    # chains so spread that the SE hides the excess, but every one of them past d: flagged;
    # near d/2 with the same rule, not
    wild = llc.summarise(np.array([2.8e7, 1.6e7, 3.6e8, 2.8e7]), 400)
    assert llc.out_of_range(wild.mean, wild.se, 202) is None
    assert "above_max" in [w["code"] for w in llc.health(wild, 202)]
    near = llc.summarise(np.array([105.0, 99.0, 110.0, 102.0]), 400)
    assert llc.health(near, 202) == []
    # At a regular point the truth is d/2: an excess within 2 SE of it is Monte Carlo error.
    assert llc.out_of_range(10.02, 0.05, 20) is None and llc.out_of_range(10.2, 0.05, 20) == "above"
    assert llc.out_of_range(-0.05, 0.05, 20) is None and llc.out_of_range(-0.2, 0.05, 20) == "below"


def test_training_reaches_the_least_squares_solution():
    # A one-layer DLN is linear regression: its minimiser is lstsq's, independently computed.
    target = landscapes.make("dln", widths=(4, 3), n=500, seed=5, device="cpu", dtype="float64")
    solution = torch.linalg.lstsq(target.x, target.y).solution.T.reshape(-1)
    g = torch.Generator().manual_seed(0)
    trained = train(target, random_init(target, g), lr=0.05, steps=4000, patience=300, tol=1e-9)
    assert torch.allclose(trained.w0, solution, atol=1e-3)
    assert trained.loss == pytest.approx(float(target.full_loss(solution[None])[0]), rel=1e-6)
    assert trained.losses[0] > trained.losses[-1]


def test_training_stops_early_on_a_plateau_and_full_loss_chunks_agree():
    target = landscapes.make("dln", widths=(2, 2), n=3000, seed=1, device="cpu", dtype="float64")
    g = torch.Generator().manual_seed(0)
    trained = train(target, random_init(target, g), lr=0.05, steps=20_000, patience=200)
    assert trained.stopped_early and trained.steps < 20_000
    w = torch.randn(3, target.dim, generator=g, dtype=torch.float64)
    assert torch.allclose(target.full_loss(w, chunk=700), target.loss(w), rtol=1e-12)


def test_training_stops_when_its_check_callback_asks():
    # The worker's cancel reaches training through on_check's return value.
    target = landscapes.make("dln", widths=(2, 2), n=300, seed=1, device="cpu", dtype="float64")
    heard = []
    trained = train(
        target,
        random_init(target, torch.Generator().manual_seed(0)),
        steps=1000,
        check_every=10,
        on_check=lambda step, loss: heard.append(step) or step >= 50,
    )
    assert trained.cancelled and not trained.stopped_early
    assert trained.steps == 50 and heard == trained.checks == [0, 10, 20, 30, 40, 50]


def test_random_init_is_not_the_truth_and_is_seeded():
    target = landscapes.make("dln", widths=(3, 4, 2), seed=0, device="cpu")
    a = random_init(target, torch.Generator().manual_seed(1))
    b = random_init(target, torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and not torch.allclose(a, target.w0)
    assert a[:12].abs().max() <= 1 / math.sqrt(3)  # U(-1/sqrt(fan_in), 1/sqrt(fan_in))


def test_stationary_tells_a_settled_trace_from_a_drifting_one():
    rng = np.random.default_rng(3)
    settled = 1.0 + 0.01 * rng.standard_normal((4000, 8))
    drifting = settled + np.linspace(0, 0.5, 4000)[:, None]  # still spreading out from w0
    assert llc.stationary(settled, 0.9, 10.0)
    assert not llc.stationary(drifting, 0.9, 10.0)


def test_a_paired_step_reports_w0s_loss_on_its_own_batch_and_the_pairs_cut_the_noise():
    import samplers

    target = landscapes.make("dln", seed=4, n=5000, device="cpu", dtype="float64")
    plain_kernel = samplers.make("sgld", step_size=1e-7, batch_size=50)
    kernel = llc.Paired(plain_kernel, target, target.w0)
    chains = 8
    state = kernel.init(target.w0.expand(chains, -1), target, torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(1)
    index = torch.randint(target.n, (50,), generator=g)
    noise = torch.randn(chains, target.dim, generator=g, dtype=torch.float64)
    _, info = kernel.step(state, target, {"xi": noise, "index": index})  # one step's draws
    want = target.loss(target.w0[None], target.batch(index))  # w0's loss, evaluated directly
    torch.testing.assert_close(info.scalars["center_loss"], want.expand(chains))

    # A run: L_b(w_t) - L_b(w0) and L_b(w_t) - L_n(w0) estimate the same excess loss. Their
    # difference, L_n(w0) - mean_t L_b_t(w0), averages 400 i.i.d. batches at a fixed point:
    # mean 0 and an SD known from the batch losses themselves.
    state, info = kernel.run(state, target, g, 400)
    loss, center = info.loss, info.scalars["center_loss"]
    baseline = float(target.full_loss(target.w0[None])[0])
    paired, plain = (loss - center).mean(0), loss.mean(0) - baseline
    per_batch = center[:, 0]  # one batch per step, shared by the chains
    se = float(per_batch.std() / math.sqrt(len(per_batch)))
    assert abs(float((paired - plain)[0])) < 4 * se
    # ... and the pairs remove most of the batch noise: per step, a far smaller spread
    assert float((loss - center).std(0).mean()) < float(loss.std(0).mean()) / 5


@pytest.mark.parametrize(
    "name", ["sgld", "rmsprop-sgld", "adam-sgld", "sghmc", "sgnht", "baoab", "gla1", "gla2"]
)
def test_every_minibatch_kernel_pairs_each_steps_loss_with_w0s_on_the_same_batch(name):
    # A step of 1e-12 leaves the chains at w0, so L_b(w_t) - L_b(w0) is 0 on every step's batch
    # when both come from the same one; on different batches it is of order the batch noise.
    # GLA1/GLA2 once reported their first step's loss from the batch that init had drawn.
    import samplers

    target = landscapes.make("tanh", n=500, device="cpu", dtype="float64")
    kernel = llc.Paired(samplers.make(name, step_size=1e-12, batch_size=50), target, target.w0)
    g = torch.Generator().manual_seed(0)
    state = kernel.init(target.w0.expand(3, -1).clone(), target, g)
    _, info = kernel.run(state, target, g, 4)
    assert float((info.loss - info.scalars["center_loss"]).abs().max()) < 1e-9


def test_a_full_batch_kernel_is_left_unpaired():
    import samplers

    target = landscapes.make("tanh", n=500, device="cpu", dtype="float64")
    kernel = llc.Paired(samplers.make("sgld", step_size=1e-6), target, target.w0)
    g = torch.Generator().manual_seed(0)
    _, info = kernel.run(kernel.init(target.w0[None], target, g), target, g, 3)
    assert "center_loss" not in info.scalars and kernel.center_losses is None
