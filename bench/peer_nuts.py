"""``python -m bench.peer_nuts``: Basin's NUTS against BlackJAX's (issue 59, section 3). Run
from the repository root with the peer virtualenv (``python -m bench setup-peer``); not in CI:

    python -m bench.peer_nuts [--chains 256] [--draws 400] [--seed 0]

Both sides run C chains from the same exact draws of the target (so every draw is a draw of
the target if the sampler is exact), at the same fixed step, unit metric and max_depth (Basin's
``max_depth``, BlackJAX's ``max_num_doublings``), both with Stan's divergence threshold
H - H0 > 1000, for D draws each:
- banana: step 0.1 (Basin's default), max_depth 10;
- funnel: Neal's funnel in 10 dimensions, step 0.25, max_depth 8: a step the neck cannot take,
  so both report divergent transitions there.
The two differ in their U-turn rule: Basin checks Stan's criterion on rho = sum of p with the
checks across every merge (samplers/nuts.py); BlackJAX 1.7.1's iterative NUTS checks
rho - (p_left + p_right) / 2 on each subtree and the whole tree (numpyro's form), without the
checks across merges. Their trees differ, their laws must not.

Per case and coordinate: the KS distance between the two sides' pooled draws against its bound
at the two sides' ESS (``samplers.diagnostics.ks_bound``, alpha 1e-3), and each side's KS
distance from 20,000 exact draws against its own bound. The ESS of a side is its smallest bulk
ESS over the coordinates (all chains): on the funnel each x_i decorrelates within a step or
two, but its marginal follows v, which mixes slowest, so x_i's own ESS would overstate what
its marginal has seen. Per side, also the bulk ESS of each coordinate, the divergent
transitions (count and fraction), the mean accept_stat and the mean leapfrog steps a draw
(gradient evaluations; Basin's counted by ``counting``, BlackJAX's ``num_integration_steps``).

The BlackJAX side is this module run by the peer's python with ``--peer REQUEST.json
OUT.npz``; only numpy is imported at the top, so the peer needs no torch. The request carries
the starts and a few points with Basin's energy U there, which the peer's log densities must
reproduce (-U, to 1e-10) before it samples.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest import mock

import numpy as np

BENCH = Path(__file__).resolve().parent
PEER_PYTHON = BENCH / ".peer-venv" / "bin" / "python"
CASES = {
    "banana": {"params": {}, "step": 0.1, "max_depth": 10},
    "funnel": {"params": {"dim": 10}, "step": 0.25, "max_depth": 8},
}
EXACT = 20_000  # exact draws each side is compared with
FUNNEL_SCALE = 3.0  # landscapes.potentials.Funnel.SCALE: v ~ N(0, 3^2)


# -- Basin's side (the main environment) ----------------------------------------------------------


def counting(params: dict):
    """Basin's NUTS that adds up each chain's leapfrog steps in ``grads`` ([C]): in lockstep
    the subtree's ``steps``, in the forest the chains that run at each leaf (``leaf``, to patch
    over ``Forest._leaf``). Both count the step that ends a tree, neither the rows a finished
    chain computes while the others go on."""
    from samplers.forest import Forest
    from samplers.nuts import NUTS

    class Counting(NUTS):
        grads = 0

        def _subtree(self, *args, **kwargs):
            sub = super()._subtree(*args, **kwargs)
            self.grads = self.grads + sub["steps"]
            return sub

    kernel, plain = Counting(**params), Forest._leaf

    def leaf(forest):
        kernel.grads = kernel.grads + forest.running
        plain(forest)

    return kernel, leaf


def basin(name: str, case: dict, chains: int, draws: int, seed: int) -> dict:
    """Basin's draws [D, C, d], divergent flags [D, C], accept_stat [D, C] and leapfrog steps
    [C]; the starts; exact draws; and U at a few points for the peer's check."""
    import torch

    import landscapes
    from samplers import REGISTRY
    from samplers.forest import Forest

    torch.set_num_threads(1)
    target = landscapes.make(name, dtype="float64", **case["params"])
    params = REGISTRY["nuts"].validate({"step_size": case["step"], "max_depth": case["max_depth"]})
    kernel, leaf = counting(params)
    g = torch.Generator().manual_seed(seed)
    start = target.exact_sample(g, chains)
    exact = target.exact_sample(torch.Generator().manual_seed(seed + 1), EXACT)
    state = kernel.init(start, target, g)
    with mock.patch.object(Forest, "_leaf", leaf):
        state, info = kernel.run(state, target, g, draws, positions=True)
    points = exact[:8]
    return {
        "start": start.numpy(),
        "exact": exact.numpy(),
        "draws": info.position.numpy(),
        "divergent": info.scalars["divergent"].numpy(),
        "accept": info.accepted.numpy(),
        "grads": np.asarray(kernel.grads, dtype=np.float64),
        "check": {"points": points.tolist(), "U": target.loss(points).tolist()},
    }


