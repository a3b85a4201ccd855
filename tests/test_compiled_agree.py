"""The compiled chunk is the eager step on the same draws, kernel by kernel: every step's records
and the final state agree to float rounding over 50 steps. Apart from tests/test_compiled.py so
that the two files' compiles (tens of seconds each) run on both of pytest's workers."""

import os

import pytest
import torch

import landscapes
import samplers
from samplers.base import Noise

DEVICE = os.environ.get("BASIN_TEST_DEVICE", "cpu")  # as tests/test_compiled.py
pytestmark = [
    pytest.mark.compile,
    pytest.mark.filterwarnings("error:steps run eagerly"),  # a failed compile fails, not hides
]


CASES = [
    ("banana", "sgld", {"step_size": 0.01}),
    ("banana", "mala", {"step_size": 0.05}),
    ("banana", "hmc", {"step_size": 0.1, "leapfrog_steps": 3, "jitter": True}),
    ("banana", "sgnht", {"step_size": 0.01}),
    ("banana", "adam-sgld", {"step_size": 0.01}),
    ("banana", "baoab", {"step_size": 0.05}),
    # minibatch indices from the stream, and an autograd gradient traced through torch.func
    ("tanh", "sgld", {"step_size": 1e-4, "batch_size": 10}),
    # full batch: the data a constant of the graph
    ("mlp", "sgld", {"step_size": 1e-5}),
    # a user's nn.Module: compiled, each chain's gradient by torch.func.grad inside vmap
    ("model", "sgld", {"step_size": 1e-4, "batch_size": 16}),
]


def build(target_name: str, dtype: str = "float64") -> landscapes.Target:
    params = {
        "tanh": {"hidden": 2, "n": 100},
        "mlp": {"hidden_sizes": (4,)},
        "model": {"factory": "tests/model_factories.py:small_regression"},
    }.get(target_name, {})
    return landscapes.make(target_name, device=DEVICE, dtype=dtype, **params)


def start(target, kernel, chains=16, seed=0):
    g = torch.Generator(DEVICE).manual_seed(seed)
    x0 = target.exact_sample(g, chains) if target.exact_sample else target.initial(g, chains)
    state = kernel.init(x0, target, g)
    return state, Noise(kernel.draws(target, chains, target.dim), g, state.position.dtype, 8)


@pytest.mark.slow
@pytest.mark.parametrize(("target_name", "name", "params"), CASES)
def test_compiled_and_eager_runs_agree_over_the_first_50_steps(target_name, name, params):
    """Six compiled blocks of 8 steps and the 2 steps left, through the chunk padded to a block,
    against 50 eager steps, from the same seed: every step's position, loss, acceptance, flags
    and scalars, and the final state."""
    target, kernel = build(target_name), samplers.make(name, **params)
    runs = []
    for compiled in (False, True):
        state, noise = start(target, kernel)
        runs.append(kernel.run(state, target, noise, 50, compiled=compiled, positions=True))
    (eager, want), (fused, got) = runs
    close = {"rtol": 1e-9, "atol": 1e-12}  # float64: rounding only
    torch.testing.assert_close(got.position, want.position, **close)
    torch.testing.assert_close(got.loss, want.loss, **close)
    assert torch.equal(got.accepted, want.accepted) and torch.equal(got.diverged, want.diverged)
    assert got.scalars.keys() == want.scalars.keys() == kernel.observe(eager).keys()
    for key in want.scalars:
        torch.testing.assert_close(got.scalars[key], want.scalars[key], **close)
    assert type(fused) is type(eager)
    for key, value in vars(eager).items():
        if value is not None:
            torch.testing.assert_close(getattr(fused, key), value, **close)
