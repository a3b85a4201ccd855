"""BlackJAX's ``window_adaptation`` for ``python -m bench warmup`` (bench/warmup.py). Runs in
bench/.peer-venv (``python -m bench setup-peer``), from the repository root; not in CI:

    bench/.peer-venv/bin/python -m bench.peer_warmup REQUEST.json OUT.npz

The request (written by bench/warmup.py) holds each case's Gaussian as Basin built it (its
standard deviations s and rotation R: cov = R diag(s^2) R^T, precision (R / s^2) R^T, the
formulas of landscapes.potentials.Gaussian), each kernel's extra parameters, the start of every
chain in each repeat, the seeds, and the warm-up and draw counts. Per case, kernel and repeat,
each chain adapts alone (``window_adaptation`` vmapped over the chains, as BlackJAX runs
several chains), then draws with its own adapted step and inverse mass matrix. OUT.npz gets,
under "case/kernel/repeat/...": ``draws`` [C, D, d], ``step`` [C], ``inv_mass`` [C, d],
``grads`` [C] (the draws' integration steps, ``info.num_integration_steps`` summed: one
gradient each), ``warmup_grads`` [C], ``divergent`` [C] and ``accept`` [C] (the mean of the
draws' ``info.acceptance_rate``). Prints the versions as JSON.

Only numpy is imported at the top, so tests/test_bench_warmup.py can check ``gaussian``
against Basin's target without jax.
"""

from __future__ import annotations

import json
import sys

import numpy as np


def gaussian(stds, rotation) -> tuple[np.ndarray, np.ndarray]:
    """(cov, precision) of N(0, R diag(s^2) R^T), as landscapes.potentials.Gaussian computes
    them, in float64; ``rotation`` None: the identity."""
    s = np.asarray(stds, dtype=np.float64)
    rot = np.eye(len(s)) if rotation is None else np.asarray(rotation, dtype=np.float64)
    factor = rot * s
    return factor @ factor.T, (rot / s**2) @ rot.T


def _jax():
    import jax

    jax.config.update("jax_enable_x64", True)  # Basin's side runs in float64 too
    return jax


def runners(precision: np.ndarray, kernel: str, extra: dict, warmup: int, draws: int):
    """(adapt, sample), compiled once per case and kernel: ``adapt(keys, x0)`` adapts each
    chain alone; ``sample(keys, states, steps, inv_mass)`` draws with each chain's parameters."""
    jax = _jax()
    import blackjax
    import jax.numpy as jnp

    p = jnp.asarray(precision)

    def logdensity(x):
        return -0.5 * x @ p @ x

    algorithm = getattr(blackjax, kernel)
    windowed = blackjax.window_adaptation(
        algorithm,
        logdensity,
        adaptation_info_fn=lambda state, info, adaptation: info.num_integration_steps,
        **extra,
    )

    def adapt_one(key, x0):
        (state, params), steps = windowed.run(key, x0, num_steps=warmup)
        return state, params["step_size"], params["inverse_mass_matrix"], steps.sum()

    step_fn = algorithm.build_kernel()

    def sample_one(key, state, step, inv_mass):
        def body(state, key):
            state, info = step_fn(key, state, logdensity, step, inv_mass, **extra)
            out = (info.num_integration_steps, info.is_divergent, info.acceptance_rate)
            return state, (state.position, *out)

        keys = jax.random.split(key, draws)
        _, (positions, steps, divergent, accept) = jax.lax.scan(body, state, keys)
        return positions, steps.sum(), divergent.sum(), accept.mean()

    return jax.jit(jax.vmap(adapt_one)), jax.jit(jax.vmap(sample_one))


def run(request: dict) -> dict[str, np.ndarray]:
    jax = _jax()
    out = {}
    starts = [np.asarray(x, dtype=np.float64) for x in request["starts"]]
    for case, target in request["cases"].items():
        _, precision = gaussian(target["stds"], target["rotation"])
        for kernel, extra in request["kernels"].items():
            adapt, sample = runners(precision, kernel, extra, request["warmup"], request["draws"])
            for repeat, (seed, x0) in enumerate(zip(request["seeds"], starts, strict=True)):
                chains = x0.shape[0]
                k_adapt, k_sample = jax.random.split(jax.random.key(seed))
                states, step, inv_mass, warm = adapt(jax.random.split(k_adapt, chains), x0)
                positions, grads, divergent, accept = sample(
                    jax.random.split(k_sample, chains), states, step, inv_mass
                )
                key = f"{case}/{kernel}/{repeat}"
                out[f"{key}/draws"] = np.asarray(positions)
                out[f"{key}/step"] = np.asarray(step)
                out[f"{key}/inv_mass"] = np.asarray(inv_mass)
                out[f"{key}/grads"] = np.asarray(grads)
                out[f"{key}/warmup_grads"] = np.asarray(warm)
                out[f"{key}/divergent"] = np.asarray(divergent)
                out[f"{key}/accept"] = np.asarray(accept)
                print(f"BlackJAX {key} done", file=sys.stderr, flush=True)
    return out


def main() -> None:
    request_path, out_path = sys.argv[1:3]
    with open(request_path) as f:
        request = json.load(f)
    np.savez(out_path, **run(request))
    jax = _jax()
    import blackjax

    versions = {"blackjax": blackjax.__version__, "jax": jax.__version__}
    print(json.dumps({**versions, "jax_device": str(jax.devices()[0])}))


if __name__ == "__main__":
    main()
