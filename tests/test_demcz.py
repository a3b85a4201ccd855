"""DE-MC-Z (samplers/demcz.py) against exact answers.

- Chains started at exact draws (Z from them) stay distributed as the target: KS of each
  coordinate against fresh exact draws, with the default mix of moves and with snooker or mode
  jumps alone (a snooker without its Jacobian factor fails these: p < 1e-3).
- From a start that is not the target's, the mean and covariance of a rotated 4-D Gaussian.
- The DE move's acceptance on a d = 10 Gaussian is that of random-walk Metropolis with the
  proposal N(0, 2.38^2 / d Sigma) (z_r1 - z_r2 ~ N(0, 2 Sigma)), computed here independently.
- Z: its appends, its reservoir past `archive` rows, a NaN chain kept out of it, branches.
"""

import math
import os

import numpy as np
import pytest
import test_kernels
import torch
from scipy import stats

import landscapes
import samplers
from samplers.demcz import DEMCZ, Archive, distinct

DEVICE = os.environ.get("BASIN_TEST_DEVICE", "cpu")
C = 2000


def gen(seed=0):
    return torch.Generator(DEVICE).manual_seed(seed)


def potential(name, **params):
    return landscapes.make(name, device=DEVICE, dtype="float64", **params)


def gaussian(dim, scales, seed):
    return potential("gaussian", dim=dim, scales=scales, rotate=True, seed=seed)


CASES = [
    *[(name, {}) for name in ("banana", "donut", "mixture", "squiggle")],
    ("banana", {"snooker": 1.0}),
    ("mixture", {"snooker": 1.0}),
    ("mixture", {"jump": 1.0, "snooker": 0.0}),
]


@pytest.mark.parametrize(("target_name", "params"), CASES)
def test_marginals_match_exact_draws(target_name, params):
    """The final states of C chains started at exact draws against 20,000 fresh exact draws,
    coordinate by coordinate (n = C: the chains share Z, so they are nearly, not exactly,
    independent)."""
    target = potential(target_name)
    kernel = DEMCZ(**params)
    g = gen(7)
    state = kernel.init(target.exact_sample(g, C), target, g)
    state, info = kernel.run(state, target, g, 100)
    assert not state.diverged.any()
    assert state.archive.count == C * 11  # the start and ten appends (thin = 10)
    reference = target.exact_sample(gen(8), 20_000)
    for i in range(2):
        ks = stats.ks_2samp(state.position[:, i].cpu().numpy(), reference[:, i].cpu().numpy())
        assert ks.pvalue > 1e-4, (target_name, params, i, ks)
    assert info.accepted.mean() > 0.05


def test_mean_and_covariance_of_a_rotated_gaussian_from_a_poor_start():
    """Chains (and Z) start at N(0, I) draws, far from N(0, Sigma) with scales 0.5..4; after
    300 steps the mean and covariance of the chains' positions are the target's within 5 SE."""
    target = gaussian(4, (0.5, 1.0, 2.0, 4.0), seed=5)
    kernel = DEMCZ()
    g = gen(0)
    state = kernel.init(target.initial(g, C), target, g)
    state, _ = kernel.run(state, target, g, 300)
    x, cov = state.position.cpu(), target.cov
    var = cov.diagonal()
    mean_se = (var / C).sqrt()
    assert (x.mean(0).abs() < 5 * mean_se).all(), x.mean(0) / mean_se
    cov_se = ((var[:, None] * var[None, :] + cov**2) / C).sqrt()
    assert ((torch.cov(x.T) - cov).abs() < 5 * cov_se).all(), (torch.cov(x.T) - cov) / cov_se


