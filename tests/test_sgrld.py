"""SGRLD's five metrics (Yu et al.) against dense linear algebra, exact reductions and the
paper's funnel finding.

The tests of docs/methods/sgrld.md: 1. the Monge and Shampoo algebra of a step against dense
inverses and roots (numpy, float64); 2. Monge at alpha2 = 0 is SGLD bit for bit, and Shampoo on a
vector is full-matrix RMSprop (an independent numpy loop); 4. with the metric frozen (Gamma = 0) the
sampled variance of N(0, I) is 1, while live adaptive metrics keep their documented Gamma bias; 5.
the funnel protocol (32 chains x 2e5 steps, 10% burn-in) against N(0, 80).
"""

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from scipy import linalg, stats

import landscapes
import samplers
from samplers.sgrld import monge_coefficients
from studies import digits, funnel


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def one_step(kernel, target, state, xi):
    return kernel.step(state, target, {"xi": xi})[0].position - state.position


def dense_root(matrix, power):
    lam, q = np.linalg.eigh(matrix)
    return (q * lam**power) @ q.T


# --- 1. the algebra of one step ---------------------------------------------------------------


@pytest.mark.parametrize("alpha2", [0.0, 0.1, 1.0])
def test_a_monge_step_applies_the_dense_inverse_and_inverse_root_of_its_metric(alpha2):
    target = landscapes.make(
        "gaussian", dim=7, scales=(0.5, 2.0, 1, 1, 1, 0.7, 1.3), rotate=True, seed=3,
        device="cpu", dtype="float64",
    )  # fmt: skip
    h = 1e-2
    kernel = samplers.make("sgrld", metric="monge", alpha2=alpha2, decay=0.0, step_size=h)
    w = torch.randn(3, 7, generator=gen(1), dtype=torch.float64)
    state = kernel.init(w, target, gen())
    xi = torch.randn(3, 7, generator=gen(2), dtype=torch.float64)
    drift = one_step(kernel, target, state, torch.zeros_like(xi))
    noise = one_step(kernel, target, state, xi) - drift
    for c in range(3):
        g = target.grad(w[c : c + 1])[0].numpy()  # decay 0: m is this gradient
        metric = np.eye(7) + alpha2 * np.outer(g, g)
        np.testing.assert_allclose(drift[c], -h * np.linalg.solve(metric, g), rtol=0, atol=1e-12)
        root = dense_root(metric, -0.5)
        np.testing.assert_allclose(noise[c], math.sqrt(2 * h) * root @ xi[c].numpy(), atol=1e-12)
        np.testing.assert_allclose(root @ root, np.linalg.inv(metric), atol=1e-12)


def test_monge_coefficients_are_the_papers_and_tend_to_the_small_norm_guard():
    alpha2 = 0.7
    norm2 = torch.tensor([1e-3, 0.1, 1.0, 30.0], dtype=torch.float64)
    f_inv, f_half = monge_coefficients(norm2, alpha2)
    np.testing.assert_allclose(f_inv, -alpha2 / (1 + alpha2 * norm2), rtol=1e-14)
    paper = (1 / np.sqrt(1 + alpha2 * norm2.numpy()) - 1) / norm2.numpy()
    np.testing.assert_allclose(f_half, paper, rtol=1e-9)
    tiny = monge_coefficients(torch.tensor([0.0, 1e-20, 1e-13], dtype=torch.float64), alpha2)[1]
    np.testing.assert_allclose(tiny, -alpha2 / 2, rtol=1e-12)  # the README's guard value