def peer(request: dict) -> dict[str, np.ndarray]:
    """BlackJAX's side: runs this module in the peer virtualenv."""
    with tempfile.TemporaryDirectory() as tmp:
        path, out = Path(tmp) / "request.json", Path(tmp) / "out.npz"
        path.write_text(json.dumps(request))
        done = subprocess.run(
            [str(PEER_PYTHON), "-m", "bench.peer_nuts", "--peer", str(path), str(out)],
            cwd=BENCH.parent,
            capture_output=True,
            text=True,
        )
        if done.returncode:
            raise RuntimeError(f"the BlackJAX peer failed:\n{done.stderr}")
        with np.load(out) as data:
            arrays = dict(data)
    arrays["versions"] = json.loads(done.stdout.strip().splitlines()[-1])
    return arrays


def compare(side: dict, other: dict, exact: np.ndarray) -> dict:
    """Per coordinate: the KS distances and bounds; per side: ESS, divergences, accept_stat."""
    from samplers import diagnostics

    out = {}
    for label, s in (("basin", side), ("blackjax", other)):
        draws = np.moveaxis(s["draws"], 0, 1)  # [C, D, d]
        ess = np.atleast_1d(diagnostics.ess_bulk(draws))
        pooled = draws.reshape(-1, draws.shape[-1])
        out[label] = {
            "ess": ess,
            "pooled": pooled,
            "ks_exact": diagnostics.ks_distance(pooled, exact),
            "bound_exact": diagnostics.ks_bound(ess.min(), len(exact)),
            "divergent": int(np.nansum(s["divergent"])),
            "fraction": float(np.nanmean(s["divergent"])),
            "accept": float(np.nanmean(s["accept"])),
            "leapfrog": float(np.sum(s["grads"]) / s["divergent"].size),
        }
    a, b = out["basin"], out["blackjax"]
    out["ks"] = diagnostics.ks_distance(a["pooled"], b["pooled"])
    out["bound"] = np.broadcast_to(
        diagnostics.ks_bound(a["ess"].min(), b["ess"].min()), out["ks"].shape
    )
    return out


