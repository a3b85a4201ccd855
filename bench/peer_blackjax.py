"""BlackJAX's side of ``python -m bench engine``. Runs in its own virtualenv, bench/.peer-venv
(``python -m bench setup-peer``), from the repository root:

    bench/.peer-venv/bin/python -m bench.peer_blackjax [--steps 500] [--chains 64,4096]

prints one JSON object per case and chain count. With ``--serve`` it answers requests
``{"case": name, "chains": C, "steps": K}`` read line by line from stdin, one JSON line each,
keeping what it compiled, so that the driver can alternate Basin and BlackJAX.

A measurement is one call of jax.jit(lax.scan over K steps of a jax.vmap'ed BlackJAX kernel),
timed to block_until_ready. Its PRNG keys are split inside that call, either all up front or
by each step (BlackJAX's documented loop): the first use of each (case, C, K) compiles both,
times each TRIALS times, and keeps the faster for the peer (``keys`` in the reply).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from itertools import pairwise

import blackjax
import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
from blackjax.sgmcmc.gradients import grad_estimator

from bench.cases import CASES, TARGETS, blackjax_step_size, case_chains

VERSIONS = {
    "jax": jax.__version__,
    "jaxlib": jaxlib.__version__,
    "blackjax": blackjax.__version__,
    "jax_device": str(jax.devices()[0]),
}
ACTIVATIONS = {"relu": jax.nn.relu, "tanh": jnp.tanh}


def banana_logdensity():
    """log p = -1/2 r^T sigma^-1 r, r = y(x) - mu: landscapes.potentials.Banana's -energy."""
    t = TARGETS["banana"]
    a, b, mu = t["a"], t["b"], jnp.asarray(t["mu"], jnp.float32)
    precision = jnp.asarray(np.linalg.inv(np.asarray(t["sigma"])), jnp.float32)

    def logdensity(x):
        r = jnp.stack([x[0] / a, a * x[1] + a * b * (x[0] ** 2 + a * a)]) - mu
        return -0.5 * r @ precision @ r

    return logdensity


def digits(seed: int, n: int):
    """landscapes.data.digits: pixels / 16, shuffled with ``seed``, the first ``n`` points."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(seed).permutation(len(y))
    return jnp.asarray(x[order][:n] / 16.0, jnp.float32), jnp.asarray(y[order][:n], jnp.int32)


def mlp_loglikelihood(sizes: list[int], activation: str):
    """log softmax(f(x))[y] of one point; w flat like torch Linear layers (weight, then bias)."""
    act = ACTIVATIONS[activation]

    def loglikelihood(w, point):
        x, y = point
        h, i = x, 0
        for l, (fan_in, fan_out) in enumerate(pairwise(sizes)):
            weight = w[i : i + fan_in * fan_out].reshape(fan_out, fan_in)
            bias = w[i + fan_in * fan_out : i + (fan_in + 1) * fan_out]
            i += (fan_in + 1) * fan_out
            h = weight @ h + bias
            if l < len(sizes) - 2:
                h = act(h)
        return jax.nn.log_softmax(h)[y]

    return loglikelihood


def mlp_initial(key, sizes: list[int], chains: int):
    """torch.nn.Linear's default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), as MLP.initial."""
    keys = jax.random.split(key, len(sizes) - 1)
    parts = [
        jax.random.uniform(k, (chains, (fan_in + 1) * fan_out), minval=-1.0, maxval=1.0)
        / np.sqrt(fan_in)
        for k, (fan_in, fan_out) in zip(keys, pairwise(sizes), strict=True)
    ]
    return jnp.concatenate(parts, -1)