def test_a_shampoo_step_is_the_kronecker_root_in_row_major_order_and_leaves_biases_alone():
    target = landscapes.make("mlp", dataset="moons", hidden_sizes=(3,), device="cpu",
                             dtype="float64")  # fmt: skip
    h = 1e-3
    kernel = samplers.make(
        "sgrld", metric="shampoo", decay=1.0, epsilon=0.0, update_every=1, step_size=h,
        nbeta=target.n,
    )  # fmt: skip
    w = target.initial(gen(1), 2)
    state = kernel.init(w, target, gen())
    rng = np.random.default_rng(0)

    def spd(m):
        a = rng.normal(size=(m, m))
        return a @ a.T + 0.5 * np.eye(m)

    # decay 1 freezes the factors at these matrices; the roots are recomputed from them
    factors = [spd(3), spd(2), spd(2), spd(3)]  # layers.0.weight (3, 2), layers.1.weight (2, 3)
    as_tensor = lambda m: torch.tensor(m).expand(2, *m.shape).clone()  # noqa: E731
    state.factors = tuple(as_tensor(m) for m in factors)
    xi = torch.randn(2, target.dim, generator=gen(2), dtype=torch.float64)
    drift = one_step(kernel, target, state, torch.zeros_like(xi))
    noise = one_step(kernel, target, state, xi) - drift
    grad = target.grad(w)  # g = grad U / n with U = n L
    n = target.n
    parts = lambda x: target.unflatten(x)  # noqa: E731
    for c in range(2):
        for name, (h1, h2) in (("layers.0.weight", factors[:2]), ("layers.1.weight", factors[2:])):
            g = parts(grad)[name][c].numpy()
            dense = np.kron(dense_root(h1, -0.25), dense_root(h2, -0.25))  # (H1 (x) H2)^-1/4
            expect = -h * n * (dense @ g.reshape(-1)).reshape(g.shape)
            np.testing.assert_allclose(parts(drift)[name][c], expect, rtol=1e-9, atol=1e-14)
            half = np.kron(dense_root(h1, -0.125), dense_root(h2, -0.125))  # exponent -1/8
            x = parts(xi)[name][c].numpy()
            expect = math.sqrt(2 * h) * (half @ x.reshape(-1)).reshape(x.shape)
            np.testing.assert_allclose(parts(noise)[name][c], expect, rtol=1e-9, atol=1e-14)
        for name in ("layers.0.bias", "layers.1.bias"):  # rank 1: the identity metric
            np.testing.assert_allclose(parts(drift)[name][c], -h * n * parts(grad)[name][c])
            np.testing.assert_allclose(parts(noise)[name][c], math.sqrt(2 * h) * parts(xi)[name][c])


# --- 2. reductions ----------------------------------------------------------------------------


def trajectory(name, target, steps=300, chains=4, **params):
    kernel = samplers.make(name, **params)
    g = gen(5)
    state = kernel.init(target.initial(g, chains) + 0.5, target, g)
    return kernel.run(state, target, g, steps, positions=True)[1].position


def test_monge_at_alpha2_zero_is_sgld_bit_for_bit():
    funnel = landscapes.make("softplus-funnel", gradient_noise=1.0, device="cpu")
    monge = trajectory("sgrld", funnel, metric="monge", alpha2=0.0, step_size=3e-3)
    sgld = trajectory("sgld", funnel, step_size=6e-3)  # SGLD's eps is 2h
    assert torch.equal(monge, sgld)
    net = landscapes.make("mlp", dataset="moons", hidden_sizes=(4,), device="cpu")
    monge = trajectory("sgrld", net, 50, metric="monge", alpha2=0.0, batch_size=32)
    identity = trajectory("sgrld", net, 50, metric="identity", batch_size=32)
    assert torch.equal(monge, identity)


def test_shampoo_on_a_network_without_matrices_is_the_identity_metric():
    """A network whose parameters are all vectors (tanh: a, b) has no Kronecker factors, and
    shampoo leaves vectors unpreconditioned: the identity metric (it crashed before)."""
    net = landscapes.make("tanh", n=200, device="cpu")
    shampoo = trajectory("sgrld", net, 20, metric="shampoo", batch_size=16, step_size=1e-4)
    identity = trajectory("sgrld", net, 20, metric="identity", batch_size=16, step_size=1e-4)
    assert torch.equal(shampoo, identity)


