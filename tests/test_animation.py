"""The animated view's data: the first steps traced with every proposal (RunSpec.record.animate)
without changing the run, and packed for the browser player (charts.animation)."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from charts import animation
from runs.loop import ANIMATED_CHAINS, execute
from runs.spec import parse_spec
from runs.store import Store


def run(home, sampler: str, params: dict, animate: int, chains: int = 12, steps: int = 300):
    spec = parse_spec(
        {
            "target": {"name": "donut"},
            "sampler": {"name": sampler, "params": params},
            "chains": chains,
            "steps": steps,
            "seed": 5,
            "compile": "never",
            "record": {"animate": animate},
        }
    )
    store = Store(home)
    run_id = store.create(spec.model_dump(mode="json"))
    execute(spec, store, run_id)
    trace = {
        n: store.get_array(run_id, f"trace.{n}")
        for n in ("position", "proposal", "accepted", "path")
    }
    return store.read(run_id, names=["position", "accepted"]), trace


@pytest.mark.parametrize(
    "sampler, params",
    [
        ("mala", {"step_size": 0.5}),
        ("hmc", {"step_size": 0.3, "leapfrog_steps": 6}),
        ("rwmh", {"step_size": 1.0}),
    ],
)
def test_the_trace_holds_every_proposal_and_leaves_the_run_unchanged(tmp_path, sampler, params):
    plain, _ = run(tmp_path / "a", sampler, params, animate=0)
    records, trace = run(tmp_path / "b", sampler, params, animate=100)
    # the same draws whether traced or not: tracing reads the noise the run reads
    np.testing.assert_array_equal(plain["position"], records["position"])
    k = ANIMATED_CHAINS
    position, proposal, accepted = trace["position"], trace["proposal"], trace["accepted"]
    assert position.shape == (101, k, 2) and proposal.shape == (100, k, 2)
    np.testing.assert_array_equal(position[1:], records["position"][:100, :k])
    ok = accepted > 0.5
    assert 0 < ok.mean() < 1  # both kinds occur at these steps
    np.testing.assert_array_equal(ok, records["accepted"][:100, :k])
    np.testing.assert_array_equal(position[1:][ok], proposal[ok])  # accepted: moved there
    np.testing.assert_array_equal(position[1:][~ok], position[:-1][~ok])  # rejected: stayed
    assert (proposal[~ok] != position[:-1][~ok]).any(-1).all()  # and the proposal was elsewhere
    if sampler == "hmc":
        path = trace["path"]
        assert path.shape == (100, k, 7, 2)
        np.testing.assert_array_equal(path[:, :, 0], position[:-1])  # from where it stood
        np.testing.assert_array_equal(path[:, :, -1], proposal)  # to what it proposed
    else:
        assert trace["path"] is None


def test_a_kernel_without_mh_traces_its_moves_as_proposals(tmp_path):
    _, trace = run(tmp_path, "sgld", {"step_size": 0.01}, animate=50, chains=3)
    assert trace["position"].shape == (51, 3, 2)  # fewer chains than ANIMATED_CHAINS: all
    np.testing.assert_array_equal(trace["proposal"], trace["position"][1:])
    assert (trace["accepted"] == 1).all()


def test_the_payload_is_float32_base64_on_a_square_view():
    rng = np.random.default_rng(0)
    trace = {
        "position": rng.normal(size=(11, 2, 3)).astype(np.float32),
        "proposal": rng.normal(size=(10, 2, 3)).astype(np.float32),
        "accepted": np.ones((10, 2), np.float32),
        "path": rng.normal(size=(10, 2, 100, 3)).astype(np.float32),
    }
    p = animation.panel("hmc", trace)
    assert (p["T"], p["k"], p["L"]) == (10, 2, animation.PATH_POINTS)
    decoded = np.frombuffer(base64.b64decode(p["position"]), "<f4").reshape(11, 2, 2)
    np.testing.assert_array_equal(decoded, trace["position"][..., :2])
    path = np.frombuffer(base64.b64decode(p["path"]), "<f4").reshape(10, 2, -1, 2)
    np.testing.assert_array_equal(path[:, :, 0], trace["path"][:, :, 0, :2])  # both ends kept
    np.testing.assert_array_equal(path[:, :, -1], trace["path"][:, :, -1, :2])
    assert animation.square_view([(-4, 4), (-1, 1)]) == [-4, 4, -4, 4]
