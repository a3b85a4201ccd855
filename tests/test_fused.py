"""The compiled multi-step path computes exactly what the eager steps compute on the same noise,
and ``run(fused=True)`` hands back a consistent state and per-step Info."""

import os

import pytest
import torch

import landscapes
import samplers
from samplers import fused as fusedmod
from samplers.base import draw
from samplers.fused import Recorder, Replay, chunk_steps, compiled_entry

# The tests' device: the CPU, as CI has it; BASIN_TEST_DEVICE=cuda runs the same tests on a GPU.
DEVICE = os.environ.get("BASIN_TEST_DEVICE", "cpu")

CASES = [
    ("banana", "sgld", {"step_size": 0.01}),
    ("banana", "mala", {"step_size": 0.05}),
    ("banana", "hmc", {"step_size": 0.1, "leapfrog_steps": 3, "jitter": True}),
    ("banana", "sgnht", {"step_size": 0.01}),
    ("banana", "rmsprop-sgld", {"step_size": 0.01}),
    ("banana", "adam-sgld", {"step_size": 0.01}),
    ("banana", "baoab", {"step_size": 0.05}),
    # minibatch indices replayed, and an autograd gradient traced through torch.func
    ("tanh", "sgld", {"step_size": 1e-4, "batch_size": 10}),
    # full batch: the data a constant of the graph, laid out features first by the network
    ("mlp", "sgld", {"step_size": 1e-5}),
]


def build(target_name: str, dtype: str = "float64") -> landscapes.Target:
    params = {"tanh": {"hidden": 2, "n": 100}, "mlp": {"hidden_sizes": (4,)}}.get(target_name, {})
    return landscapes.make(target_name, device=DEVICE, dtype=dtype, **params)


