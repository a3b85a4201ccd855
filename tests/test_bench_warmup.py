"""``python -m bench warmup`` (bench/warmup.py) without its BlackJAX peer: both sides build the
same Gaussian from the same numbers, and NUTS's gradient evaluations are counted alike in the
lockstep step and in the forest."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import landscapes
import samplers
from bench import peer_warmup, warmup


@pytest.mark.parametrize("case", warmup.CASES)
def test_the_peer_builds_basins_gaussian_from_its_stds_and_rotation(case):
    target = warmup.target(case)
    stds, rotation = warmup.stds_rotation(target)
    # standard deviations from 10 down to 1: a covariance of condition number 100
    assert stds == pytest.approx(np.logspace(1, 0, warmup.DIM), rel=1e-12)
    cov, precision = peer_warmup.gaussian(stds, rotation)
    np.testing.assert_allclose(cov, target.cov.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(precision, target.precision.numpy(), rtol=1e-12, atol=1e-14)
    assert np.linalg.cond(cov) == pytest.approx(warmup.CONDITION, rel=1e-9)
    rotated = not np.allclose(cov, np.diag(np.diag(cov)))
    assert rotated == (case == "rotated")


def counted(kernel, state, target, rows, lockstep: bool):
    kernel.grads = 0
    if lockstep:
        _, info = samplers.base.Kernel.eager(kernel, state, target, rows, positions=True)
    else:
        _, info = kernel.eager(state, target, rows, positions=True)
    return torch.as_tensor(kernel.grads).double(), info.position


def test_nuts_counts_each_chains_leapfrog_steps_alike_in_lockstep_and_forest():
    target = landscapes.make("gaussian", dim=3, scales=(0.5, 1.0, 4.0), dtype="float64")
    g = torch.Generator().manual_seed(2)
    for depth in (1, 6):
        params = samplers.REGISTRY["nuts"].validate({"step_size": 0.3, "max_depth": depth})
        kernel = warmup.CountingNUTS(**params)
        state = kernel.init(target.exact_sample(g, 24), target, g)
        rows = kernel.noise_for(state, target, g, most=12).take(12)
        one, one_at = counted(kernel, state, target, rows, lockstep=True)
        block, block_at = counted(kernel, state, target, rows, lockstep=False)
        torch.testing.assert_close(block_at, one_at, rtol=0, atol=0)  # the same trees
        torch.testing.assert_close(block, one, rtol=0, atol=0)
        if depth == 1:  # one leapfrog step a tree
            assert one.tolist() == [12.0] * 24
        else:  # trees of many lengths, up to 2^6 - 1 steps
            assert 12 < one.min() and one.max() <= 12 * 63 and len(set(one.tolist())) > 1
