"""The compiled chunk is the eager step on the same draws: trajectories agree to float rounding,
a run's first steps never depend on how many follow, and the noise stream is one for both. (A
compile in a background thread, the chunk's loop and a part of a block: test_compiled_agree.py.)"""

import math
import os

import pytest
import torch
from test_compiled_agree import build, start

import landscapes
import samplers
from samplers.base import Draw, Noise
from samplers.compiled import chunk_for
from samplers.llc import Paired

# The tests' device: the CPU, as CI has it; BASIN_TEST_DEVICE=cuda runs the same tests on a GPU.
DEVICE = os.environ.get("BASIN_TEST_DEVICE", "cpu")
pytestmark = [
    pytest.mark.compile,  # every test here compiles the chunk
    pytest.mark.filterwarnings("error:steps run eagerly"),  # a failed compile fails, not hides
]


def test_a_runs_first_steps_do_not_depend_on_how_many_follow():
    target, kernel = build("banana"), samplers.make("mala", step_size=0.05)
    state, noise = start(target, kernel)
    _, whole = kernel.run(state, target, noise, 30, positions=True)
    state, noise = start(target, kernel)
    state, first = kernel.run(state, target, noise, 11, positions=True)  # a cut mid-block
    _, rest = kernel.run(state, target, noise, 19, positions=True)
    assert torch.equal(whole.position, torch.cat([first.position, rest.position]))
    assert torch.equal(whole.accepted, torch.cat([first.accepted, rest.accepted]))


def test_the_noise_stream_gives_the_same_numbers_however_its_blocks_are_read():
    draws = {
        "xi": Draw("normal", (3, 2)),
        "u": Draw("uniform", (3,)),
        "i": Draw("integers", (4,), 9),
    }
    a = Noise(draws, torch.Generator(DEVICE).manual_seed(4), torch.float32, 8)
    b = Noise(draws, torch.Generator(DEVICE).manual_seed(4), torch.float32, 8)
    whole = [a.take(8), a.take(8)]
    parts = [b.take(3), b.take(5), b.take(1), b.take(7)]
    for key in draws:
        torch.testing.assert_close(
            torch.cat([w[key] for w in whole]), torch.cat([p[key] for p in parts]), rtol=0, atol=0
        )
    g = torch.Generator(DEVICE).manual_seed(4)  # a block: one call per draw, in the listed order
    assert torch.equal(whole[0]["xi"], torch.randn(8, 3, 2, generator=g, device=DEVICE))
    assert torch.equal(whole[0]["u"], torch.rand(8, 3, generator=g, device=DEVICE))
    assert whole[0]["i"].min() >= 0 and whole[0]["i"].max() < 9
    b.take(7)
    with pytest.raises(ValueError, match="left in this block"):
        b.take(2)  # past the block's end: the caller must stop at the boundary
    # the length follows from the shapes alone: 32 MiB of draws at most, 256 steps at most
    assert Noise({"xi": Draw("normal", (64, 2))}, g, torch.float32).length == 256
    big = Noise({"xi": Draw("normal", (8, 1 << 20))}, g, torch.float32)
    assert big.length == 1 and big.length * 8 * 4 << 20 <= 32 << 20


