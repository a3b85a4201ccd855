"""The compiled chunk is the eager step on the same draws, kernel by kernel: every step's records
and the final state agree to float rounding over 50 steps. The chunk's other paths check on the
chunks these cases compile (one compile, two checks): a compile in a background thread (hmc),
CUDA's loop of compiled steps and a part of a block (mala). Apart from tests/test_compiled.py so
that the two files' compiles (tens of seconds each) run on both of pytest's workers."""

import os
import time

import pytest
import torch

import landscapes
import samplers
from samplers.base import Noise
from samplers.compiled import chunk_for

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
    # a block as NUTS's forest whose iteration is compiled (samplers.compiled_forest)
    ("banana", "nuts", {"step_size": 0.3}),
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
def test_a_compile_in_a_background_thread_serves_the_callers_thread():
    # torch keeps the compiler's settings per thread: the compile runs in a thread of its own
    # while the caller steps eagerly, then the caller runs the compiled block. First in this
    # file, it compiles the banana-hmc chunk of CASES (16 chains, blocks of 8, positions), which
    # that case then loads from the session's cache (samplers.cache): one compile, two checks.
    ((target_name, name, params),) = [case for case in CASES if case[1] == "hmc"]
    target, kernel = build(target_name), samplers.make(name, **params)
    state, noise = start(target, kernel)
    chunk = chunk_for(kernel, target, state, noise.length, True)
    blocks = 0
    while not (chunk.ready or chunk.failed):
        state, _ = kernel.run(state, target, noise, noise.left or noise.length)
        blocks += 1
        # a pause between blocks: the compile's thread gets the GIL and the core, where an
        # unpaced loop took ~half of them and doubled the compile's time
        time.sleep(0.05)
    assert chunk.ready, chunk.error
    assert blocks > 0  # the caller did step while the compile ran (no package was on disk)
    assert chunk_for(kernel, target, state, noise.length, True) is chunk  # reused
    block = noise.take(noise.length)
    want, _ = kernel.eager(state, target, block)
    got, _ = chunk(state, block)
    torch.testing.assert_close(got.position, want.position, rtol=1e-9, atol=1e-12)


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
    if kernel.fractional_acceptance:  # NUTS's accept_stat, a mean of exp(H0 - H): rounding
        torch.testing.assert_close(got.accepted, want.accepted, **close)
    else:
        assert torch.equal(got.accepted, want.accepted)
    assert torch.equal(got.diverged, want.diverged)
    assert got.scalars.keys() == want.scalars.keys() == kernel.observe(eager).keys()
    for key in want.scalars:
        torch.testing.assert_close(got.scalars[key], want.scalars[key], **close)
    assert type(fused) is type(eager)
    for key, value in vars(eager).items():
        if value is not None:
            torch.testing.assert_close(getattr(fused, key), value, **close)


# The two tests below build the banana-mala chunk of CASES (16 chains, blocks of 8, positions):
# the scan's is the very package the case above compiled and filed in the session's cache
# (samplers.cache, keyed by value), so here it loads in milliseconds: one compile, two checks.
# The loop's (torch.compile of one step) is compiled once and serves both of its tests.


@pytest.mark.slow
def test_the_loop_of_compiled_steps_cudas_path_equals_the_eager_steps():
    """On CUDA a block is the compiled step called once per row (no scan): run here on a CPU."""
    from samplers.compiled import Chunk

    target, kernel = build("banana"), samplers.make("mala", step_size=0.05)
    state, noise = start(target, kernel)
    block = noise.take(noise.length)
    chunk = Chunk(kernel, target, state, noise.length, True, loop=True)
    got, info = chunk(state, block)
    want, eager = kernel.eager(state, target, block, positions=True)
    torch.testing.assert_close(info.position, eager.position, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(got.U, want.U, rtol=1e-9, atol=1e-12)
    assert torch.equal(info.accepted, eager.accepted)


@pytest.mark.parametrize("loop", [False, True])
def test_a_part_of_a_block_through_the_chunk_equals_its_eager_steps(loop):
    """3 rows of an 8-step chunk: the scan pads them and masks the padding's steps, the loop
    (CUDA's path) steps 3 times; both are the 3 eager steps, and the state after them."""
    from samplers.compiled import Chunk

    target, kernel = build("banana"), samplers.make("mala", step_size=0.05)
    state, noise = start(target, kernel)
    part = {k: v[:3] for k, v in noise.take(noise.length).items()}
    chunk = Chunk(kernel, target, state, noise.length, True, loop=loop)
    assert not chunk.usable(1) and chunk.usable(2) and chunk.usable(8)
    got, info = chunk(state, part)
    want, eager = kernel.eager(state, target, part, positions=True)
    assert info.loss.shape == eager.loss.shape == (3, 16)
    torch.testing.assert_close(info.position, eager.position, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(info.loss, eager.loss, rtol=1e-9, atol=1e-12)
    for key, value in vars(want).items():
        torch.testing.assert_close(getattr(got, key), value, rtol=1e-9, atol=1e-12)
    assert torch.equal(info.accepted, eager.accepted)
    with pytest.raises(ValueError, match="chunk of 8 steps got 12 rows"):
        chunk(state, {k: torch.cat([v, v, v, v[:3]]) for k, v in part.items()})


def test_a_part_of_a_block_through_the_compiled_forest_equals_its_eager_steps():
    """5 rows of the banana-nuts case's 8-step chunk (loaded from the session's cache): the
    draws padded to the block, the chains stopping after 5 steps."""
    from samplers.compiled_forest import ForestChunk

    target, kernel = build("banana"), samplers.make("nuts", step_size=0.3)
    state, noise = start(target, kernel)
    part = {k: v[:5] for k, v in noise.take(noise.length).items()}
    chunk = ForestChunk(kernel, target, state, noise.length, True)
    assert not chunk.usable(5) and chunk.usable(8)  # fewer than 8 steps go in lockstep
    got, info = chunk(state, part)
    want, eager = kernel.eager(state, target, part, positions=True)
    assert info.loss.shape == eager.loss.shape == (5, 16)
    close = {"rtol": 1e-9, "atol": 1e-12}
    torch.testing.assert_close(info.position, eager.position, **close)
    torch.testing.assert_close(info.accepted, eager.accepted, **close)
    torch.testing.assert_close(info.scalars["divergent"], eager.scalars["divergent"])
    for key, value in vars(want).items():
        torch.testing.assert_close(getattr(got, key), value, **close)