def table(results: dict, chains: int, draws: int) -> str:
    rows = [
        f"NUTS, Basin against BlackJAX: {chains} chains from exact draws, {draws} draws each",
        "case    coord  KS(B,J) bound   ESS B   ESS J   KS(B,x) bound   KS(J,x) bound",
    ]
    for name, r in results.items():
        a, b = r["basin"], r["blackjax"]
        for i in range(len(r["ks"])):
            rows.append(
                f"{name:7} {i:5d}  {r['ks'][i]:.4f}  {r['bound'][i]:.4f}  {a['ess'][i]:6.0f}  "
                f"{b['ess'][i]:6.0f}  {a['ks_exact'][i]:.4f}  {a['bound_exact']:.4f}  "
                f"{b['ks_exact'][i]:.4f}  {b['bound_exact']:.4f}"
            )
    rows.append("case    side      divergent (fraction)  accept_stat  leapfrog/draw")
    for name, r in results.items():
        for label in ("basin", "blackjax"):
            s = r[label]
            rows.append(
                f"{name:7} {label:8}  {s['divergent']:9d} ({s['fraction']:.4f})  "
                f"{s['accept']:11.3f}  {s['leapfrog']:13.1f}"
            )
    within = all((r["ks"] <= r["bound"]).all() for r in results.values())
    exact = all(
        (r[side]["ks_exact"] <= r[side]["bound_exact"]).all()
        for r in results.values()
        for side in ("basin", "blackjax")
    )
    rows.append(f"every coordinate's KS(B,J) within its bound: {within}")
    rows.append(f"every coordinate's KS from the exact draws within its bound: {exact}")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chains", type=int, default=256)
    parser.add_argument("--draws", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--peer", nargs=2, metavar=("REQUEST", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        return peer_main(*args.peer)
    if not PEER_PYTHON.exists():
        sys.exit("BlackJAX peer missing: create it with `python -m bench setup-peer`")
    sides = {
        name: basin(name, case, args.chains, args.draws, args.seed) for name, case in CASES.items()
    }
    request = {
        "draws": args.draws,
        "seed": args.seed,
        "cases": {
            name: {**CASES[name], "start": s["start"].tolist(), "check": s["check"]}
            for name, s in sides.items()
        },
    }
    answer = peer(request)
    results = {
        name: compare(
            s,
            {k.split("/")[1]: v for k, v in answer.items() if k.startswith(f"{name}/")},
            s["exact"],
        )
        for name, s in sides.items()
    }
    print(table(results, args.chains, args.draws))
    print(json.dumps(answer["versions"]))


# -- BlackJAX's side (the peer virtualenv) ------------------------------------------------------


def logdensity(name: str, dim: int):
    """-U of Basin's banana (bench/peer_mclmc.py's) or of Neal's funnel, in jax (float64)."""
    import jax.numpy as jnp

    if name == "banana":
        from bench.peer_mclmc import banana_logdensity

        return banana_logdensity()

    def funnel(w):
        x, v = w[:-1], w[-1]
        return -(
            v * v / (2 * FUNNEL_SCALE**2) + 0.5 * (dim - 1) * v + 0.5 * jnp.sum(x * x) * jnp.exp(-v)
        )

    return funnel


def peer_main(request_path: str, out_path: str) -> None:
    import jax

    jax.config.update("jax_enable_x64", True)
    import blackjax
    import jax.numpy as jnp

    request = json.loads(Path(request_path).read_text())
    out = {}
    for name, case in request["cases"].items():
        start = jnp.asarray(case["start"])
        chains, dim = start.shape
        density = logdensity(name, dim)
        points, u = jnp.asarray(case["check"]["points"]), np.asarray(case["check"]["U"])
        mine = -np.asarray(jax.vmap(density)(points))
        if not np.allclose(mine, u, rtol=1e-10, atol=1e-10):
            raise SystemExit(f"{name}: the peer's -log density {mine} is not Basin's U {u}")
        nuts = blackjax.nuts(
            density,
            case["step"],
            jnp.ones(dim),
            max_num_doublings=case["max_depth"],
            divergence_threshold=1000,
        )
        step = jax.vmap(nuts.step)

        def body(states, key, step=step, chains=chains):
            states, info = step(jax.random.split(key, chains), states)
            record = (states.position, info.is_divergent, info.acceptance_rate)
            return states, (*record, info.num_integration_steps)

        keys = jax.random.split(jax.random.key(request["seed"]), request["draws"])
        states = jax.vmap(nuts.init)(start)
        _, (draws, divergent, accept, steps) = jax.jit(
            lambda states, keys, body=body: jax.lax.scan(body, states, keys)
        )(states, keys)
        out[f"{name}/draws"] = np.asarray(draws)
        out[f"{name}/divergent"] = np.asarray(divergent, dtype=np.float64)
        out[f"{name}/accept"] = np.asarray(accept)
        out[f"{name}/grads"] = np.asarray(steps, dtype=np.float64).sum(0)
        print(f"BlackJAX {name} done", file=sys.stderr, flush=True)
    np.savez(out_path, **out)
    print(json.dumps({"blackjax": blackjax.__version__, "jax": jax.__version__}))


if __name__ == "__main__":
    main()
