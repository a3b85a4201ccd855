"""NUTS as Stan has it (issue 59): the U-turn checks across every merge of two subtrees, and
divergent transitions.

- A plain reference written here, Stan's recursive build_tree and transition (base_nuts.hpp
  with the checks across merges of stan-dev/stan#2800), fed the kernel's own draws: the
  lockstep step and the forest's blocks (dense and sparse span checks, unit and adapted
  metric) build the same trees, draw the same samples and report the same accept_stat and
  divergent flag; in these runs the checks across merges stop trees both inside a subtree and
  at the top merge. The reference takes the kernel's per-point multinomial picks (the same law
  as Stan's recursive ones, not the same draws).
- A constructed case: the circular orbit of the 2-D standard Gaussian at step 0.8, every
  doubling forward. A leapfrog step turns it by about 47 degrees; the plain criterion misses
  the turn and runs in circles to max_depth (63 steps), Stan's stops after 7 (issue #2799).
- Exactness: 2000 chains started at exact draws stay exact (KS against 20,000 fresh exact
  draws, p > 1e-4) on the banana, donut, mixture, squiggle and the funnel at a small step.
- Divergences: found on Neal's funnel at a moderate step, in its neck; none on a Gaussian at
  a small step. A NaN chain is frozen and flagged, the others untouched.
- The verdict: divergent transitions after the burn-in fail the run, naming their number.
"""

import math
from dataclasses import replace

import pytest
import torch
from scipy import stats

import landscapes
import samplers
from runs.budget import check_budget
from runs.loop import execute
from runs.spec import parse_spec
from runs.store import Store
from runs.verdict import judge
from samplers.nuts import MAX_DELTA_H

C = 2000
REFERENCE = 20_000


@pytest.fixture(autouse=True)
def _one_thread():
    """Thousands of small ops: a second torch thread slows them on a busy 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def stretched():
    """A 2-D Gaussian of scales 1 and 5: its orbits are not circles, so the checks across
    merges stop trees inside subtrees as well as at the top merge."""
    return landscapes.make("gaussian", dim=2, scales=(1.0, 5.0), dtype="float64")


# --- Stan's recursion --------------------------------------------------------------------------


class Stan:
    """One chain's NUTS transition by Stan's recursion. ``extra``: with the two checks across
    each merge (Stan since 2019) or without (the plain generalised criterion). ``inv``: the
    diagonal inverse metric (None: the identity). ``fired``: where a check across a merge
    stopped a tree that the plain criterion let go on ("inner": inside a subtree, "top": at the
    merge with the tree)."""

    def __init__(self, target, eps, max_depth, inv=None, extra=True):
        self.target, self.eps, self.max_depth, self.extra = target, eps, max_depth, extra
        self.inv = inv
        self.fired: list[str] = []

    def energy(self, w):
        u, g = self.target.loss_and_grad(w[None])
        return u[0].item(), g[0]

    def sharp(self, p):
        return p if self.inv is None else self.inv * p

    def kinetic(self, p):
        return 0.5 * (p @ self.sharp(p)).item()

    def turned(self, rho, a, b):
        return not ((rho @ self.sharp(a)).item() > 0 and (rho @ self.sharp(b)).item() > 0)

    def leaf(self, z, sign):
        """One leapfrog step, its weight, accept_stat term and divergence; the kernel's
        progressive multinomial pick of it within its subtree."""
        w, p, g = z
        half = 0.5 * sign
        p_half = p - half * g
        w = w + sign * self.sharp(p_half)
        u, g = self.energy(w)
        p = p_half - half * g
        h = u + self.kinetic(p)
        h = math.inf if math.isnan(h) else h
        self.metro += math.exp(min(0.0, self.h0 - h))
        self.steps += 1
        diverged = h - self.h0 > MAX_DELTA_H
        self.divergent |= diverged
        if not diverged:
            log_weight = float(
                torch.logaddexp(torch.tensor(self.log_weight_sub), torch.tensor(self.h0 - h))
            )
            if self.pick[self.n].item() < math.exp(self.h0 - h - log_weight):
                self.sample_sub = w
            self.log_weight_sub = log_weight
        self.n += 1
        return not diverged, (w, p, g), p, p, p, [w]

    def build(self, z, depth, sign):
        """Stan's build_tree: (valid, end, rho, first p, last p, points in build order)."""
        if depth == 0:
            return self.leaf(z, sign)
        ok, mid, rho_a, a_first, a_last, points = self.build(z, depth - 1, sign)
        if not ok:
            return (False,) + (None,) * 5
        ok, end, rho_b, b_first, b_last, more = self.build(mid, depth - 1, sign)
        if not ok:
            return (False,) + (None,) * 5
        rho = rho_a + rho_b
        valid = not self.turned(rho, a_first, b_last)
        across = self.turned(rho_a + b_first, a_first, b_first) or self.turned(
            a_last + rho_b, a_last, b_last
        )
        if self.extra and valid and across:
            self.fired.append("inner")
        return valid and not (self.extra and across), end, rho, a_first, b_last, points + more

    def transition(self, w0, noise):
        """-> (the tree's points in time order, the sample, accept_stat, divergent)."""
        p0 = noise["xi"] if self.inv is None else noise["xi"] * self.inv.rsqrt()
        u0, g0 = self.energy(w0)
        self.h0, self.pick = u0 + self.kinetic(p0), noise["pick"]
        self.metro, self.steps, self.divergent = 0.0, 0, False
        left = right = (w0, p0, g0)
        rho, log_weight, sample, before, after = p0, 0.0, w0, [], []
        for j in range(self.max_depth):
            forward = noise["direction"][j].item() < 0.5
            self.n, self.log_weight_sub, self.sample_sub = 2**j - 1, -math.inf, None
            start = right if forward else left
            ok, end, sub_rho, first, last, points = self.build(
                start, j, self.eps if forward else -self.eps
            )
            if not ok:
                break
            if noise["merge"][j].item() < math.exp(self.log_weight_sub - log_weight):
                sample = self.sample_sub
            log_weight = float(
                torch.logaddexp(torch.tensor(log_weight), torch.tensor(self.log_weight_sub))
            )
            far, near = (left if forward else right)[1], start[1]
            across = self.turned(rho + first, far, first) or self.turned(near + sub_rho, near, last)
            if forward:
                right, after = end, after + points
            else:
                left, before = end, before + points
            rho = rho + sub_rho
            whole = self.turned(rho, left[1], right[1])
            if self.extra and across and not whole:
                self.fired.append("top")
            if whole or (self.extra and across):
                break
        path = torch.stack([*before[::-1], w0, *after])
        return path, sample, self.metro / max(1, self.steps), self.divergent


