"""The compiled multi-step path computes exactly what the eager steps compute on the same noise,
and ``run(fused=True)`` hands back a consistent state and per-step Info."""

import pytest
import torch

import landscapes
import samplers
from samplers.fused import Recorder, chunk_steps

CASES = [
    ("sgld", {"step_size": 0.01}),
    ("mala", {"step_size": 0.05}),
    ("hmc", {"step_size": 0.1, "leapfrog_steps": 3, "jitter": True}),
    ("sgnht", {"step_size": 0.01}),
    ("baoab", {"step_size": 0.05}),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "params"), CASES)
def test_compiled_chunk_equals_eager_chunk_on_the_same_noise(name, params):
    target = landscapes.make("banana", device="cpu", dtype="float64")
    kernel = samplers.make(name, **params)
    g = torch.Generator().manual_seed(0)
    state = kernel.init(target.exact_sample(g, 16), target, g)
    recorder = Recorder(g)
    state, _ = kernel.step(state, target, recorder)  # learns the draws of one step
    steps = 4
    noise = recorder.prepare(steps)
    args = (state.position, state.center, state.diverged, state.aux, noise)
    eager = chunk_steps(kernel, target, steps)(*args)
    compiled = torch.compile(chunk_steps(kernel, target, steps), dynamic=False)(*args)
    torch.testing.assert_close(compiled[0], eager[0], rtol=1e-9, atol=1e-12)  # positions
    torch.testing.assert_close(compiled[3], eager[3], rtol=1e-9, atol=1e-12)  # losses
    assert torch.equal(compiled[1], eager[1]) and torch.equal(compiled[4], eager[4])
    for key in eager[2]:
        torch.testing.assert_close(compiled[2][key], eager[2][key], rtol=1e-9, atol=1e-12)


@pytest.mark.slow
def test_fused_run_shapes_and_stationarity():
    target = landscapes.make("banana", device="cpu", dtype="float32")
    kernel = samplers.make("mala", step_size=0.05)
    g = torch.Generator().manual_seed(1)
    state = kernel.init(target.exact_sample(g, 2000), target, g)
    state, info = kernel.run(state, target, g, 2 * 8 + 3, fused=True, chunk=8)
    assert state.step == 19 and info.loss.shape == (19, 2000) and info.accepted.shape == (19, 2000)
    # exact draws stay exact under MALA: E x0 = 0, Var x0 = 4, E x1 = 0.4 (within ~5 SE)
    x = state.position.double()
    assert abs(x[:, 0].mean()) < 5 * 2 / 2000**0.5
    assert abs(x[:, 0].var() - 4) < 5 * 4 * (2 / 2000) ** 0.5
    assert abs(x[:, 1].mean() - 0.4) < 5 * x[:, 1].std() / 2000**0.5


def test_minibatch_runs_ignore_fused_and_keep_the_eager_random_stream():
    target = landscapes.make("tanh", hidden=2, n=100, device="cpu", dtype="float64")
    kernel = samplers.make("sgld", step_size=1e-4, batch_size=10)
    finals = []
    for fused in (False, True):
        g = torch.Generator().manual_seed(3)
        state = kernel.init(target.initial(g, 4), target, g)
        finals.append(kernel.run(state, target, g, 40, fused=fused)[0].position)
    assert torch.equal(finals[0], finals[1])