@pytest.mark.slow
@pytest.mark.parametrize(("target_name", "name", "params"), CASES)
def test_compiled_chunk_equals_eager_chunk_on_the_same_noise(target_name, name, params):
    target = build(target_name)
    kernel = samplers.make(name, **params)
    g = torch.Generator(DEVICE).manual_seed(0)
    start = target.exact_sample(g, 16) if target.exact_sample else target.initial(g, 16)
    state = kernel.init(start, target, g)
    recorder = Recorder(g)
    state, _ = kernel.step(state, target, recorder)  # learns the draws of one step
    steps = 4
    noise = recorder.prepare(steps)
    active = torch.tensor([True, True, True, False], device=DEVICE)  # the last step pads the chunk
    args = (state.position, state.center, state.diverged, state.aux, noise, active)
    eager = chunk_steps(kernel, target, positions=True)(*args)
    three = chunk_steps(kernel, target)(*args[:4], [n[:3] for n in noise], active[:3])
    assert torch.equal(three[0], eager[0]) and torch.equal(three[1], eager[1])  # pad: a no-op
    plain = state
    for i in range(3):  # the scan is the plain loop of kernel.step on the same draws
        plain, info = kernel.step(plain, target, Replay([n[i] for n in noise]))
        torch.testing.assert_close(info.loss, eager[3].loss[i], rtol=1e-12, atol=0)
        torch.testing.assert_close(plain.position, eager[3].position[i], rtol=1e-12, atol=0)
    torch.testing.assert_close(plain.position, eager[0], rtol=1e-12, atol=0)
    compiled = compiled_entry(kernel, target, state, positions=True).chunk(*args)
    torch.testing.assert_close(compiled[0], eager[0], rtol=1e-9, atol=1e-12)  # final positions
    assert torch.equal(compiled[1], eager[1])  # diverged
    got, want = compiled[3], eager[3]  # per step
    torch.testing.assert_close(got.loss, want.loss, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(got.position, want.position, rtol=1e-9, atol=1e-12)
    assert torch.equal(got.accepted, want.accepted) and torch.equal(got.diverged, want.diverged)
    assert got.scalars.keys() == want.scalars.keys() == kernel.observe(plain).keys()
    for key in want.scalars:
        torch.testing.assert_close(got.scalars[key], want.scalars[key], rtol=1e-9, atol=1e-12)
    for key in eager[2]:
        torch.testing.assert_close(compiled[2][key], eager[2][key], rtol=1e-9, atol=1e-12)


@pytest.mark.slow
def test_fused_run_shapes_and_stationarity():
    target = landscapes.make("banana", device=DEVICE, dtype="float32")
    kernel = samplers.make("mala", step_size=0.05)
    g = torch.Generator(DEVICE).manual_seed(1)
    state = kernel.init(target.exact_sample(g, 2000), target, g)
    state, info = kernel.run(state, target, g, 2 * 8 + 3, fused=True, chunk=8, positions=True)
    assert state.step == 19 and info.loss.shape == (19, 2000) and info.accepted.shape == (19, 2000)
    assert info.position.shape == (19, 2000, 2) and torch.equal(info.position[-1], state.position)
    # exact draws stay exact under MALA: E x0 = 0, Var x0 = 4, E x1 = 0.4 (within ~5 SE)
    x = state.position.double()
    assert abs(x[:, 0].mean()) < 5 * 2 / 2000**0.5
    assert abs(x[:, 0].var() - 4) < 5 * 4 * (2 / 2000) ** 0.5
    assert abs(x[:, 1].mean() - 0.4) < 5 * x[:, 1].std() / 2000**0.5


@pytest.mark.slow
def test_fused_info_flags_each_chain_from_the_step_it_diverged():
    # SGLD at eps a = 10 multiplies w by -4 per step, so the loss w^2/2 overflows float32 ~29
    # steps from |w| = 100 and sooner from farther out: four chains, four different steps. The
    # noise (sqrt(10) per step) is under 4% of w from the start, so it never moves the step.
    target = landscapes.make("gaussian", dim=1, device=DEVICE, dtype="float32")
    kernel = samplers.make("sgld", step_size=10.0)
    start = torch.tensor([[1e2], [1e4], [1e8], [1e12]], device=DEVICE)
    runs = []
    for fused in (False, True):
        g = torch.Generator(DEVICE).manual_seed(2)
        runs.append(kernel.run(kernel.init(start, target, g), target, g, 80, fused=fused)[1])
    eager, fused = runs
    first = [int(d.nonzero()[0]) for d in fused.diverged.T]  # each chain's first flagged step
    assert first == sorted(first, reverse=True) and len(set(first)) == 4 and first[0] < 80
    assert torch.equal(fused.diverged, eager.diverged)  # the growth, not the noise, decides
    assert torch.equal(fused.diverged, fused.loss.isnan())
    assert torch.equal(fused.accepted, (~fused.diverged).float())


@pytest.mark.parametrize("name", ["sghmc", "sgnht", "baoab"])
def test_each_step_records_the_kinetic_energy_and_thermostat_of_its_state(name):
    target = landscapes.make("banana", device=DEVICE, dtype="float64")
    kernel = samplers.make(name, step_size=0.01)
    g = torch.Generator(DEVICE).manual_seed(0)
    state = kernel.init(target.exact_sample(g, 8), target, g)
    for _ in range(3):
        state, info = kernel.step(state, target, g)
        p = state.aux["p"]  # recomputed here, independently of ``observe``
        torch.testing.assert_close(info.scalars["kinetic"], 0.5 * (p**2).sum(-1))
        if name == "sgnht":
            assert torch.equal(info.scalars["thermostat"], state.aux["alpha"])
    state, info = kernel.run(state, target, g, 5)
    assert info.scalars["kinetic"].shape == (5, 8)
    mala = samplers.make("mala", step_size=0.1)
    assert mala.step(mala.init(state.position, target, g), target, g)[1].scalars == {}


def test_noise_filled_into_reused_buffers_equals_fresh_draws():
    plan = [
        ("normal", (3, 5), torch.float32, None),
        ("uniform", (3,), torch.float64, None),
        ("integers", (7,), torch.int64, 100),
    ]
    fresh, reused = (
        Recorder(torch.Generator(DEVICE).manual_seed(5)),
        Recorder(torch.Generator(DEVICE)),
    )
    fresh.plan = reused.plan = plan
    reused.generator.manual_seed(5)
    buffers = [torch.zeros(4, *shape, dtype=dtype, device=DEVICE) for _, shape, dtype, _ in plan]
    for _ in range(2):  # the second chunk's draws go into the first chunk's buffers
        want, got = fresh.prepare(4), reused.prepare(4, buffers)
        assert all(g is b for g, b in zip(got, buffers, strict=True))
        assert all(torch.equal(w, g) for w, g in zip(want, got, strict=True))
    assert len(set(buffers[2].flatten().tolist())) > 10  # drawn, not left as they were


def test_a_large_cpu_draw_in_parallel_parts_depends_on_the_seed_only_and_has_the_right_law():
    steps, chains, dim = 64, 32, 512  # 2^20: above PARALLEL_NORMALS, so in PARTS parts
    assert steps * chains * dim >= max(fusedmod.PARALLEL_DRAW, fusedmod.PARALLEL_NORMALS)

    def drawn(threads, kind="normal", dtype=torch.float32, high=None, shape=(chains, dim)):
        g = torch.Generator().manual_seed(11)
        return fusedmod.fill(g, kind, (steps, *shape), dtype, high, threads=threads)

    one, two = drawn(1), drawn(2)
    assert torch.equal(one, two) and torch.equal(one, drawn(3))  # not how many threads drew
    plain = torch.randn(steps, chains, dim, generator=torch.Generator().manual_seed(11))
    assert not torch.equal(one, plain)  # drawn by the parts' own generators
    # Standard normal per part, parts not copies of each other: each part's mean within 5 of
    # its Monte Carlo standard errors of 0, its variance of 1 (var of x^2 is 2), and the
    # correlation of two parts within 5 / sqrt(m) of 0.
    parts = one.reshape(fusedmod.PARTS, -1).double()
    m = parts.shape[1]
    assert parts.mean(1).abs().max() < 5 / m**0.5
    assert (parts.var(1) - 1).abs().max() < 5 * (2 / m) ** 0.5
    corr = torch.corrcoef(parts)
    assert (corr - torch.eye(fusedmod.PARTS, dtype=corr.dtype)).abs().max() < 5 / m**0.5
    # the other kinds: uniform on [0, 1), integers on [0, high) with every value hit
    u = drawn(2, "uniform", torch.float64)
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 5 * (1 / 12 / u.numel()) ** 0.5
    k = drawn(2, "integers", torch.int64, 1437, shape=(4096,))
    assert k.min() == 0 and k.max() == 1436 and len(k.unique()) == 1437
    # small draws, or chunks shorter than PARTS steps, are the plain draw
    g, h = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    small = fusedmod.fill(g, "normal", (4, chains, dim), torch.float32, threads=2)
    assert torch.equal(small, draw(h, "normal", (4, chains, dim), torch.float32))


@pytest.mark.slow
def test_a_paired_compiled_chunk_reports_w0s_loss_on_each_steps_batch():
    target = build("tanh")
    kernel = samplers.make("sgld", step_size=1e-4, batch_size=10)
    kernel.paired = True
    g = torch.Generator(DEVICE).manual_seed(0)
    start = target.initial(g, 4) + 0.3 * torch.randn(
        4, target.dim, generator=g, dtype=torch.float64, device=DEVICE
    )
    state = kernel.init(start, target, g)
    assert state.center_losses.shape == (target.n,)  # every point's loss at w0, once
    recorder = Recorder(g)
    state, _ = kernel.step(state, target, recorder)
    noise = recorder.prepare(4)
    (index,) = [n for n in noise if n.dtype == torch.int64]  # each step's minibatch
    entry = compiled_entry(kernel, target, state)
    args = (
        state.position,
        state.center,
        state.diverged,
        state.aux,
        noise,
        torch.ones(4, device=DEVICE) > 0,
    )
    got = entry.chunk(*args, None, state.center_losses)[3].scalars["center_loss"]
    for i in range(4):  # w0's loss on step i's batch, evaluated directly
        want = target.loss(state.center[:1], target.batch(index[i]))
        torch.testing.assert_close(got[i], want.expand(4), rtol=1e-12, atol=1e-12)


@pytest.mark.slow
def test_noise_drawn_ahead_on_another_thread_gives_the_run_drawn_chunk_by_chunk(monkeypatch):
    target = landscapes.make("banana", device=DEVICE, dtype="float32")
    kernel = samplers.make("mala", step_size=0.05)
    calls = []  # (slot, threads) of each chunk's draw
    real = fusedmod.Compiled.noise

    def noting(self, recorder, chunk, slot=0, threads=None):
        calls.append((slot, threads))
        return real(self, recorder, chunk, slot, threads)

    monkeypatch.setattr(fusedmod.Compiled, "noise", noting)

    def run(prefetch: bool):
        monkeypatch.setattr(fusedmod, "PREFETCH", prefetch)
        g = torch.Generator(DEVICE).manual_seed(4)
        state = kernel.init(target.exact_sample(g, 16), target, g)
        state, info = kernel.run(state, target, g, 1 + 4 * 8 + 3, fused=True, chunk=8)
        return state, info, torch.rand(3, generator=g, device=DEVICE)

    threads = torch.get_num_threads()
    s0, i0, after0 = run(False)
    assert calls == [(0, None)] * 5  # 35 steps: 5 chunks of 8, each drawn in turn
    calls.clear()
    s1, i1, after1 = run(True)
    assert torch.get_num_threads() == threads  # one thread for the chunks only
    entry = compiled_entry(kernel, target, s1)
    assert entry.single == (DEVICE == "cpu")  # 16 chains x 2: one thread on a CPU
    # on a CPU each chunk after the first was drawn ahead on one thread, slots alternating
    ahead = [(0, None), (1, 1), (0, 1), (1, 1), (0, 1)]
    assert calls == (ahead if DEVICE == "cpu" else [(0, None)] * 5)
    assert torch.equal(s0.position, s1.position) and torch.equal(i0.loss, i1.loss)
    assert torch.equal(i0.accepted, i1.accepted)
    assert torch.equal(after0, after1)  # the generator left where drawing in turn leaves it


@pytest.mark.slow
def test_noise_drawn_ahead_across_calls_gives_the_calls_drawn_in_turn():
    target = landscapes.make("banana", device=DEVICE, dtype="float32")
    kernel = samplers.make("sgld", step_size=0.01)
    blocks = [1, 16, 16, 7, 16, 16]  # 16 -> 16 takes the draw ahead; 16 -> 7 -> 16 set it back

    def run(ahead):
        g = torch.Generator(DEVICE).manual_seed(9)
        state = kernel.init(target.exact_sample(g, 8), target, g)
        losses, kept = [], []
        for n in blocks:
            state, info = kernel.run(state, target, g, n, True, ahead=ahead)
            losses.append(info.loss)
            kept.append(ahead is not None and ahead.pending is not None)
        if ahead is not None:
            ahead.close()
        return state.position, torch.cat(losses), kept, torch.rand(3, generator=g, device=DEVICE)

    p0, l0, _, after0 = run(None)
    p1, l1, kept, after1 = run(fusedmod.Ahead())
    assert torch.equal(p0, p1) and torch.equal(l0, l1)
    assert torch.equal(after0, after1)  # closed: the generator set back before the last draw
    # on a CPU (8 chains x 2: one thread) every fused call leaves a draw ahead
    assert kept == ([False, True, True, True, True, True] if DEVICE == "cpu" else [False] * 6)


@pytest.mark.slow
def test_a_first_call_of_one_eager_step_draws_nothing_more():
    target = landscapes.make("banana", device=DEVICE, dtype="float32")
    kernel = samplers.make("sgld", step_size=0.01)

    def run(blocks):
        g = torch.Generator(DEVICE).manual_seed(2)
        state = kernel.init(target.exact_sample(g, 8), target, g)
        for n in blocks:  # jobs' first block is the one eager step
            state, _ = kernel.run(state, target, g, n, True, chunk=16)
        return state.position

    assert torch.equal(run([1, 16]), run([17]))


def test_one_thread_blocks_overlapping_in_two_threads_leave_each_its_own_count():
    import threading

    before = torch.get_num_threads()
    entered, leave, seen = threading.Event(), threading.Event(), []

    def other():
        with fusedmod.one_thread():
            seen.append(torch.get_num_threads())
            entered.set()
            leave.wait(10)
        seen.append(torch.get_num_threads())

    t = threading.Thread(target=other)
    t.start()
    entered.wait(10)
    assert torch.get_num_threads() == before  # the other thread's block is its own
    with fusedmod.one_thread():  # entered second, left first
        assert torch.get_num_threads() == 1
    leave.set()
    t.join(10)
    assert torch.get_num_threads() == before and seen[0] == 1


def test_a_run_compiles_in_a_thread_other_than_the_one_that_imported_samplers():
    # torch keeps its compiler's settings per thread; a compiled run started from a thread
    # (here, as a program's worker thread might) once failed to compile.
    import threading

    target = landscapes.make("banana", device=DEVICE)

    def run() -> torch.Tensor:
        kernel = samplers.make("hmc", step_size=0.1, leapfrog_steps=3)  # its own compile
        g = torch.Generator(device=DEVICE).manual_seed(0)
        state = kernel.init(target.initial(g, 16), target, g)
        return kernel.run(state, target, g, 40, fused=True)[0].position

    got = []
    thread = threading.Thread(target=lambda: got.append(run()))
    thread.start()
    thread.join()
    assert got, "the run in the thread raised"
    torch.testing.assert_close(got[0], run(), rtol=0, atol=0)


GROUP_CASES = [
    ("tanh", "sgld", {"step_size": 1e-4, "batch_size": 10}),  # shared minibatch indices
    ("banana", "mala", {"step_size": 0.05}),  # per-chain uniforms; aux U and grad
    ("banana", "adam-sgld", {"step_size": 0.01}),  # aux m, v and t [C, 1]
    ("banana", "sgnht", {"step_size": 0.01}),  # aux p and alpha; thermostat scalars
]


def grouped_entry(monkeypatch, target, kernel, state):
    """The compiled entry of ``state``'s chains in two groups (GROUP_MACS 0: any even
    single-threaded CPU chunk), with the draws of one step learned as ``run_fused`` learns them."""
    monkeypatch.setattr(fusedmod, "GROUP_MACS", 0)
    entry = compiled_entry(kernel, target, state)
    dry = Recorder(torch.Generator().manual_seed(0))
    kernel.step(state, target, dry)
    entry.plan = dry.plan
    return entry


@pytest.mark.slow
@pytest.mark.skipif(DEVICE != "cpu", reason="chain groups are a CPU path")
@pytest.mark.parametrize(("target_name", "name", "params"), GROUP_CASES)
def test_chains_in_groups_on_two_threads_compute_one_call_on_all_chains(
    monkeypatch, target_name, name, params
):
    target = build(target_name)
    kernel = samplers.make(name, **params)
    g = torch.Generator().manual_seed(0)
    start = target.exact_sample(g, 16) if target.exact_sample else target.initial(g, 16)
    state, _ = kernel.step(kernel.init(start, target, g), target, g)  # chunks follow step 1
    entry = grouped_entry(monkeypatch, target, kernel, state)
    assert entry.groups == 2
    recorder = Recorder(g)
    recorder.plan = entry.plan
    noise = entry.noise(recorder, 4)
    for (kind, shape, _, _), drawn in zip(entry.plan, noise, strict=True):
        grouped = kind != "integers"
        assert drawn.shape == ((2, 4, 8, *shape[1:]) if grouped else (4, *shape))
    # the same draws laid out [steps, chains, ...]: group 0's chains first
    flat = [
        torch.cat(drawn.unbind(), 1) if kind != "integers" else drawn
        for (kind, *_), drawn in zip(entry.plan, noise, strict=True)
    ]
    active = torch.tensor([True, True, True, False])
    args = (state.position, state.center, state.diverged, state.aux)
    want = chunk_steps(kernel, target)(*args, flat, active, None, state.center_losses)
    threads = torch.get_num_threads()
    torch.set_num_threads(max(2, threads))  # the groups side by side
    try:  # the first call compiles, group by group; the second runs them at once
        results = [entry.call(*args, noise, active, None, state.center_losses) for _ in range(2)]
    finally:
        torch.set_num_threads(threads)
    for got in results:
        torch.testing.assert_close(got[0], want[0], rtol=1e-9, atol=1e-12)
        assert torch.equal(got[1], want[1])
        for key in want[2]:
            torch.testing.assert_close(got[2][key], want[2][key], rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(got[3].loss, want[3].loss, rtol=1e-9, atol=1e-12)
        assert torch.equal(got[3].accepted, want[3].accepted)
        assert torch.equal(got[3].diverged, want[3].diverged)
        assert got[3].scalars.keys() == want[3].scalars.keys()
        for key in want[3].scalars:
            torch.testing.assert_close(
                got[3].scalars[key], want[3].scalars[key], rtol=1e-9, atol=1e-12
            )


@pytest.mark.slow
@pytest.mark.skipif(DEVICE != "cpu", reason="chain groups are a CPU path")
def test_a_run_in_chain_groups_is_the_same_on_one_thread_and_on_two(monkeypatch):
    target = landscapes.make("tanh", hidden=2, n=100, dtype="float32")
    kernel = samplers.make("sgld", step_size=1e-4, batch_size=10)
    monkeypatch.setattr(fusedmod, "GROUP_MACS", 0)
    threads = torch.get_num_threads()

    def run(count: int) -> tuple[torch.Tensor, torch.Tensor]:
        torch.set_num_threads(count)
        g = torch.Generator().manual_seed(4)
        state = kernel.init(target.initial(g, 8), target, g)
        state, info = kernel.run(state, target, g, 200, fused=True, chunk=32)
        return state.position, info.loss

    try:
        (position, loss), (position2, loss2) = run(1), run(2)
    finally:
        torch.set_num_threads(threads)
    assert [entry.groups for entry in kernel._compiled.values()] == [2]
    assert torch.equal(position, position2) and torch.equal(loss, loss2)
    assert loss.shape == (200, 8) and torch.isfinite(loss).all()


@pytest.mark.skipif(DEVICE != "cpu", reason="on CUDA a chunk length is a CUDA graph of its own")
def test_each_chunk_length_has_its_own_compiled_code_shared_by_later_runs():
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list
    from torch._dynamo.utils import counters

    target = landscapes.make("banana", device=DEVICE, dtype="float32")
    code = chunk_steps(samplers.make("sgld"), target).__code__
    lengths = (11, 13)  # lengths no other test runs, though the suite's runs share the codes

    def run(blocks):  # a run: its own kernel, as each jobs run builds one
        kernel = samplers.make("sgld", step_size=0.01)
        g = torch.Generator(DEVICE).manual_seed(0)
        state = kernel.init(target.initial(g, 8), target, g)
        state, _ = kernel.run(state, target, g, 1, True)  # the eager first step
        for n in blocks:
            state, _ = kernel.run(state, target, g, n, True, chunk=n)

    def versions() -> list[int]:
        return [len(_debug_get_cache_entry_list(fusedmod.length_code(code, n))) for n in lengths]

    run(lengths)  # compiles what this process has not compiled yet
    frames, compiled = counters["frames"]["total"], versions()
    run([13, 11, 13])
    run([11])
    assert counters["frames"]["total"] == frames  # later runs reuse both lengths' code
    assert versions() == compiled and min(compiled) >= 1
    # a code object of each length's own, kept for the process: no call of one length tries
    # the guards of the other's compiled versions
    eleven, thirteen = (fusedmod.length_code(code, n) for n in lengths)
    assert eleven is fusedmod.length_code(code, 11) and eleven is not thirteen