def test_shampoo_on_a_vector_is_full_matrix_rmsprop():
    target = landscapes.make(
        "gaussian", dim=3, scales=(0.5, 1.0, 2.0), rotate=True, seed=1, device="cpu",
        dtype="float64", gradient_noise=1.0,
    )  # fmt: skip
    h, decay, eps, steps, chains = 3e-3, 0.99, 1e-6, 200, 2
    kernel = samplers.make("sgrld", metric="shampoo", step_size=h, decay=decay, epsilon=eps)
    g = gen(7)
    w0 = target.exact_sample(g, chains)
    noise = kernel.noise_for(kernel.init(w0, target, g), target, gen(8))
    draws = noise.take(steps)  # the draws the kernel reads, kept for the numpy loop
    state = kernel.init(w0, target, g)
    got = kernel.eager(state, target, draws, positions=True)[1].position
    precision = target.precision.numpy()
    for c in range(chains):
        w, big_h = w0[c].numpy().copy(), eps * np.eye(3)
        for t in range(steps):
            grad = precision @ w + draws["gradient_noise"][t, c].numpy()
            big_h = decay * big_h + (1 - decay) * np.outer(grad, grad)
            lam, q = np.linalg.eigh(big_h)
            lam = np.maximum(lam, 0) + eps * lam[-1]
            quarter = (q * lam**-0.25) @ q.T  # H^-1/4, squared for H^-1/2
            w = (
                w
                - h * quarter @ quarter @ grad
                + math.sqrt(2 * h) * quarter @ draws["xi"][t, c].numpy()
            )
            np.testing.assert_allclose(got[t, c].numpy(), w, rtol=1e-9, atol=1e-12)


# --- 4. the noise scale with a frozen metric, and the documented Gamma bias --------------------


def stationary_variance(target, kernel, chains, steps, burn, state_edit=None, seed=0):
    g = gen(seed)
    state = kernel.init(target.exact_sample(g, chains), target, g)
    if state_edit:
        state = state_edit(state)
    state, info = kernel.run(state, target, g, steps, positions=True)
    assert not state.diverged.any()
    x = info.position[burn:]
    # E[x^2] (the mean is 0) per chain: unbiased however short the chains are against their
    # autocorrelation, and chains are independent, so their spread gives the SE
    per_chain = (x * x).mean((0, 2))
    return float(per_chain.mean()), float(per_chain.std() / math.sqrt(chains))


@pytest.mark.parametrize("metric", ["monge", "shampoo", "rmsprop"])
def test_a_frozen_metric_samples_the_target_variance(metric):
    """decay = 1 freezes G (so Gamma = 0): N(0, I_2), exact gradients, h = 1e-2 must give
    variance 1 +- 0.06 (docs/methods/sgrld.md), in a metric far from the identity; 256 chains
    x 6000 steps from exact draws (the check's 32 x 2e4, in chains: SE < 0.02 asserted)."""
    target = landscapes.make("gaussian", dim=2, device="cpu", dtype="float64")
    kernel = samplers.make("sgrld", metric=metric, step_size=1e-2, decay=1.0, alpha2=1.0,
                           epsilon=0.0)  # fmt: skip
    stat = {  # G = I + m m^T; H^1/2; diag(sqrt V): condition numbers 6, ~10 and 6.7
        "monge": [1.0, 2.0],
        "shampoo": [[2.0, 0.9], [0.9, 0.6]],
        "rmsprop": [4.0, 0.09],
    }[metric]
    stat = torch.tensor(stat, dtype=torch.float64)
    var, se = stationary_variance(
        target, kernel, 256, 6000, 1000, lambda s: replace(s, stat=stat.expand(256, *stat.shape))
    )
    assert abs(var - 1) < 0.06 and se < 0.02, (var, se)


# docs/methods/sgrld.md (measured in numpy): N(0, I_2) at h = 0.01 with exact
# gradients, and at the funnel's settings with N(0, 1) gradient noise
BIAS = [
    ("rmsprop", 0.01, {"decay": 0.99, "epsilon": 1e-8}, 0.0, 1.33),
    ("shampoo", 0.01, {"decay": 0.99}, 0.0, 1.6),
    ("monge", 0.01, {"decay": 0.9, "alpha2": 0.1}, 0.0, 1.3),
    ("rmsprop", 0.0025, {}, 1.0, 1.32),
    ("shampoo", 0.003, {}, 1.0, 1.12),
    ("monge", 0.003, {"alpha2": 0.1}, 1.0, 1.46),
]