def build(name: str, chains: int, steps: int):
    """(run, state, data): run(key, state, data) takes ``steps`` steps of all chains."""
    case = CASES[name]
    sampler, params = case["sampler"], case["params"]
    h = blackjax_step_size(sampler, params["step_size"])
    key = jax.random.key(0)
    data, batch_size = None, None
    if case["target"] == "banana":
        logdensity = banana_logdensity()
        position = jax.random.normal(key, (chains, 2))
        if sampler == "sgld":
            algorithm = blackjax.sgld(lambda w, _: jax.grad(logdensity)(w))
        elif sampler == "mala":
            algorithm = blackjax.mala(logdensity, h)
        else:
            algorithm = blackjax.hmc(logdensity, h, jnp.ones(2), params["leapfrog_steps"])
    else:
        t = TARGETS["mlp"]
        data = digits(t["seed"], params["nbeta"])
        sizes = [data[0].shape[1], *t["hidden_sizes"], 10]
        position = mlp_initial(key, sizes, chains)
        # nbeta * mean minibatch log-likelihood (no prior): Basin's U = nbeta L_batch.
        loglikelihood = mlp_loglikelihood(sizes, t["activation"])
        algorithm = blackjax.sgld(grad_estimator(lambda w: 0.0, loglikelihood, params["nbeta"]))
        batch_size = params["batch_size"]

    if sampler == "sgld":

        def one_step(k, state, batch):
            return algorithm.step(k, state, batch, h)
    else:

        def one_step(k, state, batch):
            return algorithm.step(k, state)[0]

    def minibatch(k, data):  # drawn with replacement, one per chain (as Basin)
        if batch_size is None:
            return None
        idx = jax.random.randint(k, (chains, batch_size), 0, data[0].shape[0])
        return data[0][idx], data[1][idx]

    batch_axis = None if batch_size is None else 0

    @jax.jit
    def up_front(key, state, data):  # every step's chain keys split before the scan
        chain_key, batch_key = jax.random.split(key)
        keys = (jax.random.split(chain_key, (steps, chains)), jax.random.split(batch_key, steps))

        def body(state, ks):
            batch = minibatch(ks[1], data)
            return jax.vmap(one_step, in_axes=(0, 0, batch_axis))(ks[0], state, batch), None

        return jax.lax.scan(body, state, keys)[0]

    @jax.jit
    def per_step(key, state, data):  # BlackJAX's documented loop: a step splits its own key
        def body(state, k):
            chain_key, batch_key = jax.random.split(k)
            batch = minibatch(batch_key, data)
            keys = jax.random.split(chain_key, chains)
            return jax.vmap(one_step, in_axes=(0, 0, batch_axis))(keys, state, batch), None

        return jax.lax.scan(body, state, jax.random.split(key, steps))[0]

    runs = {"up front": up_front, "per step": per_step}
    return runs, jax.vmap(algorithm.init)(position), data


def timed(run, key, state, data) -> float:
    start = time.perf_counter()
    jax.block_until_ready(run(key, state, data))
    return time.perf_counter() - start


_BUILT: dict[tuple[str, int, int], tuple] = {}
TRIALS = 3  # timed calls of each key schedule before the faster is kept


def measure(name: str, chains: int, steps: int) -> dict:
    """Seconds for ``steps`` steps of ``chains`` chains (compiled and warmed up on first use)."""
    built_key = (name, chains, steps)
    if built_key not in _BUILT:
        runs, state, data = build(name, chains, steps)
        trials = {schedule: [] for schedule in runs}
        for i in range(TRIALS + 1):  # the first call compiles and is left out
            for schedule, run in runs.items():
                trials[schedule].append(timed(run, jax.random.key(i), state, data))
        # the peer keeps its faster key schedule: which one wins depends on C (the review of
        # 2026-11-25 read per step 4-10% faster at 4096 chains, up front 14% at 64 for SGLD)
        best = min(trials, key=lambda k: statistics.median(trials[k][1:]))
        _BUILT[built_key] = (best, runs[best], state, data, [TRIALS])
    schedule, run, state, data, calls = _BUILT[built_key]
    calls[0] += 1
    seconds = timed(run, jax.random.key(calls[0]), state, data)
    return {
        "side": "blackjax",
        "case": name,
        "chains": chains,
        "steps": steps,
        "keys": schedule,
        "seconds": seconds,
        "chain_steps_per_s": chains * steps / seconds,
        **VERSIONS,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--chains", help="banana chain counts, e.g. 64,4096")
    parser.add_argument("--serve", action="store_true", help="answer JSON requests on stdin")
    args = parser.parse_args()
    if args.serve:
        for line in sys.stdin:
            request = json.loads(line)
            print(json.dumps(measure(request["case"], request["chains"], request["steps"])))
            sys.stdout.flush()
        return
    banana = tuple(int(c) for c in args.chains.split(",")) if args.chains else None
    for name in CASES:
        for chains in case_chains(name, banana):
            print(json.dumps(measure(name, chains, args.steps)), flush=True)


if __name__ == "__main__":
    main()
