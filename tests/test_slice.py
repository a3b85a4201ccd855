"""Slice sampling, elliptical slice sampling and Gibbs against exact laws.

- slice and gibbs on the teaching potentials: 2000 chains started at exact draws stay exactly
  distributed (KS of each coordinate against 20,000 fresh exact draws), and every chain moves.
- gibbs's exact conditionals on Gaussians (rotated 2-D with nbeta and localization, 4-D):
  mean and covariance within the Monte Carlo error of the chains, and one sweep by hand.
- elliptical slice where the posterior is known in closed form (a Gaussian potential under
  localization; normal-crossing's sum form with its Gaussian prior), and on the banana under
  localization against random-walk Metropolis; the refusal without a Gaussian part.
- a NaN start is frozen and flagged, the traced paths, the evaluation count and the cap,
  identical draws from identical seeds.
"""

import math

import pytest
import torch
from scipy import stats

import landscapes
import samplers
from landscapes import ParamError
from samplers.gibbs import Gibbs
from samplers.slice import PATH_POINTS, EllipticalSlice, Slice, gaussian_prior_std

C = 2000
REFERENCE = 20_000
TEACHING = ["banana", "donut", "mixture", "squiggle"]


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def potential(name, **params):
    return landscapes.make(name, dtype="float64", **params)


def rotated_gaussian(scales=(0.6, 1.4)):
    return potential("gaussian", dim=len(scales), scales=scales, rotate=True, seed=4)


def assert_moments(x, mean, cov, z=5.0):
    """Sample mean and covariance of C independent chains within z standard errors: se(mean_i)
    = sqrt(S_ii / C), se(S_ij) = sqrt((S_ii S_jj + S_ij^2) / C)."""
    n = x.shape[0]
    se_mean = (torch.diagonal(cov) / n).sqrt()
    assert ((x.mean(0) - mean).abs() < z * se_mean).all(), (x.mean(0), mean, se_mean)
    var = torch.diagonal(cov)
    se_cov = ((var[:, None] * var[None, :] + cov**2) / n).sqrt()
    sample = torch.cov(x.T)
    assert ((sample - cov).abs() < z * se_cov).all(), (sample, cov, se_cov)


def assert_ks(x, reference):
    for i in range(x.shape[1]):
        ks = stats.ks_2samp(x[:, i].numpy(), reference[:, i].numpy())
        assert ks.pvalue > 1e-4, (i, ks)


# --- exactness on the teaching potentials ---------------------------------------------------


@pytest.mark.parametrize("kernel", [Slice, Gibbs])
@pytest.mark.parametrize("name", TEACHING)
def test_marginals_match_exact_draws(kernel, name):
    """Chains started at exact draws stay distributed as the target: the final states of C
    independent chains are C independent draws, so the KS bound uses n = C exactly. Every
    chain moved, no search reached its cap, and the loss reported is L at the kept point."""
    target = potential(name)
    k = kernel()
    g = gen(7)
    x0 = target.exact_sample(g, C)
    state, info = k.run(k.init(x0, target, g), target, g, 40)
    assert not state.diverged.any()
    assert (state.position != x0).any(-1).all()
    assert (info.scalars["capped"] == 0).all() and (info.scalars["evaluations"] >= 1).all()
    assert_ks(state.position, target.exact_sample(gen(8), REFERENCE))
    torch.testing.assert_close(info.loss[-1], target.loss(state.position), rtol=0, atol=0)


# --- gibbs: exact conditionals on Gaussians -------------------------------------------------