def rwm_acceptance(dim: int, scale: float, n: int = 400_000) -> tuple[float, float]:
    """E min(1, pi(x + y) / pi(x)), x ~ N(0, I), y ~ N(0, scale^2 I): random-walk Metropolis's
    acceptance at stationarity on a Gaussian (whitened), and its Monte Carlo SE."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, dim))
    y = scale * rng.standard_normal((n, dim))
    a = np.minimum(1.0, np.exp(-((2 * x + y) * y).sum(1) / 2))
    return float(a.mean()), float(a.std() / math.sqrt(n))


def test_acceptance_on_a_10d_gaussian():
    """The DE move alone (no jumps, no snooker) at stationarity proposes x + N(0, 2.38^2 / d
    Sigma) (plus a 1e-4 jitter): its acceptance is random-walk Metropolis's, 0.2616 at d = 10.
    The default mix (a tenth mode jumps, which a d = 10 Gaussian rejects, a tenth snooker)
    measures 0.247, inside the SPEC's band."""
    target = gaussian(10, tuple(0.5 + 0.5 * i for i in range(10)), seed=3)
    want, want_se = rwm_acceptance(10, 2.38 / math.sqrt(10))
    for params in ({"jump": 0.0, "snooker": 0.0}, {}):
        kernel = DEMCZ(**params)
        g = gen(1)
        state = kernel.init(target.exact_sample(g, 1000), target, g)
        _, info = kernel.run(state, target, g, 150)
        per_step = info.accepted[50:].mean(1)
        got, se = per_step.mean().item(), per_step.std().item() / math.sqrt(len(per_step))
        if params:
            assert abs(got - want) < 5 * math.hypot(se, want_se), (got, want, se)
        else:
            lo, hi = DEMCZ.SPEC.acceptance
            assert 0.2 < got < 0.3 and lo < got < hi, got


def test_distinct_indices_are_uniform_over_distinct_triples():
    keys = torch.randint(1 << 62, (60_000, 3), generator=gen(0))
    r1, r2, r3 = distinct(keys, 4)
    assert ((r1 != r2) & (r1 != r3) & (r2 != r3)).all()
    triples = (r1 * 16 + r2 * 4 + r3).bincount(minlength=64)
    seen = triples[triples > 0]
    assert len(seen) == 24  # every ordered triple of distinct rows, each ~1/24
    assert stats.chisquare(seen.numpy()).pvalue > 1e-4
    r1, r2, _ = distinct(keys, 2)
    assert (r1 != r2).all()


def test_z_takes_the_population_every_thin_steps_and_then_a_uniform_subset():
    """Appends every `thin` steps; past `archive` rows, Z is a uniform random subset of every
    state offered (reservoir sampling): early and late states are kept equally often."""
    target = potential("banana")
    kernel = DEMCZ(thin=3)
    g = gen(0)
    state = kernel.init(target.exact_sample(g, 8), target, g)
    state, info = kernel.run(state, target, g, 10, positions=True)
    assert state.archive.count == state.archive.seen == 8 * 4  # steps 3, 6, 9
    kept = torch.cat([info.position[t] for t in (2, 5, 8)])
    torch.testing.assert_close(state.archive.z[8:], kept, rtol=0, atol=0)

    capacity, offered, batch, repeats = 50, 500, 25, 400
    counts = torch.zeros(offered)
    g = gen(1)
    for _ in range(repeats):
        z = Archive.empty(1, torch.zeros(1, dtype=torch.float64))
        for first in range(0, offered, batch):
            rows = torch.arange(first, first + batch, dtype=torch.float64)[:, None]
            z = z.appended(rows, torch.randint(1 << 62, (batch,), generator=g), capacity)
        assert z.count == capacity and z.seen == offered
        assert z.z[:, 0].unique().numel() == capacity  # distinct states, each at most once
        counts[z.z[:, 0].long()] += 1
    share = counts / repeats  # each state's chance to be in Z: capacity / offered = 0.1
    se = math.sqrt(0.1 * 0.9 / (100 * repeats))
    for part in (share[:100], share[200:300], share[400:]):
        assert abs(part.mean().item() - 0.1) < 5 * se, part.mean()


def test_a_nan_chain_stays_out_of_z():
    """A chain that starts at NaN is frozen and flagged, never enters Z, and the others run on
    finite (they read Z, not the NaN chain). Poisoned after init (its start is in Z), the
    same."""
    target = potential("banana")
    kernel = DEMCZ(thin=2)
    for after_init in (False, True):
        g = gen(1)
        x0 = target.exact_sample(g, 6)
        if not after_init:
            x0[2, 1] = math.nan
        state = kernel.init(x0, target, g)
        if after_init:
            state.position[2, 1] = math.nan
        state, info = kernel.run(state, target, g, 20)
        others = [0, 1, 3, 4, 5]
        assert info.diverged[:, 2].all() and not info.diverged[:, others].any()
        assert torch.isnan(state.position[2, 1]) and torch.isfinite(state.position[others]).all()
        assert torch.isfinite(state.archive.z).all()
        assert state.archive.count == (6 if after_init else 5) + 5 * 10
        assert info.accepted[:, others].mean() > 0.1


