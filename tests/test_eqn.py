"""EQN, TATi's ensemble quasi-Newton sampler (Heber et al. 2020, eqs. 18-19; docs/methods/tati.md):
plain BAOAB when eta = 0 or with one walker (bit for bit, same stream), its preconditioner
against a covariance computed here with numpy, its rebuild schedule, and the speed-up of the
slow mode on the anisotropic Gaussian of Fig. 10 with the variances still right."""

from __future__ import annotations

import json
import math

import numpy as np
import torch
from clitest import jobs

import landscapes
import samplers
from samplers import diagnostics
from samplers.eqn import EQN

D = 4
LAMBDA = np.linspace(1.0, 100.0, D)  # L(w) = (1/d) w^T C w: variance d / (2 lambda) per mode


def anisotropic():
    """Fig. 10's target: N(0, V diag(d / (2 lambda)) V^T), V a seeded rotation."""
    return landscapes.make(
        "gaussian",
        dim=D,
        scales=tuple(math.sqrt(D / (2 * lam)) for lam in LAMBDA),
        rotate=True,
        seed=3,
        dtype="float64",
    )


def run(name: str, chains: int, steps: int, seed: int = 0, **params):
    target = anisotropic()
    kernel = samplers.make(name, step_size=0.125, friction=1.0, **params)
    g = torch.Generator().manual_seed(seed)
    state = kernel.init(target.exact_sample(g, chains), target, g)
    return kernel, target, *kernel.run(state, target, g, steps, positions=True)


def test_eta_zero_or_one_walker_is_baoab_bit_for_bit():
    _, _, plain, info = run("baoab", 6, 200)
    _, _, state, eqn_info = run("eqn", 6, 200, eta=0.0)
    assert torch.equal(state.position, plain.position)
    assert torch.equal(eqn_info.position, info.position)
    _, _, alone, _ = run("eqn", 1, 200, eta=10.0)
    _, _, plain_alone, _ = run("baoab", 1, 200)
    assert torch.equal(alone.position, plain_alone.position)


def test_the_preconditioner_is_the_other_walkers_cholesky_factor_and_excludes_walker_i():
    target = anisotropic()
    kernel: EQN = samplers.make("eqn", step_size=0.1, eta=10.0)
    w = torch.randn(8, D, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    ok = torch.ones(8, dtype=torch.bool)
    (b,) = kernel.rebuild(w, ok, target)
    x = w.numpy()
    for i in range(8):
        others = np.delete(x, i, axis=0)
        mean = others.mean(0)
        cov = (others - mean).T @ (others - mean) / (len(others))  # 1/(L - 1): L - 1 others
        bi = b[i].numpy()
        np.testing.assert_allclose(bi @ bi.T, np.eye(D) + 10.0 * cov, rtol=1e-10, atol=1e-12)
        assert np.allclose(np.triu(bi, 1), 0)  # lower-triangular
    moved = w.clone()
    moved[2] += 5.0  # walker 2 moves: its own B stays, every other walker's changes
    (b2,) = kernel.rebuild(moved, ok, target)
    torch.testing.assert_close(b2[2], b[2], rtol=1e-12, atol=1e-12)
    assert all(not torch.allclose(b2[i], b[i]) for i in range(8) if i != 2)


def test_b_is_rebuilt_exactly_when_the_step_is_a_multiple_of_covariance_every():
    target = anisotropic()
    kernel = samplers.make("eqn", step_size=0.1, eta=10.0, covariance_every=5)
    g = torch.Generator().manual_seed(2)
    state = kernel.init(target.exact_sample(g, 8), target, g)
    noise = kernel.noise_for(state, target, g)
    seen = []
    for t in range(12):
        before = state.position
        state, _ = kernel.eager(state, target, noise.take(1))
        expected = kernel.rebuild(before, torch.ones(8, dtype=torch.bool), target)[0]
        seen.append(torch.equal(state.factors[0], expected))
        assert state.t == t + 1
    assert seen[0] and seen[5] and seen[10]  # rebuilt at steps 0, 5, 10 from where they stood
    assert not any(seen[t] for t in range(12) if t % 5)  # frozen in between


def test_eqn_mixes_the_slow_mode_at_least_three_times_faster_with_the_right_variances():
    """Fig. 10's setting at d = 4: BAOAB (eps 0.125, gamma 1, beta 1), eta 10, 8 walkers, B
    rebuilt every 1000 steps; a numpy check (docs/methods/tati.md) reads IAT 30.8 for one walker
    and 2.5 for 8 along the slowest direction. The IAT is read per walker, averaged over the 8."""
    steps, burn = 20_000, 2_000
    target = anisotropic()
    rotation = np.linalg.eigh(target.cov.numpy())[1]  # ascending variances: slowest last
    iat, var = {}, {}
    for eta in (0.0, 10.0):  # eta 0: 8 independent BAOAB chains, one walker each
        _, _, _, info = run("eqn", 8, steps, seed=4, eta=eta)
        modes = info.position[burn:].numpy() @ rotation  # [T, 8, D] along the eigenvectors
        iat[eta] = diagnostics.iat(np.moveaxis(modes, 0, 1)).mean(0)  # [D], averaged over walkers
        var[eta] = modes.reshape(-1, D).var(0)
    exact = np.sort(D / (2 * LAMBDA))
    assert iat[0.0][-1] >= 3 * iat[10.0][-1], iat
    np.testing.assert_allclose(var[10.0], exact, rtol=0.10)


def test_a_run_from_the_default_start_keeps_every_walker_and_the_right_variances(tmp_path):
    """Issue 60, item 15: from N(0, I) draws the 8 walkers' spread made B ~ sqrt(11) in every
    direction at step 0, so the stiff one (variance 0.02, h omega = 0.88 with B = I) took
    h omega ~ 2.9 > 2 and every walker diverged. TATi starts its walkers at one point: then
    cov = 0 and B = I until the first rebuild, by which time the walkers have spread as BAOAB
    spreads them. The run, not the kernel: the default start is the run's."""
    target = anisotropic()
    scales = ",".join(f"{math.sqrt(D / (2 * lam))!r}" for lam in LAMBDA)
    out = jobs(
        tmp_path,
        "run",
        *("--target", "gaussian", "--target-param", f"dim={D}", "--target-param", "rotate=true"),
        *("--target-param", f"scales={scales}", "--target-param", "seed=3", "--dtype", "float64"),
        *("--sampler", "eqn", "--param", "step_size=0.125", "--param", "friction=1"),
        *("--chains", "8", "--steps", "5000", "--burn-in", "1500", "--compile", "never"),
        "--json",
    )
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["diverged_chains"] == 0
    exact = torch.diagonal(target.cov).numpy()  # the coordinates' variances, rotated
    np.testing.assert_allclose(summary["coordinates"]["var"], exact, rtol=0.1)