def test_gibbs_converges_to_a_rotated_gaussian_under_nbeta_and_localization():
    """U = (nbeta/2) w^T P w + (gamma/2)|w - c|^2 with every chain started at c: the law is
    N(Q^-1 gamma c, Q^-1), Q = nbeta P + gamma I, reached from the start in 60 sweeps (the
    slowest mode contracts by its squared correlation, < 0.5, a sweep). One evaluation a step:
    the conditionals are drawn, not searched."""
    target = rotated_gaussian()
    nbeta, gamma = 2.0, 1.5
    c = torch.tensor([1.5, -1.0], dtype=torch.float64)
    q = nbeta * target.precision + gamma * torch.eye(2, dtype=torch.float64)
    cov = torch.linalg.inv(q)
    k = Gibbs(nbeta=nbeta, localization=gamma)
    g = gen(1)
    state, info = k.run(k.init(c.expand(2 * C, 2).clone(), target, g), target, g, 60)
    assert (info.scalars["evaluations"] == 1).all()
    assert_moments(state.position, cov @ (gamma * c), cov)
    reference = torch.randn(REFERENCE, 2, generator=gen(2), dtype=torch.float64)
    assert_ks(state.position, cov @ (gamma * c) + reference @ torch.linalg.cholesky(cov).T)


def test_gibbs_keeps_a_4d_gaussian():
    target = rotated_gaussian((0.5, 1.0, 1.5, 2.0))
    k = Gibbs()
    g = gen(3)
    x0 = target.exact_sample(g, 2 * C)
    state, _ = k.run(k.init(x0, target, g), target, g, 20)
    assert (state.position != x0).all()
    assert_moments(state.position, target.mean, target.cov)


