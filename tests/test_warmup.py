"""Stan's warm-up (``step_size: auto``; samplers.warmup) against values derived without it: Stan's
documented window schedule, the step dual averaging must find for a known acceptance curve, the
true variances of a Gaussian, and exactness after the warm-up."""

import math

import pytest
import torch

import landscapes
import samplers
from runs import verdict
from runs.spec import RunSpec
from samplers.warmup import AdaptState, windows


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_windows_follow_stans_schedule():
    # Stan's manual (HMC algorithm parameters, "automatic parameter tuning"): 1000 warm-up
    # iterations are a 75-step buffer, windows of 25, 50, 100, 200 and 500 steps, a 50-step end
    assert windows(1000) == (75, 950, (99, 149, 249, 449, 949))
    assert windows(150) == (75, 100, (99,))  # 75 + 25 + 50: the buffers and one window
    # shorter: 15% / 75% / 10% (Stan's fallback), one window
    assert windows(100) == (15, 90, (89,))
    assert windows(10) == (10, 10, ())  # below 20: the step adapts, the metric does not


def test_dual_averaging_finds_the_step_of_a_known_acceptance_curve():
    """Acceptance exp(-eps) at step eps: the aim 0.8 is met at eps* = -log 0.8 = 0.2231."""
    kernel = samplers.make("hmc", step_size="auto", warmup=400, metric="unit")
    chains = 4
    w = torch.zeros(chains, 1, dtype=torch.float64)
    zeros = w.new_zeros(chains)
    state = AdaptState(
        position=w,
        center=w,
        diverged=torch.zeros(chains, dtype=torch.bool),
        U=zeros,
        grad=w.clone(),
        loss=zeros,
        log_step=zeros,
        inv_mass=torch.ones_like(w),
        count=zeros,
        accept_prob=zeros,
        s_bar=zeros,
        x_bar=zeros,
        mu=zeros + math.log(10.0),
        n_da=zeros,
        n_var=zeros,
        mean=torch.zeros_like(w),
        m2=torch.zeros_like(w),
    )
    for _ in range(400):
        state = kernel.adapted(state, state, torch.exp(-state.log_step.exp()))
    assert state.log_step.exp()[0].item() == pytest.approx(-math.log(0.8), rel=0.05)
    after = kernel.adapted(state, state, torch.zeros(chains, dtype=torch.float64))
    assert torch.equal(after.log_step, state.log_step)  # frozen after the warm-up


SCALES = tuple(float(s) for s in torch.logspace(0, 1, 10, dtype=torch.float64))  # sd 1..10


@pytest.mark.parametrize(
    "name, params, aim", [("hmc", {}, 0.8), ("nuts", {"max_depth": 8}, 0.8), ("mala", {}, 0.574)]
)
def test_adapted_metric_matches_the_true_variances_and_the_chain_stays_exact(name, params, aim):
    """A 10-D Gaussian of condition number 100 (sd 1..10, axis-aligned): the diagonal metric is
    the variance (within 10%), the acceptance after the warm-up is near the aim, and chains
    started at exact draws are still exactly distributed after the warm-up (their variance
    per coordinate within 4 standard errors; C independent chains)."""
    target = landscapes.make("gaussian", dim=10, scales=SCALES, dtype="float64")
    chains, warmup = 256, 600
    kernel = samplers.make(name, step_size="auto", warmup=warmup, **params)
    g = gen(1)
    state = kernel.init(target.exact_sample(g, chains), target, g)
    noise = kernel.noise_for(state, target, g)
    state, _ = kernel.run(state, target, noise, warmup)
    adapted = kernel.adaptation(state)
    assert adapted["finished"]
    true = torch.tensor(SCALES, dtype=torch.float64) ** 2
    ratio = torch.tensor(adapted["inverse_mass"], dtype=torch.float64) / true
    assert ((ratio - 1).abs() < 0.1).all(), ratio
    state, info = kernel.run(state, target, noise, 200)
    assert abs(float(info.accepted.mean()) - aim) < 0.12
    var = state.position.var(0)
    se = true * math.sqrt(2 / chains)
    assert ((var - true).abs() < 4 * se).all(), var / true


def adapted_states(name: str, adapt: str, starts: list, warmup: int, **params) -> list:
    """The states after a warm-up of ``warmup`` steps from each of ``starts`` (same seed)."""
    target = landscapes.make("gaussian", dim=10, scales=SCALES, dtype="float64")
    states = []
    for start in starts:
        kernel = samplers.make(name, step_size="auto", warmup=warmup, adapt=adapt, **params)
        g = gen(5)
        state = kernel.init(start, target, g)
        states.append(kernel.run(state, target, kernel.noise_for(state, target, g), warmup)[0])
    return states