@pytest.mark.slow
def test_a_big_cpu_draw_is_eight_streams_seeded_from_the_generator_whatever_the_threads():
    """A draw of 2^20 numbers or more on a CPU: PARTS streams, each seeded by the run's
    generator, drawn on several threads; the numbers do not depend on how many."""
    from runs.worker import torch_threads
    from samplers.base import PARTS, SPLIT

    draws = {"xi": Draw("normal", (2, SPLIT // 2)), "u": Draw("uniform", (3,))}
    blocks = []
    for threads in (1, 2):
        with torch_threads(threads):
            blocks.append(Noise(draws, torch.Generator().manual_seed(5), torch.float32, 1).take(1))
    assert all(torch.equal(blocks[0][k], blocks[1][k]) for k in draws)
    g = torch.Generator().manual_seed(5)  # the streams rebuilt by hand, in the listed order
    seeds = torch.randint(1 << 62, (PARTS,), generator=g).tolist()
    parts = [torch.randn(SPLIT // PARTS, generator=torch.Generator().manual_seed(s)) for s in seeds]
    assert torch.equal(blocks[0]["xi"].reshape(-1), torch.cat(parts))
    assert torch.equal(blocks[0]["u"], torch.rand(1, 3, generator=g))  # the stream goes on
    xi = blocks[0]["xi"].double()  # N(0, 1): mean and variance within 5 standard errors
    assert abs(float(xi.mean())) < 5 / SPLIT**0.5
    assert abs(float(xi.var()) - 1) < 5 * (2 / SPLIT) ** 0.5


def test_a_paired_compiled_chunk_reports_w0s_loss_on_each_steps_batch():
    """And a run at another w0 reuses the same pairing and compiled chunk, with w0's losses
    rewritten in place: the chunk then reports the new w0's."""
    target = build("tanh")
    g = torch.Generator(DEVICE).manual_seed(0)
    plain = samplers.make("sgld", step_size=1e-4, batch_size=10)
    chunks = []
    for w0 in target.initial(g, 2):
        kernel = Paired.of(plain, target, w0)
        state = kernel.init(w0.expand(4, -1) + 0.01, target, g)
        noise = kernel.noise_for(state, target, g)
        block = noise.take(noise.length)
        chunks.append(chunk_for(kernel, target, state, noise.length, False, wait=True))
        _, info = chunks[-1](state, block)
        for i in range(3):  # w0's loss on each chain's batch of step i, evaluated directly
            want = target.loss(w0.expand(4, -1), target.batch(block["index"][i]))
            torch.testing.assert_close(info.scalars["center_loss"][i], want)
    assert chunks[0] is chunks[1]


@pytest.mark.slow
def test_a_chain_diverging_inside_a_compiled_block_is_flagged_from_that_step():
    # SGLD at eps a = 10 multiplies w by -4 per step, so the loss w^2/2 overflows float32 ~29
    # steps from |w| = 100 and sooner from farther out: four chains, four different steps.
    target = landscapes.make("gaussian", dim=1, device=DEVICE, dtype="float32")
    kernel = samplers.make("sgld", step_size=10.0)
    x0 = torch.tensor([[1e2], [1e4], [1e8], [1e12]], device=DEVICE)
    runs = []
    for compiled in (False, True):
        g = torch.Generator(DEVICE).manual_seed(2)
        runs.append(kernel.run(kernel.init(x0, target, g), target, g, 80, compiled=compiled)[1])
    eager, fused = runs
    first = [int(d.nonzero()[0]) for d in fused.diverged.T]  # each chain's first flagged step
    assert first == sorted(first, reverse=True) and len(set(first)) == 4 and first[0] < 80
    assert torch.equal(fused.diverged, eager.diverged)
    assert torch.equal(fused.diverged, fused.loss.isnan())
    assert torch.equal(fused.accepted, (~fused.diverged).float())


@pytest.mark.parametrize("name", ["sghmc", "sgnht", "baoab"])
def test_each_step_records_the_kinetic_energy_and_thermostat_of_its_state(name):
    target = landscapes.make("banana", device=DEVICE, dtype="float64")
    kernel = samplers.make(name, step_size=0.01)
    g = torch.Generator(DEVICE).manual_seed(0)
    state = kernel.init(target.exact_sample(g, 8), target, g)
    for _ in range(3):
        state, info = kernel.run(state, target, g, 1)
        p = state.p  # recomputed here, independently of ``observe``
        torch.testing.assert_close(info.scalars["kinetic"][0], 0.5 * (p**2).sum(-1))
        if name == "sgnht":
            assert torch.equal(info.scalars["thermostat"][0], state.alpha)
    assert math.isfinite(float(info.loss.sum()))
    mala = samplers.make("mala", step_size=0.1)
    assert mala.run(mala.init(state.position, target, g), target, g, 1)[1].scalars == {}