def test_gibbs_sweep_by_hand():
    """One sweep from fixed normals, against the conditional mean and variance written out:
    w_i <- mu_i - (1/Q_ii) sum_{j != i} Q_ij (w_j - mu_j) + xi_i / sqrt(Q_ii), in turn."""
    target = rotated_gaussian((0.5, 1.0, 2.0))
    k = Gibbs(nbeta=1.5)
    w = target.exact_sample(gen(4), 5)
    state = k.init(w, target, gen(4))
    xi = torch.randn(5, 3, generator=gen(5), dtype=torch.float64)
    new, info = k.step(state, target, {"xi": xi})
    q, mu = 1.5 * target.precision, target.mean
    want = w.clone()
    for i in range(3):
        others = [j for j in range(3) if j != i]
        shift = (want[:, others] - mu[others]) @ q[others, i]
        want[:, i] = mu[i] - shift / q[i, i] + xi[:, i] / q[i, i].sqrt()
    torch.testing.assert_close(new.position, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(info.loss, target.loss(want), rtol=1e-12, atol=1e-12)


# --- elliptical slice -----------------------------------------------------------------------


def test_elliptical_slice_on_a_gaussian_potential_under_localization():
    """The Gaussian potential's exp(-L) is the likelihood and the pull (gamma/2)|w - c|^2 the
    Gaussian: the posterior is N(Q^-1 gamma c, Q^-1), Q = P + gamma I, reached from c."""
    target = rotated_gaussian()
    gamma = 2.0
    c = torch.tensor([1.0, -0.5], dtype=torch.float64)
    cov = torch.linalg.inv(target.precision + gamma * torch.eye(2, dtype=torch.float64))
    mean = cov @ (gamma * c)
    k = EllipticalSlice(localization=gamma)
    g = gen(11)
    state, info = k.run(k.init(c.expand(2 * C, 2).clone(), target, g), target, g, 60)
    assert not state.diverged.any() and (info.scalars["capped"] == 0).all()
    assert_moments(state.position, mean, cov)
    reference = torch.randn(REFERENCE, 2, generator=gen(12), dtype=torch.float64)
    assert_ks(state.position, mean + reference @ torch.linalg.cholesky(cov).T)
    torch.testing.assert_close(info.loss[-1], target.loss(state.position), rtol=0, atol=0)


@pytest.mark.parametrize("gamma", [0.0, 3.0])
def test_elliptical_slice_with_the_target_s_own_gaussian_prior(gamma):
    """normal-crossing, sum form, k = (1, 1): U = n (w1^2 + w2^2) + |w|^2 / (2 s^2) +
    (gamma/2)|w - c|^2, so each coordinate is N(gamma c_i / p, 1 / p), p = 2n + 1/s^2 + gamma;
    the ellipses' Gaussian is the prior N(0, s^2 I) times the pull. With gamma = 0 the chains
    start at exact draws, with gamma > 0 all at c."""
    n, s = 2, 1.5
    target = potential("normal-crossing", k=(1, 1), form="sum", n=n, prior_std=s)
    torch.testing.assert_close(gaussian_prior_std(target), torch.full((2,), s, dtype=torch.float64))
    precision = 2 * n + 1 / s**2 + gamma
    c = torch.tensor([0.8, -0.4], dtype=torch.float64)
    mean = gamma * c / precision
    k = EllipticalSlice(localization=gamma)
    g = gen(13)
    if gamma:
        x0 = c.expand(C, 2).clone()
    else:
        x0 = torch.randn(C, 2, generator=g, dtype=torch.float64) / math.sqrt(precision)
    state, info = k.run(k.init(x0, target, g), target, g, 30)
    assert (state.position != x0).all() and (info.scalars["capped"] == 0).all()
    assert_moments(state.position, mean, torch.eye(2, dtype=torch.float64) / precision)
    for i in range(2):
        law = stats.norm(loc=float(mean[i]), scale=precision**-0.5)
        ks = stats.kstest(state.position[:, i].numpy(), law.cdf)
        assert ks.pvalue > 1e-4, (i, ks)


def test_elliptical_slice_agrees_with_random_walk_metropolis_on_the_banana():
    """A non-Gaussian likelihood: the banana under the pull (gamma/2)|w - w0|^2 around each
    chain's own start w0 (exact banana draws). Elliptical slice (60 steps) and random-walk
    Metropolis (400 steps of 0.5, an independent exact kernel) from the same starts give the
    same mixture of the chains' posteriors: KS between the two sets of C chains."""
    target, gamma = potential("banana"), 1.0
    x0 = target.exact_sample(gen(14), C)
    ess = EllipticalSlice(localization=gamma)
    g = gen(15)
    a, _ = ess.run(ess.init(x0, target, g), target, g, 60)
    rwmh = samplers.make("rwmh", step_size=0.5, localization=gamma)
    g = gen(16)
    b, info = rwmh.run(rwmh.init(x0, target, g), target, g, 400)
    assert 0.2 < info.accepted.mean() < 0.9
    for i in range(2):
        ks = stats.ks_2samp(a.position[:, i].numpy(), b.position[:, i].numpy())
        assert ks.pvalue > 1e-4, (i, ks)


def test_elliptical_slice_refuses_a_target_without_a_gaussian_part():
    banana = potential("banana")
    x0 = banana.exact_sample(gen(0), 4)
    with pytest.raises(ParamError, match="no Gaussian prior") as error:
        EllipticalSlice().init(x0, banana, gen(0))
    assert error.value.field == "elliptical-slice.localization"
    assert "localization > 0" in str(error.value)
    EllipticalSlice(localization=1.0).init(x0, banana, gen(0))  # a pull is a Gaussian part


def test_gaussian_priors_of_networks():
    """The MLP's Gaussian prior is N(0, sigma_t^2) per tensor: its energy differences are
    |w / std|^2 / 2 with ``gaussian_prior_std``; a horseshoe is not Gaussian (refused without
    a pull, its energy then in Phi). Elliptical slice runs on the Gaussian-prior MLP."""
    mlp = potential("mlp", dataset="moons", hidden_sizes=(3,), n=40, prior="gaussian")
    std = gaussian_prior_std(mlp)
    w = torch.randn(5, mlp.dim, generator=gen(1), dtype=torch.float64)
    energy = mlp.prior_energy(w) - mlp.prior_energy(torch.zeros_like(w))
    torch.testing.assert_close(energy, 0.5 * ((w / std) ** 2).sum(-1), rtol=1e-12, atol=1e-12)
    k = EllipticalSlice()
    g = gen(2)
    x0 = std * torch.randn(8, mlp.dim, generator=g, dtype=torch.float64)
    state, info = k.run(k.init(x0, mlp, g), mlp, g, 5)
    assert not state.diverged.any() and (state.position != x0).all()
    torch.testing.assert_close(info.loss[-1], mlp.loss(state.position), rtol=0, atol=0)
    horseshoe = potential("mlp", dataset="moons", hidden_sizes=(3,), n=40, prior="horseshoe")
    assert gaussian_prior_std(horseshoe) is None
    with pytest.raises(ParamError, match="no Gaussian prior"):
        EllipticalSlice().init(horseshoe.initial(gen(3), 2), horseshoe, gen(3))


# --- what every kernel owes the run loop ----------------------------------------------------

KERNELS = {
    "slice": lambda: Slice(),
    "gibbs": lambda: Gibbs(),
    "gibbs-gaussian": lambda: Gibbs(),
    "elliptical-slice": lambda: EllipticalSlice(localization=1.0),
}


def target_for(case):
    return rotated_gaussian() if case == "gibbs-gaussian" else potential("banana")


@pytest.mark.parametrize("case", sorted(KERNELS))
def test_a_nan_chain_is_frozen_and_flagged_and_the_others_are_untouched(case):
    target, kernel = target_for(case), KERNELS[case]()
    x0 = target.exact_sample(gen(0), 6)
    runs = []
    for poison in (False, True):
        g = gen(1)
        state = kernel.init(x0, target, g)
        if poison:  # as tests/test_kernels.py does it: poisoned after a clean start
            state.position[2, 1] = math.nan
        state, info = kernel.run(state, target, g, 20)
        runs.append((state, info))
    (clean, _), (dirty, info) = runs
    assert info.diverged[:, 2].all() and not info.diverged[:, [0, 1, 3, 4, 5]].any()
    assert torch.isnan(dirty.position[2, 1]) and dirty.position[2, 0] == x0[2, 0]
    others = [0, 1, 3, 4, 5]
    assert torch.equal(dirty.position[others], clean.position[others])
    assert (
        torch.isnan(info.loss[:, 2]).all() and torch.isnan(info.scalars["evaluations"][:, 2]).all()
    )
    x0[2, 1] = math.nan  # a start that is not finite is flagged by ``init``
    assert kernel.init(x0, target, gen(1)).diverged.tolist() == [0, 0, 1, 0, 0, 0]


@pytest.mark.parametrize("case", sorted(KERNELS))
def test_identical_seeds_give_identical_draws(case):
    target, kernel = target_for(case), KERNELS[case]()
    x0 = target.exact_sample(gen(0), 64)
    out = []
    for _ in range(2):
        g = gen(5)
        _, info = kernel.run(kernel.init(x0, target, g), target, g, 10, positions=True)
        out.append(info.position)
    assert torch.equal(out[0], out[1])


def traced(kernel, target, chains=16, steps=4, seed=6):
    g = gen(seed)
    x0 = target.exact_sample(g, chains)
    state = kernel.init(x0, target, g)
    noise = kernel.noise_for(state, target, g, most=steps)
    before = state.position
    state, info = kernel.eager(state, target, noise.take(steps), positions=True, trace=True)
    starts = torch.cat([before[None], info.position[:-1]])
    return starts, info


def last_points(path):
    """[T, C, P, d] -> the last finite point of each path [T, C, d], and checks the NaN padding
    is one block at the end."""
    finite = torch.isfinite(path).all(-1)  # [T, C, P]
    count = finite.sum(-1)
    assert torch.equal(finite, torch.arange(path.shape[2]) < count[..., None])
    index = (count - 1)[..., None, None].expand(*count.shape, 1, path.shape[-1])
    return path.gather(2, index)[:, :, 0]


@pytest.mark.parametrize("case", sorted(KERNELS))
def test_traced_paths_start_at_the_state_and_end_at_the_new_position(case):
    target, kernel = target_for(case), KERNELS[case]()
    starts, info = traced(kernel, target)
    path = info.path
    assert path.shape[:2] == info.proposal.shape[:2] and path.shape[-1] == 2
    assert path.shape[2] <= PATH_POINTS
    torch.testing.assert_close(path[:, :, 0], starts, rtol=0, atol=0)
    torch.testing.assert_close(info.proposal, info.position, rtol=0, atol=0)
    torch.testing.assert_close(last_points(path), info.position, rtol=0, atol=0)
    if case == "slice":  # the interval's ends, the trials and the new point on one line
        assert path.shape[2] == PATH_POINTS  # 3 + max_shrinks, cut to the animation's 33
        ends = path[:, :, 1:3]
        along = (ends - starts[:, :, None]) / (info.position - starts)[:, :, None]
        torch.testing.assert_close(along[..., 0], along[..., 1], rtol=1e-8, atol=1e-8)
        s = along[..., 0]  # L < 0 <= R in units of the move, which lies within [L, R]
        assert (s.min(-1).values <= 1).all() and (s.max(-1).values >= 1).all()
    if case.startswith("gibbs"):  # axis by axis: x moves, then y
        assert path.shape[2] == 3
        assert torch.equal(path[:, :, 1, 1], path[:, :, 0, 1])
        assert torch.equal(path[:, :, 2, 0], path[:, :, 1, 0])


def test_gibbs_spreads_a_long_sweep_over_the_path():
    """40 coordinates: the path keeps 33 points, the last one after the last coordinate."""
    target = potential("gaussian", dim=40)
    _, info = traced(Gibbs(), target, chains=3, steps=2)
    assert info.path.shape == (2, 3, PATH_POINTS, 40)
    torch.testing.assert_close(info.path[:, :, -1], info.position, rtol=0, atol=0)
    assert torch.isfinite(info.path).all()


def test_evaluations_grow_with_a_width_far_from_the_scale_and_the_cap_keeps_the_chain():
    """On N(0, I): a width near the scale costs fewest evaluations; 1e-3 steps out up to m
    times, 1e3 shrinks about log(1e3) times. With max_shrinks = 1 and width 1e3 most searches
    hit the cap, and each capped chain stays exactly where it was."""
    target = potential("gaussian", dim=2)
    x0 = target.exact_sample(gen(0), 500)
    cost = {}
    for width in (1e-3, 2.0, 1e3):
        k = Slice(width=width)
        g = gen(1)
        _, info = k.run(k.init(x0, target, g), target, g, 10)
        cost[width] = info.scalars["evaluations"].mean().item()
        assert (info.scalars["capped"] == 0).all()
    assert cost[2.0] < 6 and cost[1e-3] > 15 and cost[1e3] > 2 * cost[2.0], cost
    k = Slice(width=1e3, max_shrinks=1)
    g = gen(2)
    _, info = k.run(k.init(x0, target, g), target, g, 10, positions=True)
    capped = info.scalars["capped"] == 1
    starts = torch.cat([x0[None], info.position[:-1]])
    assert capped.float().mean() > 0.5
    assert torch.equal(info.position[capped], starts[capped])
    assert (info.position[~capped] != starts[~capped]).all()


@pytest.mark.parametrize(
    ("kernel", "params", "fragment"),
    [
        (Slice, {"width": 0.0}, "slice.width"),
        (Slice, {"max_shrinks": 0}, "slice.max_shrinks"),
        (Slice, {"max_steps_out": -1}, "slice.max_steps_out"),
        (Slice, {"step_size": 0.1}, "unknown parameter"),
        (EllipticalSlice, {"max_shrinks": 1001}, "elliptical-slice.max_shrinks"),
        (Gibbs, {"localization": -1.0}, "gibbs.localization"),
    ],
)
def test_bad_hyperparameters_name_the_field(kernel, params, fragment):
    with pytest.raises(ValueError) as error:
        kernel.SPEC.validate(params)
    assert fragment in str(error.value), str(error.value)


@pytest.mark.parametrize("kernel", [Slice, EllipticalSlice, Gibbs])
def test_registered_they_build_by_name_with_their_defaults(kernel, monkeypatch):
    """What the registry will do with them: ``samplers.make(name)`` validates and builds."""
    spec = kernel.SPEC
    monkeypatch.setitem(samplers.REGISTRY, spec.name, spec)
    built = samplers.make(spec.name)
    assert type(built) is kernel and built.max_shrinks == 50 and spec.acceptance is None
    assert spec.equation.startswith(r"\begin{aligned}") and spec.text