@pytest.mark.parametrize("name, params", [("hmc", {}), ("nuts", {"max_depth": 6}), ("mala", {})])
def test_per_chain_adaptation_keeps_each_chain_to_itself(name, params):
    """adapt: chain (Stan's and BlackJAX's way): moving one chain's start changes no other
    chain's adapted step or metric, where pooled every chain's moves with it."""
    x0 = landscapes.make("gaussian", dim=10, scales=SCALES, dtype="float64").exact_sample(
        gen(4), 16
    )
    moved = x0.clone()
    moved[0] += 3.0
    alone, shifted = adapted_states(name, "chain", [x0, moved], 150, **params)
    assert torch.equal(alone.log_step[1:], shifted.log_step[1:])
    assert torch.equal(alone.inv_mass[1:], shifted.inv_mass[1:])
    assert not torch.equal(alone.log_step[0], shifted.log_step[0])
    assert alone.log_step.unique().numel() == 16  # each chain its own step
    pooled, pooled_moved = adapted_states(name, "pooled", [x0, moved], 150, **params)
    assert pooled.log_step.unique().numel() == 1
    assert not torch.equal(pooled.log_step[1:], pooled_moved.log_step[1:])


def test_per_chain_metrics_are_each_chains_window_variance():
    """HMC adapting each chain alone on the 10-D Gaussian (sd 1..10): each chain's metric is
    its own window's variance, so their mean over 128 chains is the true variance within 4
    of its standard errors over the chains, plus 3% for Stan's shrinkage by n / (n + 5) and
    the window's autocorrelation; the summary reports the median step and its range."""
    chains = 128
    x0 = landscapes.make("gaussian", dim=10, scales=SCALES, dtype="float64").exact_sample(
        gen(4), chains
    )
    (state,) = adapted_states("hmc", "chain", [x0], 400)
    true = torch.tensor(SCALES, dtype=torch.float64) ** 2
    each = state.inv_mass / true
    se = each.std(0) / math.sqrt(chains)
    assert ((each.mean(0) - 1).abs() < 4 * se + 0.03).all(), (each.mean(0), se)
    kernel = samplers.make("hmc", step_size="auto", warmup=400, adapt="chain")
    summary = kernel.adaptation(state)
    steps = state.log_step.exp()
    assert summary["adapt"] == "chain" and summary["step_size"] == float(steps.median())
    assert summary["step_range"] == [float(steps.min()), float(steps.max())]


@pytest.mark.parametrize("metric", ["diag", "dense"])
def test_nuts_forest_with_an_adapted_metric_equals_its_steps_one_at_a_time(metric):
    """After the warm-up NUTS grows its blocks as a forest (samplers.forest) with the adapted
    step and metric; the lockstep step, one row at a time, gives the same draws bit for bit."""
    target = landscapes.make(
        "gaussian", dim=3, scales=(0.5, 1.0, 4.0), rotate=True, dtype="float64"
    )
    kernel = samplers.make("nuts", step_size="auto", warmup=40, max_depth=6, metric=metric)
    g = gen(2)
    state = kernel.init(target.exact_sample(g, 24), target, g)
    state, _ = kernel.run(state, target, g, 40)
    assert state.inv_mass.shape == ((24, 3, 3) if metric == "dense" else (24, 3))
    assert not torch.allclose(state.inv_mass, torch.ones_like(state.inv_mass))
    rows = kernel.noise_for(state, target, gen(3), most=12).take(12)
    one, one_info = samplers.base.Kernel.eager(kernel, state, target, rows, positions=True)
    block, info = kernel.eager(state, target, rows, positions=True)
    same = {"rtol": 0, "atol": 0, "equal_nan": True}
    for name in ("position", "U", "grad", "loss", "diverged", "count"):
        torch.testing.assert_close(getattr(block, name), getattr(one, name), **same)
    torch.testing.assert_close(info.accepted, one_info.accepted, **same)


def test_a_numeric_step_keeps_the_kernel_as_it_was():
    kernel = samplers.make("hmc", step_size=0.2)
    target = landscapes.make("banana")
    state = kernel.init(target.exact_sample(gen(), 4), target, gen())
    assert not isinstance(state, AdaptState) and kernel.adaptation(state) is None
    with pytest.raises(ValueError, match=r"sgld\.step_size: must be a number"):
        samplers.make("sgld", step_size="auto")
    with pytest.raises(ValueError, match=r"hmc\.warmup: step_size auto adapts during a warm-up"):
        samplers.make("hmc", step_size="auto").init(target.exact_sample(gen(), 4), target, gen())


def spec(**over):
    base = {
        "target": {"name": "donut"},
        "sampler": {"name": "hmc", "params": {"step_size": "auto"}},
        "chains": 4,
        "steps": 100,
        "burn_in": 50,
    }
    return RunSpec.model_validate({**base, **over})


