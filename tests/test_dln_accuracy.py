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
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import landscapes
import samplers
from samplers import llc
from studies.dln import order_preservation

PROBLEMS = range(8)
STEP_SIZES = (3e-9, 1e-8)  # the grid's two best; 3e-8 and 1e-7 were +0.32 and +1.2 (notes)
STEPS, CHAINS, BATCH, N = 10_000, 4, 500, 100_000  # at 5000 steps, 3e-9 kept 0.79 of orders


def estimate(target: landscapes.Target, step_size: float, seed: int) -> tuple[float, int]:
    w0 = target.w0.to(target.dtype)
    plain = samplers.make("rmsprop-sgld", step_size=step_size, batch_size=BATCH)
    kernel = llc.Paired(plain, target, w0)
    g = torch.Generator().manual_seed(seed)
    state = kernel.init(w0.expand(CHAINS, -1), target, g)
    state, info = kernel.run(state, target, g, STEPS)  # eager: no compile per shape
    excess = (info.loss.double() - info.scalars["center_loss"].double())[STEPS // 2 :]
    return float(kernel.nbeta_for(target) * excess.mean()), int(state.diverged.sum())


def problem(job: tuple[int, float]) -> tuple[float, int]:
    """``estimate`` of tiny problem ``p`` at step ``eps``, built where it runs (a worker)."""
    p, eps = job
    target = landscapes.make("dln", size_class="tiny", seed=p, n=N, device="cpu", dtype="float32")
    return estimate(target, eps, p)


@pytest.mark.slow
def test_rmsprop_sgld_on_tiny_dlns_meets_the_benchmark_goal_at_its_best_step():
    targets = [
        landscapes.make("dln", size_class="tiny", seed=p, n=N, device="cpu", dtype="float32")
        for p in PROBLEMS
    ]
    true = np.array([t.true_llc[0] for t in targets])
    results = {}
    jobs = [(p, eps) for eps in STEP_SIZES for p in PROBLEMS]
    done = {job: problem(job) for job in jobs}
    for eps in STEP_SIZES:
        runs = [done[p, eps] for p in PROBLEMS]
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
