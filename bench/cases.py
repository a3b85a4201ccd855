"""The cases of ``python -m bench engine``, shared by Basin's side and the BlackJAX peer.

Imports neither torch nor jax: the peer runs in its own virtualenv. Hyperparameters are in
Basin's convention (``samplers.make`` takes them as they are). Basin's Langevin step is
w <- w - (eps/2) grad U + sqrt(eps) eta, BlackJAX's is w <- w + h grad log p + sqrt(2 h) eta,
so the peer runs SGLD and MALA with h = eps / 2 (see ``blackjax_step_size``); HMC's leapfrog
step is the same on both sides.
"""

from __future__ import annotations

DIGITS_TRAIN = 1437  # landscapes.data.DIGITS_TRAIN: training points of the digits MLP

TARGETS = {
    # y0 = x0/a, y1 = a x1 + a b (x0^2 + a^2), y ~ N(mu, sigma)  (landscapes.potentials.Banana)
    "banana": {"a": 2.0, "b": 0.2, "mu": (0.0, 4.0), "sigma": ((1.0, 0.5), (0.5, 1.0))},
    # 64-32-10 relu MLP, mean cross-entropy, on sklearn's digits / 16 shuffled with the seed
    "mlp": {"dataset": "digits", "hidden_sizes": (32,), "activation": "relu", "seed": 0},
}

CASES = {
    "banana-sgld": {
        "target": "banana",
        "sampler": "sgld",
        "params": {"step_size": 1e-3},
        "chains": (64, 4096),
    },
    "banana-mala": {
        "target": "banana",
        "sampler": "mala",
        "params": {"step_size": 0.05},
        "chains": (64, 4096),
    },
    "banana-hmc": {
        "target": "banana",
        "sampler": "hmc",
        # identity mass on both sides; a fixed trajectory length, as BlackJAX's hmc
        "params": {"step_size": 0.1, "leapfrog_steps": 10, "jitter": False},
        "chains": (64, 4096),
    },
    "mlp-sgld": {
        "target": "mlp",
        "sampler": "sgld",
        # nbeta = n: temperature 1; minibatches of 32 drawn with replacement, one per chain
        "params": {"step_size": 1e-5, "batch_size": 32, "nbeta": DIGITS_TRAIN},
        "chains": (1, 8),
    },
}

LANGEVIN = {"sgld", "mala"}  # kernels whose step size the two libraries define differently


def blackjax_step_size(sampler: str, step_size: float) -> float:
    """BlackJAX's step size for Basin's ``step_size`` (same update, see the module doc)."""
    return step_size / 2 if sampler in LANGEVIN else step_size


def case_chains(name: str, banana_chains: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """Chain counts of a case; ``banana_chains`` (from --chains) overrides the banana cases'."""
    case = CASES[name]
    if banana_chains and case["target"] == "banana":
        return tuple(banana_chains)
    return tuple(case["chains"])