def setup(target, eps, max_depth, chains, inv=None, seed=5):
    """The kernel and its chains at exact draws; with ``inv``, a warm-up already over that
    left step ``eps`` and the diagonal inverse metric ``inv`` (samplers.warmup). Returns the
    step as the kernel computes it."""
    g = gen(seed)
    start = target.exact_sample(g, chains)
    if inv is None:
        kernel = samplers.make("nuts", step_size=eps, max_depth=max_depth)
        return kernel, kernel.init(start, target, g), eps
    kernel = samplers.make("nuts", step_size="auto", warmup=1, max_depth=max_depth)
    state = kernel.init(start, target, g)
    log_step = torch.full_like(state.U, math.log(eps))
    state = replace(
        state,
        log_step=log_step,
        inv_mass=inv.expand_as(state.position).clone(),
        count=torch.ones_like(state.U),
    )
    return kernel, state, float(log_step[0].exp())


def one_step(kernel, state, target, seed):
    rows = kernel.noise_for(state, target, gen(seed), most=1).take(1)
    return {k: v[0] for k, v in rows.items()}


def chain(noise, c, t=None):
    return {k: (v[c] if t is None else v[t, c]) for k, v in noise.items()}


INV = torch.tensor([2.0, 0.5], dtype=torch.float64)
CLOSE = {"rtol": 1e-9, "atol": 1e-10}
CASES = {
    "banana": (lambda: landscapes.make("banana", dtype="float64"), 0.15, 6, None),
    "funnel": (lambda: landscapes.make("funnel", dim=2, dtype="float64"), 0.3, 7, None),
    "stretched": (stretched, 0.5, 7, None),
    "stretched-metric": (stretched, 0.5, 7, INV),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_step_builds_stans_trees(case):
    """The lockstep step against Stan's recursion on the same draws, chain by chain: the
    tree's points (the traced path), the sample, accept_stat and divergent. On the stretched
    Gaussian the checks across merges stop trees inside subtrees and at the top merge, where
    the plain criterion takes more leapfrog steps; on the funnel some steps diverge."""
    make, eps, depth, inv = CASES[case]
    target, chains = make(), 64
    kernel, state, eps = setup(target, eps, depth, chains, inv)
    noise = one_step(kernel, state, target, 6)
    new, info = kernel.step(state, target, noise, trace=True)
    stan, plain = Stan(target, eps, depth, inv), Stan(target, eps, depth, inv, extra=False)
    differ = divergent = 0
    for c in range(chains):
        path, sample, accept, diverged = stan.transition(state.position[c], chain(noise, c))
        count = int(torch.isfinite(info.path[c]).all(-1).sum())
        assert count == len(path), c
        torch.testing.assert_close(info.path[c, :count], path, **CLOSE)
        torch.testing.assert_close(new.position[c], sample, **CLOSE)
        assert info.accepted[c].item() == pytest.approx(accept, rel=1e-9, abs=1e-12)
        assert info.scalars["divergent"][c].item() == new.divergent[c].item() == float(diverged)
        assert info.scalars["leapfrogs"][c].item() == new.leapfrogs[c].item() == stan.steps
        plain.transition(state.position[c], chain(noise, c))
        differ += plain.steps != stan.steps  # leapfrog steps the tree took
        divergent += diverged
    if case == "funnel":
        assert divergent
    if case.startswith("stretched"):
        assert {"inner", "top"} <= set(stan.fired) and differ, (stan.fired, differ)


@pytest.mark.parametrize("levels", ["dense", "sparse"])
@pytest.mark.parametrize("metric", [False, True])
def test_a_forest_block_builds_stans_trees(levels, metric, monkeypatch):
    """A block grown as a forest (samplers.forest), its span checks dense or sparse, with the
    unit or an adapted metric: every step of every chain is Stan's transition from the state
    before it, the checks across merges firing inside subtrees and at the top merge; and the
    lockstep steps, one row at a time, give the same bits, the divergent flags included."""
    monkeypatch.setattr(samplers.forest, "SPARSE_LEVELS", 0 if levels == "sparse" else 1 << 30)
    target, chains, steps = stretched(), 24, 10
    kernel, state, eps = setup(target, 0.5, 7, chains, INV if metric else None)
    rows = kernel.noise_for(state, target, gen(4), most=steps).take(steps)
    block, info = kernel.eager(state, target, rows, positions=True)
    stan = Stan(target, eps, 7, INV if metric else None)
    before = state.position
    for t in range(steps):
        for c in range(chains):
            _, sample, accept, diverged = stan.transition(before[c], chain(rows, c, t))
            torch.testing.assert_close(info.position[t, c], sample, **CLOSE)
            assert info.accepted[t, c].item() == pytest.approx(accept, rel=1e-9, abs=1e-12)
            assert info.scalars["divergent"][t, c].item() == float(diverged)
            assert info.scalars["leapfrogs"][t, c].item() == stan.steps  # n_leapfrog__
        before = info.position[t]
    assert {"inner", "top"} <= set(stan.fired), stan.fired
    one, one_info = samplers.base.Kernel.eager(kernel, state, target, rows, positions=True)
    same = {"rtol": 0, "atol": 0, "equal_nan": True}
    for name in ("position", "U", "grad", "loss", "diverged", "divergent", "leapfrogs"):
        torch.testing.assert_close(getattr(block, name), getattr(one, name), **same)
    for name in ("loss", "accepted", "diverged", "position"):
        torch.testing.assert_close(getattr(info, name), getattr(one_info, name), **same)
    torch.testing.assert_close(info.scalars, one_info.scalars, **same)


@pytest.mark.parametrize("levels", ["dense", "sparse"])
def test_a_forest_block_reports_its_divergences_and_frozen_chains(levels, monkeypatch):
    """The funnel at step 0.6 diverges in its neck: the forest's per-step divergent flags and
    the state's are the lockstep steps' bit for bit; two chains that start non-finite stay
    frozen and flagged, their divergent NaN in the records and 0 in the state."""
    monkeypatch.setattr(samplers.forest, "SPARSE_LEVELS", 0 if levels == "sparse" else 1 << 30)
    target = landscapes.make("funnel", dim=2, dtype="float64")
    kernel = samplers.make("nuts", step_size=0.6, max_depth=6)
    g = gen(3)
    start = target.exact_sample(g, 40)
    start[3], start[17, 1] = math.nan, math.inf
    state = kernel.init(start, target, g)
    rows = kernel.noise_for(state, target, gen(4), most=12).take(12)
    one, one_info = samplers.base.Kernel.eager(kernel, state, target, rows, positions=True)
    block, info = kernel.eager(state, target, rows, positions=True)
    same = {"rtol": 0, "atol": 0, "equal_nan": True}
    torch.testing.assert_close(block.divergent, one.divergent, **same)
    torch.testing.assert_close(info.scalars, one_info.scalars, **same)
    torch.testing.assert_close(info.position, one_info.position, **same)
    divergent = info.scalars["divergent"]
    assert torch.isnan(divergent[:, [3, 17]]).all() and (block.divergent[[3, 17]] == 0).all()
    finite = divergent[:, [c for c in range(40) if c not in (3, 17)]]
    assert ((finite == 0) | (finite == 1)).all() and finite.sum() > 0


def test_the_checks_across_merges_stop_a_circular_orbit_the_plain_criterion_misses():
    """The 2-D standard Gaussian from (1, 0) with momentum (0, 1) is a circle; a leapfrog step
    of 0.8 turns it by acos(1 - 0.8^2 / 2) = 47 degrees. Every doubling forward: after 7 steps
    (8 points, 330 degrees) the whole tree's end momenta point nearly the same way and its
    momentum sum along them, so the plain criterion goes on, and on, to max_depth: 63 steps,
    eight laps. Stan's checks across the top merge see the first half with the second's first
    point span half a lap and stop it. The forest grows the same trees."""
    target = landscapes.make("gaussian", dim=2, dtype="float64")
    kernel = samplers.make("nuts", step_size=0.8, max_depth=6)
    w0 = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    state = kernel.init(w0, target, gen())
    noise = {
        "xi": torch.tensor([[0.0, 1.0]], dtype=torch.float64),
        "direction": torch.zeros(1, 6, dtype=torch.float64),  # every doubling forward
        "pick": torch.zeros(1, 64, dtype=torch.float64),
        "merge": torch.zeros(1, 6, dtype=torch.float64),
    }
    assert math.degrees(math.acos(1 - 0.8**2 / 2)) == pytest.approx(47.2, abs=0.1)
    new, info = kernel.step(state, target, noise, trace=True)
    assert int(torch.isfinite(info.path[0]).all(-1).sum()) == 8
    stan = Stan(target, 0.8, 6)
    path, sample, _, _ = stan.transition(w0[0], chain(noise, 0))
    assert len(path) == 8 and stan.fired == ["top"]
    torch.testing.assert_close(new.position[0], sample, **CLOSE)
    assert len(Stan(target, 0.8, 6, extra=False).transition(w0[0], chain(noise, 0))[0]) == 64
    rows = {k: v.expand(8, *v.shape) for k, v in noise.items()}
    block, _ = kernel.eager(state, target, rows)  # a forest: 8 steps of the same draws
    one, _ = samplers.base.Kernel.eager(kernel, state, target, rows)
    assert torch.equal(block.position, one.position)


EXACT = {
    "banana": ({}, 3),
    "donut": ({}, 3),
    "mixture": ({}, 2),
    "squiggle": ({}, 2),
    "funnel": ({"dim": 2}, 1),
}


@pytest.mark.parametrize("name", sorted(EXACT))
def test_chains_started_at_exact_draws_stay_exact(name):
    """2000 chains from exact draws, a few steps of step 0.1 (each step a nearly independent
    draw; on the funnel a small step for its neck): the final states are 2000 independent
    draws of the target, each coordinate against 20,000 fresh exact draws (KS, p > 1e-4)."""
    params, steps = EXACT[name]
    target = landscapes.make(name, dtype="float64", **params)
    kernel = samplers.make("nuts", step_size=0.1)
    g = gen(7)
    state = kernel.init(target.exact_sample(g, C), target, g)
    start = state.position
    state, info = kernel.run(state, target, g, steps)
    assert not state.diverged.any()
    assert (state.position != start).any(-1).float().mean() > 0.95
    assert info.accepted.mean() > 0.8
    reference = target.exact_sample(gen(8), REFERENCE)
    for i in range(state.position.shape[1]):
        ks = stats.ks_2samp(state.position[:, i].numpy(), reference[:, i].numpy())
        assert ks.pvalue > 1e-4, (name, i, ks)


def test_divergences_in_the_funnels_neck_and_none_on_a_gaussian_at_a_small_step():
    """Neal's funnel in 10 dimensions at step 0.3: steps diverge, and the chains that diverged
    sat deeper in the neck (lower v, where the scale e^(v/2) is below the step) than the
    others. A 10-D Gaussian at step 0.05: none."""
    funnel = landscapes.make("funnel", dim=10, dtype="float64")
    kernel = samplers.make("nuts", step_size=0.3, max_depth=8)
    g = gen(3)
    state = kernel.init(funnel.exact_sample(g, 200), funnel, g)
    v = state.position[:, -1]
    _, info = kernel.run(state, funnel, g, 1)
    divergent = info.scalars["divergent"][0]
    assert 0 < divergent.sum() < 200
    assert v[divergent == 1].mean() < v[divergent == 0].mean() - 1
    gaussian = landscapes.make("gaussian", dim=10, dtype="float64")
    kernel = samplers.make("nuts", step_size=0.05, max_depth=8)
    state = kernel.init(gaussian.exact_sample(g, 200), gaussian, g)
    state, info = kernel.run(state, gaussian, g, 8)
    assert info.scalars["divergent"].sum() == 0 and state.divergent.sum() == 0


def test_a_nan_chain_is_frozen_and_flagged_and_the_others_are_untouched():
    """Lockstep (short blocks) and forest (long ones) alike."""
    target = landscapes.make("funnel", dim=2, dtype="float64")
    kernel = samplers.make("nuts", step_size=0.6, max_depth=6)
    x0 = target.exact_sample(gen(0), 6)
    for steps in (4, 12):
        runs = []
        for poison in (False, True):
            g = gen(1)
            state = kernel.init(x0, target, g)
            if poison:
                state.position[2, 1] = math.nan
            runs.append(kernel.run(state, target, g, steps))
        (clean, clean_info), (dirty, info) = runs
        others = [0, 1, 3, 4, 5]
        assert info.diverged[:, 2].all() and not info.diverged[:, others].any()
        assert torch.equal(dirty.position[others], clean.position[others])
        assert torch.equal(dirty.divergent[others], clean.divergent[others])
        torch.testing.assert_close(
            info.scalars["divergent"][:, others], clean_info.scalars["divergent"][:, others]
        )
        assert torch.isnan(info.scalars["divergent"][:, 2]).all() and dirty.divergent[2] == 0


# --- the verdict -------------------------------------------------------------------------------


def verdict_of(params: dict, divergent: float) -> dict:
    spec = {
        "sampler": {"name": "nuts", "params": params},
        "chains": 4,
        "steps": 1000,
        "burn_in": 200,
        "thin": 1,
    }
    summary = {"steps": 1000, "diverged_chains": 0, "acceptance": 0.8}
    return judge(spec, {**summary, "scalars": {"divergent": divergent}})


def test_divergent_transitions_after_the_burn_in_fail_the_verdict_with_stans_advice():
    """The summary's mean over 4 chains x 800 records after the burn-in: 0.0125 is 40."""
    verdict = verdict_of({"step_size": 0.3}, 0.0125)
    signal = next(s for s in verdict["signals"] if s["code"] == "divergent")
    assert verdict["status"] == "fail" and signal["status"] == "fail" and signal["value"] == 40
    assert signal["message"].startswith("40 divergent transitions after the burn-in")
    assert signal["try"] == (
        "step_size auto (or a higher target_accept), a smaller step, or a reparametrisation "
        "(the funnel's neck)"
    )
    auto = verdict_of({"step_size": "auto", "target_accept": 0.8}, 0.0125)
    signal = next(s for s in auto["signals"] if s["code"] == "divergent")
    assert signal["try"].startswith("a higher target_accept (e.g. 0.9)")
    assert not any(s["code"] == "divergent" for s in verdict_of({}, 0.0)["signals"])


def test_a_run_on_the_funnel_counts_its_divergences_in_the_verdict(tmp_path):
    """A run end to end (runs.loop), every second step recorded: the records hold each
    recorded step's divergent flag, the summary their mean after the burn-in, and the verdict
    the count the records hold. At step 0.7 the chains reach the neck and diverge there."""
    spec = parse_spec(
        {
            "target": {"name": "funnel", "params": {}},
            "sampler": {"name": "nuts", "params": {"step_size": 0.7, "max_depth": 6}},
            "chains": 4,
            "steps": 200,
            "burn_in": 50,
            "thin": 2,
            "seed": 0,
        }
    )
    check_budget(spec)
    store = Store(tmp_path / "store")
    run_id = store.create(spec.model_dump(mode="json"))
    summary = execute(spec, store, run_id)
    records = store.read(run_id, names=["step", "divergent"])
    after = records["divergent"][records["step"] >= 50]
    assert after.sum() > 0
    signal = next(s for s in summary["verdict"]["signals"] if s["code"] == "divergent")
    assert signal["status"] == "fail" and signal["value"] == int(after.sum())