def bias_run(case: int) -> tuple[float, float]:
    """BIAS[case]'s stationary variance and its SE (module-level: run in a worker process)."""
    metric, h, params, noise, _ = BIAS[case]
    target = landscapes.make("gaussian", dim=2, gradient_noise=noise, device="cpu", dtype="float64")
    kernel = samplers.make("sgrld", metric=metric, step_size=h, **params)
    return stationary_variance(target, kernel, 256, 6000, 2000)


@pytest.fixture(scope="module")
def bias_runs() -> list[tuple[float, float]]:
    return [bias_run(i) for i in range(len(BIAS))]


@pytest.mark.slow
@pytest.mark.parametrize(
    "case", range(len(BIAS)), ids=[f"{b[0]}-{b[1]:g}-noise{b[3]:g}" for b in BIAS]
)
def test_live_adaptive_metrics_keep_their_gamma_bias(case, bias_runs):
    metric, h, params, _, documented = BIAS[case]
    kernel = samplers.make("sgrld", metric=metric, step_size=h, **params)
    var, se = bias_runs[case]
    assert abs(var / documented - 1) < 0.15, (var, se)
    assert var - 1 > 3 * se  # a bias, not noise
    assert "dropped_gamma" in kernel.caveats


@pytest.mark.slow
def test_monge_at_alpha2_one_has_heavy_tails_without_gamma():
    """For d >= 2 the radial restoring drift cancels at large r: variance 12-16 (reference)."""
    target = landscapes.make("gaussian", dim=2, device="cpu", dtype="float64")
    kernel = samplers.make("sgrld", metric="monge", step_size=0.01, decay=0.9, alpha2=1.0)
    var, _ = stationary_variance(target, kernel, 32, 20_000, 2000)
    assert 12 * 0.85 < var < 16 * 1.15


def test_identity_has_no_gamma_caveat_and_the_run_warns_for_the_others():
    assert samplers.make("sgrld", metric="identity").caveats == {}
    assert "Gamma" in samplers.make("sgrld", metric="wenzel").caveats["dropped_gamma"]


# --- 5. the funnel ----------------------------------------------------------------------------


def funnel_run(metric, chains=funnel.CHAINS, steps=funnel.STEPS):
    """Yu et al.'s funnel protocol, Sec. 4.2 (studies.funnel: the paper's step sizes and settings,
    N(0, 1) gradient noise, start (1, 1)), compiled as a long run is."""
    target = landscapes.make("softplus-funnel", **funnel.TARGET["params"], device="cpu")
    kernel = samplers.make("sgrld", **funnel.PROTOCOL[metric])
    g = gen(1)
    state = kernel.init(torch.tensor([funnel.START] * chains), target, g)
    state, info = kernel.run(state, target, g, steps, positions=True, compiled=True)
    assert not state.diverged.any()
    kept = info.position[int(steps * funnel.BURN_FRACTION) :].numpy()
    return funnel.tails(kept[..., 1], kept[..., 0])


@pytest.mark.slow
def test_the_funnel_finding_identity_misses_the_neck_and_the_others_reach_part_way():
    """32 chains x 2e5 steps, 10% burn-in (docs/methods/sgrld.md): Identity never gets below
    v = -10; RMSprop, Monge and Shampoo do (P > 0.03) and are closer in KS; Monge goes deepest;
    none reaches the true P(v < -10) = 0.132."""
    runs = {metric: funnel_run(metric) for metric in funnel.PROTOCOL}
    p10, low, ks = "P(v<-10)", "v min", "KS vs N(0,80)"
    identity = runs.pop("identity")
    assert identity[p10] < 0.005 and identity[low] > -10 and identity[ks] > 0.15, identity
    truth = stats.norm.cdf(-10 / math.sqrt(80))
    assert truth == pytest.approx(0.132, abs=1e-3)
    for metric, run in runs.items():
        assert 0.03 < run[p10] < truth, (metric, run)
        assert run[ks] < identity[ks] - 0.05, (metric, run)
    assert runs["monge"][low] < -20
    assert all(runs["monge"][low] < run[low] for m, run in runs.items() if m != "monge")