def test_the_registry_s_nan_containment_test(monkeypatch):
    """tests/test_kernels.py's containment test, as it will run once the kernel is registered."""
    monkeypatch.setitem(samplers.REGISTRY, "de-mcmc-z", DEMCZ.SPEC)
    test_kernels.test_a_nan_chain_is_frozen_and_flagged_and_the_others_are_untouched("de-mcmc-z")
    with pytest.raises(ValueError, match=r"de-mcmc-z.archive: must be an integer in \[3, "):
        samplers.make("de-mcmc-z", archive=2)


def test_trace_path_shows_the_difference_vector_and_the_snooker_line():
    """One traced step: the path is x_i, then x_i + gamma (z_r1 - z_r2) (a DE move; the
    proposal adds the jitter) or the snooker's z (the proposal lies on the line x_i - z)."""
    target = potential("banana")
    kernel = DEMCZ()
    g = gen(2)
    chains = 64
    state = kernel.init(target.exact_sample(g, chains), target, g)
    noise = kernel.noise_for(state, target, g).take(1)
    noise = {k: v[0] for k, v in noise.items()}
    snooker = torch.arange(chains) % 2 == 0
    noise["move"][:, 0] = 0.5  # no mode jumps
    noise["move"][:, 1] = torch.where(snooker, 0.0, 0.5)
    _, info = kernel.step(state, target, noise, trace=True)
    path, x = info.path, state.position
    assert path.shape == (chains, 3, 2)
    torch.testing.assert_close(path[:, 0], x, rtol=0, atol=0)
    torch.testing.assert_close(path[:, 2], info.proposal, rtol=0, atol=0)
    r1, r2, r3 = distinct(noise["pick"], state.archive.count)
    z = state.archive.z
    gamma = 2.38 / math.sqrt(4)
    de = ~snooker
    torch.testing.assert_close(path[de, 1], x[de] + gamma * (z[r1] - z[r2])[de])
    assert ((path[de, 2] - path[de, 1]).abs() < 1e-3).all()  # the jitter, b = 1e-4
    torch.testing.assert_close(path[snooker, 1], z[r3][snooker], rtol=0, atol=0)
    a, b = path[snooker, 1] - path[snooker, 0], path[snooker, 2] - path[snooker, 0]
    cross = a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0]
    assert (cross.abs() < 1e-9 * (a.norm(dim=1) * b.norm(dim=1) + 1)).all()


def test_same_seed_same_draws_and_an_old_state_runs_again_alike():
    target = potential("mixture")
    kernel = DEMCZ(thin=2)

    def run(seed, state=None):
        g = gen(seed)
        start = kernel.init(target.exact_sample(gen(0), 32), target, g)
        return kernel.run(start if state is None else state, target, g, 30)[0], start

    a, start = run(1)
    b, _ = run(1)
    c, _ = run(2)
    assert torch.equal(a.position, b.position) and torch.equal(a.archive.z, b.archive.z)
    assert not torch.equal(a.position, c.position)
    # ``start``'s archive was appended to by ``a``'s run; running it again branches off
    g = gen(1)
    kernel.init(target.exact_sample(gen(0), 32), target, g)  # the generator where ``a`` began
    again, _ = kernel.run(start, target, g, 30)
    assert torch.equal(again.position, a.position) and torch.equal(again.archive.z, a.archive.z)
    assert torch.equal(a.archive.z, b.archive.z)  # ``a`` untouched by the branch


def test_chains_that_start_at_one_point_need_spread():
    """Z of one repeated point gives zero differences: the chains move by the jitter only.
    ``spread`` seeds Z around the start, and the chains then move."""
    target = potential("banana")
    x0 = torch.zeros(16, 2, dtype=torch.float64)
    moved = {}
    for spread in (0.0, 1.0):
        kernel = DEMCZ(spread=spread, snooker=0.0)
        g = gen(0)
        state = kernel.init(x0, target, g)
        assert state.archive.count == (16 if spread == 0 else 32)
        state, _ = kernel.run(state, target, g, 20)
        moved[spread] = (state.position - x0).norm(dim=1).max().item()
    assert moved[0.0] < 1e-2 < 0.5 < moved[1.0], moved
