"""LLC estimates on the benchmark's tiny deep linear networks against their true LLC (Aoyagi's
formula, ``landscapes.truths.dln_llc``, itself tested against the table of
docs/methods/local-sampling.md).

Hitchcock & Hoogland's metrics (Figs. 3, 5-8): over K problems, the mean relative error
(lambda_hat - lambda) / lambda at a sampler's best step size on a log grid, and the fraction of
problem pairs whose order the estimates keep. Issue goal: |mean| <= 0.3 and order >= 0.8 for
RMSProp-SGLD over >= 8 problems. The problems (seeds 0-7) include two-layer ones, i.e.
reduced-rank regressions.

Each step pairs its batch loss with w0's on the same batch (``samplers.llc.Paired``, what an
LLC run does): without it, the batch noise of a single chain's mean loss at n = 1e5 was larger than
lambda itself at these run lengths.

Both step sizes of a problem run as one eager run of 2 x CHAINS chains (``estimates``): each
size's chains read the draws of a CHAINS-chain run from the problem's seed and step at that
size, so each estimate is the one its own run would give (to float rounding), at about 60% of
the two runs' cost (a tiny DLN's step is mostly per-operation overhead).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from repeated_noise import Repeated

import landscapes
import samplers
from samplers import llc
from samplers.base import Noise
from studies.dln import order_preservation

PROBLEMS = range(8)
STEP_SIZES = (3e-9, 1e-8)  # the grid's two best; 3e-8 and 1e-7 were +0.32 and +1.2 (notes)
STEPS, CHAINS, BATCH, N = 10_000, 4, 500, 100_000  # at 5000 steps, 3e-9 kept 0.79 of orders


def estimates(target: landscapes.Target, seed: int) -> dict[float, tuple[float, int]]:
    """(lambda_hat, diverged chains) at each of STEP_SIZES, from one eager run of CHAINS chains
    per size: each size's chains read the draws of a CHAINS-chain run from ``seed``
    (``Repeated``) and step at that size (a per-chain step: it broadcasts in eps_t)."""
    w0 = target.w0.to(target.dtype)
    plain = samplers.make("rmsprop-sgld", step_size=STEP_SIZES[0], batch_size=BATCH)
    kernel = llc.Paired(plain, target, w0)
    g = torch.Generator().manual_seed(seed)
    sizes = len(STEP_SIZES)
    state = kernel.init(w0.expand(CHAINS * sizes, -1), target, g)
    noise = Noise(kernel.draws(target, CHAINS, target.dim), g, w0.dtype)
    eps = torch.tensor(STEP_SIZES, dtype=w0.dtype).repeat_interleave(CHAINS)
    plain.step_size = eps[:, None]  # [sizes x CHAINS, 1], in the chains' dtype
    state, info = kernel.run(state, target, Repeated(noise, CHAINS, sizes), STEPS)  # eager
    excess = (info.loss.double() - info.scalars["center_loss"].double())[STEPS // 2 :]
    excess = excess.reshape(-1, sizes, CHAINS).transpose(0, 1).reshape(sizes, -1)
    diverged = state.diverged.reshape(sizes, CHAINS).sum(1)
    nbeta = kernel.nbeta_for(target)
    return {
        eps: (float(nbeta * excess[i].mean()), int(diverged[i])) for i, eps in enumerate(STEP_SIZES)
    }


@pytest.mark.slow
def test_rmsprop_sgld_on_tiny_dlns_meets_the_benchmark_goal_at_its_best_step():
    targets = [
        landscapes.make("dln", size_class="tiny", seed=p, n=N, device="cpu", dtype="float32")
        for p in PROBLEMS
    ]
    true = np.array([t.true_llc[0] for t in targets])
    results = {}
    done = [estimates(target, p) for p, target in zip(PROBLEMS, targets, strict=True)]
    for eps in STEP_SIZES:
        runs = [by_step[eps] for by_step in done]
        lam = np.array([r[0] for r in runs])
        assert sum(r[1] for r in runs) == 0, f"diverged chains at {eps}"
        assert np.all(lam > 0) and np.all(lam < [t.dim / 2 for t in targets]), lam
        results[eps] = lam
    best = min(STEP_SIZES, key=lambda eps: abs(np.mean(results[eps] / true - 1)))
    relative = results[best] / true - 1
    assert abs(relative.mean()) <= 0.3, (best, relative)
    assert order_preservation(true, results[best]) >= 0.8, (best, results[best], true)
    # estimates grow with the step (discretisation and gradient-noise bias): the larger step
    # reads higher on average, as in Hitchcock & Hoogland's Figs. 5-7
    assert np.mean(results[1e-8]) > np.mean(results[3e-9])
