"""HMC's fixed trajectory length resonates; the default jitter does not (issue 37, item 3).

The target is the issue's rotated 3-D Gaussian of condition 20: variances 1, 20^-1/2, 1/20
(log-spaced, as ``gaussian`` with ``condition=20``) under the rotation QR draws from seed 3,
which gives the issue's exact diagonal [0.59, 0.38, 0.30]. With step 0.25 and 8 leapfrog steps
the stiff mode turns through 3.02 pi per trajectory, so fixed-length HMC nearly mirrors it each
iteration and a far start along it is still far after 250 iterations.
"""

import math

import pytest
import torch

import samplers
from landscapes.potentials import Gaussian
from samplers.hmc import HMC

CHAINS, ITERATIONS, EPS, STEPS = 512, 250, 0.25, 8
STDS = tuple(20 ** (-i / 4) for i in range(3))  # variances 1, 20^-1/2, 1/20: condition 20


def rotated_gaussian() -> Gaussian:
    g = torch.Generator().manual_seed(3)
    q, r = torch.linalg.qr(torch.randn(3, 3, generator=g, dtype=torch.float64))
    return Gaussian(STDS, q * torch.sign(torch.diagonal(r))).to("cpu", torch.float64)


def final_covariance(target: Gaussian, **params) -> tuple[torch.Tensor, torch.Tensor]:
    """Every chain starts 10 sd out along the stiff eigen-direction; returns the sample
    covariance over chains after ``ITERATIONS`` iterations and that direction."""
    stiff = target.factor[:, 2] / STDS[2]  # unit eigenvector of the smallest variance
    kernel = samplers.make("hmc", step_size=EPS, leapfrog_steps=STEPS, **params)
    g = torch.Generator().manual_seed(0)
    state = kernel.init((10 * STDS[2] * stiff).expand(CHAINS, 3).clone(), target, g)
    state, _ = kernel.run(state, target, g, ITERATIONS)
    assert not state.diverged.any()
    return torch.cov(state.position.T), stiff


def z_scores(cov: torch.Tensor, exact: torch.Tensor, stiff: torch.Tensor) -> torch.Tensor:
    """(estimate - exact) / standard error, for the diagonal and the stiff direction's variance.

    The chains are independent, so at the last iteration they are C draws of w; the sample
    variance of C normal draws of variance s2 has variance 2 s2^2 / (C - 1), so its standard
    error is s2 sqrt(2 / (C - 1)) (6% of s2 at C = 512). u^T cov u is the sample variance of
    u . w, the same with s2 = u^T Sigma u."""
    got = torch.cat([cov.diagonal(), (stiff @ cov @ stiff).reshape(1)])
    want = torch.cat([exact.diagonal(), (stiff @ exact @ stiff).reshape(1)])
    return (got - want) / (want * math.sqrt(2 / (CHAINS - 1)))


def test_the_stiff_mode_is_resonant():
    # the leapfrog turns a mode of frequency omega by arccos(1 - (eps omega)^2 / 2) per step
    omega = 1 / STDS[2]
    phase = STEPS * math.acos(1 - (EPS * omega) ** 2 / 2)
    assert phase / math.pi == pytest.approx(3.02, abs=0.005)
    assert rotated_gaussian().cov.diagonal().tolist() == pytest.approx([0.59, 0.38, 0.30], abs=5e-3)


def test_fixed_length_hmc_resonates_and_keeps_the_far_start():
    target = rotated_gaussian()
    cov, stiff = final_covariance(target, jitter=False)
    # measured: diagonal [1.09, 0.97, 0.29] against [0.59, 0.38, 0.30]; stiff variance 1.26
    # against 0.05: the chains are still spread over +-(several sd) along the stiff direction
    assert stiff @ cov @ stiff > 10 * STDS[2] ** 2
    assert z_scores(cov, target.cov, stiff).abs().max() > 5  # the check below fails here


def test_jittered_hmc_samples_the_resonant_gaussian_by_default():
    assert HMC.jitter and samplers.REGISTRY["hmc"].defaults()["jitter"]
    assert samplers.make("hmc", step_size=EPS).jitter
    target = rotated_gaussian()
    cov, stiff = final_covariance(target)  # no jitter argument: the default
    # measured: diagonal [0.56, 0.35, 0.25], stiff variance 0.049 (z within 2.4)
    z = z_scores(cov, target.cov, stiff)
    assert z.abs().max() < 5, z