def test_the_spec_takes_the_warmup_from_the_burn_in_and_refuses_what_cannot_work():
    assert spec().sampler.params["warmup"] == 50
    cases = [
        ({"burn_in": 0}, "burn_in: must be at least 1 with sampler.params.step_size auto"),
        (
            {"sampler": {"name": "hmc", "params": {"step_size": "auto", "warmup": 80}}},
            "sampler.params.warmup: must be at most burn_in (50)",
        ),
        (
            {"sampler": {"name": "hmc", "params": {"step_size": 0.1, "warmup": 20}}},
            "sampler.params.warmup: applies only with step_size auto",
        ),
    ]
    for over, message in cases:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            spec(**over)


def test_the_verdict_of_an_auto_run_speaks_of_the_warm_up_not_a_smaller_step():
    run = spec().model_dump(mode="json")
    adapted = {"step_size": 0.3, "target_accept": 0.8, "finished": True}
    base = {"diverged_chains": 2, "adapted": adapted}
    found = verdict.judge(run, {**base, "acceptance": 0.55})["signals"]
    codes = {s["code"]: s for s in found}
    assert "smaller step_size" not in codes["diverged"]["try"]
    assert "target_accept" in codes["diverged"]["try"]
    assert codes["warmup"]["try"] == "a longer warm-up (burn_in 100)"
    settled = verdict.judge(run, {"adapted": adapted, "acceptance": 0.86})["signals"]
    assert "warmup" not in {s["code"] for s in settled}


@pytest.mark.slow  # ~10 s each on a quiet 2-core machine: 256 chains of d x d products
@pytest.mark.parametrize("name, dim, params", [("hmc", 10, {}), ("nuts", 4, {"max_depth": 6})])
def test_a_dense_metric_finds_a_rotated_covariance_and_the_chain_stays_exact(name, dim, params):
    """A rotated Gaussian of condition number 100 (10-D; 4-D for NUTS, whose batched trees
    cost d x d products a leaf): ``metric: dense`` estimates the full
    covariance (relative Frobenius error within 0.1; the pooled estimate from C x 575 correlated
    draws errs by ~0.02), the diagonal one cannot (its error is the off-diagonal mass, ~0.6), and
    chains started at exact draws stay exact after the warm-up (the variance of each coordinate
    along the covariance's eigenvectors within 4 standard errors)."""
    target = landscapes.make(
        "gaussian", dim=dim, condition=100.0, rotate=True, scales=(3.0,), dtype="float64"
    )
    cov = target.cov
    chains, warmup = 256, 600
    kernel = samplers.make(name, step_size="auto", warmup=warmup, metric="dense", **params)
    g = gen(4)
    state = kernel.init(target.exact_sample(g, chains), target, g)
    noise = kernel.noise_for(state, target, g)
    state, _ = kernel.run(state, target, noise, warmup)
    inv_mass = torch.tensor(kernel.adaptation(state)["inverse_mass"], dtype=torch.float64)
    assert inv_mass.shape == (dim, dim)
    error = torch.linalg.matrix_norm(inv_mass - cov) / torch.linalg.matrix_norm(cov)
    assert error < 0.1, error
    diagonal = torch.linalg.matrix_norm(torch.diag(torch.diag(cov)) - cov)
    assert diagonal / torch.linalg.matrix_norm(cov) > 0.3  # the case needs the dense metric
    state, info = kernel.run(state, target, noise, 200)
    assert float(info.accepted.mean()) > 0.6
    values, vectors = torch.linalg.eigh(cov)
    var = (state.position @ vectors).var(0)
    se = values * math.sqrt(2 / chains)
    assert ((var - values).abs() < 4 * se).all(), var / values


def test_mala_refuses_a_dense_metric_and_a_large_dense_one_is_refused():
    with pytest.raises(landscapes.ParamError, match="metric"):
        samplers.make("mala", step_size="auto", metric="dense")
    target = landscapes.make("gaussian", dim=201, dtype="float64")
    kernel = samplers.make("hmc", step_size="auto", warmup=10, metric="dense")
    with pytest.raises(landscapes.ParamError, match="d <= 200"):
        kernel.init(target.exact_sample(gen(), 2), target, gen())


def test_the_adapted_line_of_a_dense_metric_shows_its_variances_and_correlation():
    from studies.diagnostics import adapted_line

    summary = {
        "adapted": {
            "inverse_mass": [[1.0, 0.9], [0.9, 4.0]],  # correlation 0.9 / (1 x 2) = 0.45
            "metric": "dense",
            "step_size": 0.3,
            "warmup": 100,
            "target_accept": 0.8,
        }
    }
    assert "inverse metric (dense) 1, 4, correlations up to 0.45" in adapted_line(summary)