@pytest.mark.parametrize("metric", ["rmsprop", "wenzel", "monge", "shampoo"])
def test_a_nan_chain_is_frozen_and_the_others_are_untouched_in_every_metric(metric):
    """On a network, where shampoo's Kronecker factors of a NaN chain would make eigh refuse
    the whole batch, and wenzel's layer scales mix a chain's coordinates."""
    target = landscapes.make("mlp", dataset="moons", hidden_sizes=(4,), device="cpu",
                             dtype="float64")  # fmt: skip
    kernel = samplers.make("sgrld", metric=metric, step_size=1e-3, batch_size=16, update_every=2)
    x0 = target.initial(gen(0), 4)
    runs = []
    for poison in (False, True):
        g = gen(1)
        state = kernel.init(x0, target, g)
        if poison:
            state.position[2, 1] = math.nan
        runs.append(kernel.run(state, target, g, 6))
    (clean, _), (dirty, info) = runs
    assert info.diverged[:, 2].all() and not info.diverged[:, [0, 1, 3]].any()
    assert torch.equal(dirty.position[[0, 1, 3]], clean.position[[0, 1, 3]])


def test_update_every_refreshes_shampoo_roots_only_on_schedule():
    target = landscapes.make("mlp", dataset="moons", hidden_sizes=(3,), device="cpu")
    kernel = samplers.make("sgrld", metric="shampoo", update_every=3, batch_size=16)
    g = gen()
    state = kernel.init(target.initial(g, 2), target, g)
    noise = kernel.noise_for(state, target, g)
    seen = []
    for _ in range(7):
        state = kernel.step(state, target, {k: v[0] for k, v in noise.take(1).items()})[0]
        seen.append(state.roots[0].clone())
    changed = [not torch.equal(a, b) for a, b in itertools.pairwise(seen)]
    # steps 0, 3, 6 refresh: the roots change going into steps 3 and 6 only
    assert changed == [False, False, True, False, False, True]
    assert not kernel.compilable  # the schedule reads the host's step counter


def test_linalg_helpers_agree_with_scipy():
    a = np.array([[2.0, 0.3], [0.3, 0.5]])
    np.testing.assert_allclose(dense_root(a, -0.5), linalg.fractional_matrix_power(a, -0.5))


# --- 6. the digits MLP (Yu et al. Sec. 4.3, at the 2-core machine's scale) ---------------------


@pytest.mark.slow
@pytest.mark.parametrize("prior", digits.PRIORS)
def test_digits_every_metric_at_its_tuned_rate_classifies_and_its_ensemble_beats_its_draws(prior):
    """Accuracy > 0.9 for each metric at its tuned learning rate, the ensemble's log p above
    the mean single draw's (Jensen: a check of the logsumexp), and Monge at alpha2 = 0 giving
    identity's numbers. No ordering of the metrics is asserted at this scale
    (docs/methods/sgrld.md: not established)."""
    net = digits.target(prior)
    results = {}
    for metric in digits.METRICS:
        params = {"learning_rate": digits.TUNED[prior][metric]["learning_rate"]}
        out = digits.run(net, prior, metric, seed=0, steps=700)
        assert out["diverged"] == 0, (metric, out)
        assert out["accuracy"] > 0.9, (metric, params, out)
        assert out["log_p"] >= out["mean_single_log_p"], (metric, out)
        results[metric] = out
    if prior == "gaussian":  # the tuned alpha2 is 0 there
        assert digits.TUNED[prior]["monge"] == {**digits.TUNED[prior]["identity"], "alpha2": 0.0}
        same = ("log_p", "accuracy", "ece", "confidence", "curvature")
        assert [results["monge"][k] for k in same] == [results["identity"][k] for k in same]
