"""BlackJAX's MCLMC, for tests/test_mclmc.py's reference numbers. Runs in bench/.peer-venv
(``python -m bench setup-peer``), from the repository root; not in CI:

    bench/.peer-venv/bin/python -m bench.peer_mclmc [--seeds 20]

prints one JSON object:
- ``reference``: one step of ``isokinetic_mclachlan`` (no refresh) on the banana from a fixed
  (w, u), and the energy error W of 5 such steps (``adjusted_mclmc``'s trajectory), in float64:
  the numbers tests/test_mclmc.py checks samplers.mclmc's integrator against.
- ``tuning``: ``mclmc_find_L_and_step_size`` (without diagonal preconditioning, as Basin's
  identity metric) on a standard Gaussian in d = 10 with num_steps = 2000 (200 steps a stage),
  over ``--seeds`` seeds, each started at an exact draw: the quartiles of step_size and L, and
  the mean Delta E^2 / d of 2000 MCLMC steps at each seed's tuned values.
- ``tuning_condition_100``: the same on the 10-D Gaussian of condition number 100
  (``landscapes.make("gaussian", dim=10, condition=100)``: variances 100^(-i/9), i = 0..9; MCLMC
  with the identity metric is rotation invariant, so the rotated one tunes alike), and
  ``variance_error``: the quartiles over seeds of the largest |relative error| of the 10
  variances, from the second moments about 0 of the 2000 steps at the tuned values, and the
  relative error of each variance averaged over the seeds (the bias of the tuned step with the
  Monte Carlo error shrunk by the seeds).
"""

from __future__ import annotations

import argparse
import json

import jax

jax.config.update("jax_enable_x64", True)

import blackjax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from blackjax.mcmc import integrators  # noqa: E402

from bench.cases import TARGETS  # noqa: E402

W0, U0, EPS, STEPS = (0.3, -1.2), (0.6, -0.8), 0.4, 5  # the reference's start, step and length


def banana_logdensity():
    """-U of landscapes.potentials.Banana, in float64."""
    t = TARGETS["banana"]
    a, b, mu = t["a"], t["b"], jnp.asarray(t["mu"])
    precision = jnp.asarray(np.linalg.inv(np.asarray(t["sigma"])))

    def logdensity(x):
        r = jnp.stack([x[0] / a, a * x[1] + a * b * (x[0] ** 2 + a * a)]) - mu
        return -0.5 * r @ precision @ r

    return logdensity


def reference() -> dict:
    logdensity = banana_logdensity()
    step = integrators.isokinetic_mclachlan(logdensity)
    w = jnp.asarray(W0)
    state = integrators.IntegratorState(w, jnp.asarray(U0), *jax.value_and_grad(logdensity)(w))
    one, kinetic = step(state, EPS)
    out = {
        "w0": W0,
        "u0": U0,
        "step_size": EPS,
        "position": [float(v) for v in one.position],
        "velocity": [float(v) for v in one.momentum],
        "kinetic_change": float(kinetic),
        "energy_change": float(kinetic - one.logdensity + state.logdensity),
    }
    total = 0.0
    for _ in range(STEPS):
        state, kinetic = step(state, EPS)
        total += kinetic
    out["trajectory"] = {
        "steps": STEPS,
        "position": [float(v) for v in state.position],
        # adjusted_mclmc's delta_energy is -W: W = U(end) - U(start) + sum of kinetic changes
        "W": float(-state.logdensity + logdensity(w) + total),
    }
    return out


def tuning(seeds: int, num_steps: int = 2000, dim: int = 10, condition: float = 1.0) -> dict:
    variances = condition ** (-jnp.arange(dim) / (dim - 1))  # landscapes' gaussian, condition

    def logdensity(x):
        return -0.5 * jnp.sum(x * x / variances)

    kernel = blackjax.mcmc.mclmc.build_kernel()
    steps, lengths, errors, relative = [], [], [], []
    for seed in range(seeds):
        key = jax.random.key(seed)
        k_init, k_start, k_tune, k_run = jax.random.split(key, 4)
        position = jax.random.normal(k_init, (dim,)) * jnp.sqrt(variances)
        state = blackjax.mcmc.mclmc.init(position, logdensity, k_start)
        state, params, _ = blackjax.mclmc_find_L_and_step_size(
            mclmc_kernel=kernel,
            num_steps=num_steps,
            state=state,
            rng_key=k_tune,
            logdensity_fn=logdensity,
            diagonal_preconditioning=False,
        )
        sampler = blackjax.mclmc(logdensity, L=params.L, step_size=params.step_size)

        def one(state, key, sampler=sampler):
            state, info = sampler.step(key, state)
            return state, (info.energy_change, state.position)

        _, (change, x) = jax.lax.scan(one, state, jax.random.split(k_run, num_steps))
        steps.append(float(params.step_size))
        lengths.append(float(params.L))
        errors.append(float(jnp.mean(change**2) / dim))
        relative.append(np.asarray(jnp.mean(x * x, axis=0) / variances - 1))
    quartiles = lambda v: [float(q) for q in np.quantile(v, (0.25, 0.5, 0.75))]  # noqa: E731
    relative = np.array(relative)
    return {
        "dim": dim,
        "condition": condition,
        "num_steps": num_steps,
        "seeds": seeds,
        "step_size": quartiles(steps),
        "L": quartiles(lengths),
        "energy_error": quartiles(errors),
        "variance_error": quartiles(np.abs(relative).max(axis=1)),
        "variance_bias": [round(float(v), 4) for v in relative.mean(axis=0)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    out = {"blackjax": blackjax.__version__, "reference": reference()}
    out["tuning"] = tuning(args.seeds)
    out["tuning_condition_100"] = tuning(args.seeds, condition=100.0)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
