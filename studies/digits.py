"""Yu et al.'s network experiment (Sec. 4.3) at the 2-core machine's scale: a 64-50-50-10 ReLU MLP
on sklearn's digits (the paper's MNIST needs a download; docs/methods/sgrld.md) with the Gaussian or
the horseshoe prior, sampled by SGRLD in every metric at a tuned learning rate, and scored by the
posterior-predictive metrics of its kept draws on the test set.

The learning rates l = h n were tuned on the validation log p (360 images) over a grid around
the paper's table 4 values (bench/RESULTS.md, "sgrld": the grid and its scores). Shared by
``python -m bench sgrld`` and the tests.
"""

from __future__ import annotations

import time

import torch

import landscapes
import samplers
from samplers import predictive

PRIORS = ("gaussian", "horseshoe")
METRICS = ("identity", "rmsprop", "wenzel", "monge", "shampoo")
HIDDEN, TRAIN, BATCH = (50, 50), 1077, 100  # 1077 train, 360 validation, 360 test images
CHAINS, STEPS, BURN_IN, THIN = 4, 3000, 1000, 20
# prior -> metric -> the tuned learning rate l (step_size = l / n) and, for monge, alpha2
TUNED: dict[str, dict[str, dict]] = {
    "gaussian": {
        "identity": {"learning_rate": 0.05},
        "rmsprop": {"learning_rate": 0.001},
        "wenzel": {"learning_rate": 0.075},
        "monge": {"learning_rate": 0.05, "alpha2": 0.0},
        "shampoo": {"learning_rate": 0.0025},
    },
    "horseshoe": {
        "identity": {"learning_rate": 0.25},
        "rmsprop": {"learning_rate": 0.008},
        "wenzel": {"learning_rate": 0.75},
        "monge": {"learning_rate": 0.25, "alpha2": 1.0},
        "shampoo": {"learning_rate": 0.0025},
    },
}


def target(prior: str, device: str = "cpu"):
    return landscapes.make(
        "mlp", dataset="digits", hidden_sizes=HIDDEN, n=TRAIN, prior=prior, device=device
    )


def settings(prior: str, metric: str) -> dict:
    """sgrld's parameters for ``prior`` and ``metric``: the tuned l as step_size = l / n."""
    tuned = TUNED[prior][metric]
    params = {"metric": metric, "step_size": tuned["learning_rate"] / TRAIN, "batch_size": BATCH}
    if "alpha2" in tuned:
        params["alpha2"] = tuned["alpha2"]
    return params


def run(net, prior: str, metric: str, seed: int, steps: int = STEPS, split: str = "test") -> dict:
    """One run of CHAINS chains from He initialisations: the predictive metrics of its kept
    draws (after BURN_IN, every THIN-th step; ``samplers.predictive``) and its seconds."""
    kernel = samplers.make("sgrld", **settings(prior, metric))
    g = torch.Generator().manual_seed(seed)
    state = kernel.init(net.initial(g, CHAINS), net, g)
    tic = time.perf_counter()
    state, info = kernel.run(state, net, g, steps, positions=True)
    seconds = time.perf_counter() - tic
    burn = min(BURN_IN, steps // 3)
    kept = info.position[burn::THIN][:, ~state.diverged]  # [k, C', d]
    out = predictive.metrics(net, kept.reshape(-1, net.dim), split)
    return {**out, "seconds": seconds, "diverged": int(state.diverged.sum())}
