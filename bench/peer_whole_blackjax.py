"""BlackJAX's side of ``python -m bench whole``: ONE job as one whole process, as a user runs it.

Runs in bench/.peer-venv (``python -m bench setup-peer``), from the repository root:

    bench/.peer-venv/bin/python -m bench.peer_whole_blackjax banana-sgld-64 [--steps N]

The job (bench.whole.BLACKJAX_CASES names it): import jax, BlackJAX and arviz-stats; build the
banana's log density (bench.peer_blackjax) and the kernel; jit (ahead of time, timed apart); run
all chains keeping every ``thin``-th draw; then an ArviZ summary of the kept draws, bulk ESS and
rank R-hat per coordinate from arviz-stats' array layer (``arviz_stats.base.array_stats``, the
estimator Basin's summary calls), on the first ``--diagnose`` chains (the driver passes the
count Basin's summary takes; default all). It prints one JSON line: its own
timings (imports, compile, run, summary), the summary and the library versions. The driver times
the whole process from outside; these timings are for the record.

Keys follow BlackJAX's documented loop: one key a step, split into one key a chain. SGLD runs
with h = eps / 2 (bench.cases.blackjax_step_size: the same update as Basin's eps); NUTS with a
unit inverse mass matrix, a fixed step and ``max_num_doublings`` = Basin's ``max_depth``.
"""

from __future__ import annotations

import time

START = time.perf_counter()

import argparse  # noqa: E402  (after START: the imports are part of what is timed)
import json  # noqa: E402

import blackjax  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from arviz_stats.base import array_stats  # noqa: E402

from bench.cases import blackjax_step_size  # noqa: E402
from bench.peer_blackjax import VERSIONS, banana_logdensity  # noqa: E402
from bench.whole import BLACKJAX_CASES  # noqa: E402

IMPORTED = time.perf_counter()


def kernel(case: dict):
    """(init, step): step(key, state) -> (state, gradient evaluations of that step, per chain)."""
    logdensity = banana_logdensity()
    if case["sampler"] == "sgld":
        algorithm = blackjax.sgld(lambda w, _: jax.grad(logdensity)(w))
        h = blackjax_step_size("sgld", case["step_size"])

        def step(key, state):
            return algorithm.step(key, state, None, h), 1

        return algorithm.init, step
    algorithm = blackjax.nuts(
        logdensity, case["step_size"], jnp.ones(2), max_num_doublings=case["max_depth"]
    )

    def step(key, state):
        state, info = algorithm.step(key, state)
        return state, info.num_integration_steps

    return algorithm.init, step


def program(case: dict, steps: int):
    """run(key, position) -> (draws [kept, chains, 2], gradient evaluations of all chains)."""
    init, step = kernel(case)
    chains, thin = case["chains"], case["thin"]
    kept = steps // thin

    def one(carry, key):  # a step splits its own key into the chains' keys
        state, grads = carry
        state, n = jax.vmap(step)(jax.random.split(key, chains), state)
        return (state, grads + jnp.sum(n)), None

    def block(carry, keys):  # thin steps, then keep the position
        carry, _ = jax.lax.scan(one, carry, keys)
        return carry, getattr(carry[0], "position", carry[0])  # SGLD's state is the position

    @jax.jit
    def run(key, position):
        state = jax.vmap(init)(position)
        keys = jax.random.split(key, (kept, thin))
        (_, grads), draws = jax.lax.scan(block, (state, jnp.int32(0)), keys)
        return draws, grads

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("case", choices=tuple(BLACKJAX_CASES))
    parser.add_argument("--steps", type=int, help="steps (default: the case's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--diagnose", type=int, help="chains the summary takes (default all)")
    args = parser.parse_args()
    case = BLACKJAX_CASES[args.case]
    steps = args.steps or case["steps"]
    key = jax.random.key(args.seed)
    position = jax.random.normal(jax.random.fold_in(key, 1), (case["chains"], 2))

    t0 = time.perf_counter()
    compiled = program(case, steps).lower(key, position).compile()
    t1 = time.perf_counter()
    draws, grads = compiled(key, position)
    draws = np.asarray(jax.block_until_ready(draws)).transpose(1, 0, 2)  # [chain, draw, dim]
    t2 = time.perf_counter()
    diagnosed = draws[: args.diagnose or len(draws)]
    ess = array_stats.ess(diagnosed, chain_axis=0, draw_axis=1, method="bulk")
    rhat = array_stats.rhat(diagnosed, chain_axis=0, draw_axis=1, method="rank")
    t3 = time.perf_counter()
    grads = int(grads)
    out = {
        "side": "blackjax",
        "case": args.case,
        **case,
        "steps": steps,
        "kept": int(draws.shape[1]),
        "diagnosed_chains": len(diagnosed),
        "import_s": IMPORTED - START,
        "compile_s": t1 - t0,
        "run_s": t2 - t1,
        "summary_s": t3 - t2,
        "total_s": t3 - START,
        "ess_bulk": np.asarray(ess, np.float64).tolist(),
        "rhat": np.asarray(rhat, np.float64).tolist(),
        "grad_evals": grads,
        "grad_evals_per_s": grads / (t2 - t1),
        "arviz_stats": __import__("arviz_stats").__version__,
        **VERSIONS,
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
