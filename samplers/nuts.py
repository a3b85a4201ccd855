"""The No-U-Turn Sampler: HMC that picks its own trajectory length, per chain.

Hoffman & Gelman (2014), with the multinomial sampling and the generalised U-turn criterion of
Betancourt (2017, "A conceptual introduction to Hamiltonian Monte Carlo", appendix A) as Stan
implements them, including the two extra checks across every merge of two subtrees that Stan
added in 2019 (stan-dev/stan#2800; base_nuts.hpp, build_tree and transition); a fixed step size
and the identity mass matrix, or with ``step_size: auto`` both adapted during the burn-in by
Stan's warm-up (samplers.warmup). Each step reports Stan's divergent__ as the scalar
``divergent``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from .base import Draw
from .forest import FOREST_STEPS, MAX_DELTA_H, Forest, u_turn
from .integrators import MHKernel, MHState
from .metric import factor, kinetic, momentum, sharp
from .spec import LOC, NBETA, Param, aligned, kernel_spec
from .warmup import Adaptive, AdaptState, adapting_params

PATH_POINTS = 129  # at most this many points of a tree in ``trace["path"]``


@dataclass
class NUTSState(MHState):
    divergent: Tensor  # [C] 1.0 where the last step's tree diverged (H - H0 > MAX_DELTA_H)
    leapfrogs: Tensor  # [C] the last step's leapfrog steps (Stan's n_leapfrog__)


@dataclass
class NUTSAdaptState(AdaptState):
    divergent: Tensor  # as NUTSState's, with step_size auto's warm-up
    leapfrogs: Tensor


class NUTS(Adaptive, MHKernel):
    """p0 ~ N(0, I), H = U + |p|^2 / 2; the tree starts as the one point (w, p0). At doubling
    j = 0, 1, ..., max_depth - 1 each chain draws a direction v = +-1 and, from the tree's end on
    that side, takes 2^j leapfrog steps of signed step v eps (a subtree). Every point z carries
    the weight exp(H0 - H(z)). The subtree's own sample is drawn progressively: point z replaces
    it with probability w(z) / (sum of the subtree's weights so far), a multinomial draw. A span
    of points makes a U-turn when, with rho the sum of its momenta and p-, p+ its end momenta,
    not (rho . p- > 0 and rho . p+ > 0). Each binary subtree of 2^l points (l >= 1, aligned on
    2^l) is the merge of a half A, built first, and a half B; the merge checks three spans, as
    Stan's build_tree does: A and B together, A with B's first point, and A's last point with
    B (the two extra checks catch a turn that the merged span hides when its halves straddle
    it, as on an orbit that has come nearly full circle: stan-dev/stan#2799). The subtree is
    invalid when a step diverges (H - H0 > 1000, Stan's divergent transition) or when any
    merge inside it makes a U-turn. An invalid subtree ends that chain's tree and is dropped.
    A valid one is merged: it replaces the tree's sample with probability min(1, W_sub /
    W_tree) (the biased progressive rule, which favours the new half), W_tree += W_sub, and
    the chain stops when this merge makes a U-turn (the same three checks, A the old tree and
    B the new subtree), or at max_depth. The sample is the next state. ``accepted`` reports
    Stan's accept_stat: the mean over the tree's new points of min(1, exp(H0 - H)); the scalar
    ``divergent`` is 1 where the step's tree diverged (Stan's divergent__).

    One step (``update``) builds all chains' trees in lockstep on [C, d] tensors; a chain whose
    tree has stopped keeps its values (masked) while the others go on. A block of steps
    (``eager``) lets each chain go on to its next step's tree instead (``Forest``), with the
    same arithmetic, and so the same draws.

    With ``step_size: auto`` the burn-in adapts the step and a diagonal (or dense) mass matrix M
    (samplers.warmup): p0 ~ N(0, M), w moves by eps M^-1 p, the kinetic energy is
    p M^-1 p / 2, and every U-turn check reads rho . M^-1 p (Stan's p_sharp)."""

    SPEC = kernel_spec(
        "nuts",
        "mcmc",
        "Hoffman & Gelman (2014), JMLR 15",
        [
            # a number: the registry's 1e-3 would build max_depth trees of 1023 steps on the
            # teaching targets at every iteration
            *adapting_params(0.1, 0.8, "Stan's default"),
            NBETA,
            LOC,
            Param(
                "max_depth",
                "int",
                10,
                "most doublings of a tree (at most 2^max_depth - 1 leapfrog steps an iteration)",
                1,
                12,
            ),
        ],
        equation=aligned(
            r"p_0 \sim \mathcal{N}(0, M),\quad H = U(w) + \tfrac{1}{2} p^\top M^{-1} p",
            r"\mathcal{T} = \{(w_t, p_0)\},\quad M = I \text{ unless step\_size auto}",
            r"\text{doubling } j:\ v_j = \pm 1,\ 2^j \text{ leapfrog steps of } v_j\,\varepsilon",
            r"\text{U-turn}(S):\ \min_\pm \rho_S \cdot M^{-1} p^\pm_S \le 0,"
            r"\ \rho_S = \textstyle\sum_{z \in S} p",
            r"\text{merge } A, B:\ \text{stop on U-turn}(A \cup B),",
            r"\quad \text{U-turn}(A \cup \{b_1\}),\ \text{U-turn}(\{a_{\mathrm{last}}\} \cup B)",
            r"\text{or } H - H_0 > 1000 \text{ (divergent)}",
            r"z \in \mathcal{T} \text{ drawn} \propto e^{-H(z)} \text{ (progressively)}",
        ),
        text="The No-U-Turn Sampler (Hoffman & Gelman 2014) in its multinomial form (Betancourt "
        "2017), as Stan runs it: HMC without a trajectory length. "
        "Each chain doubles its trajectory forwards or backwards in time (a coin flip a "
        "doubling) until the trajectory starts to turn back on itself, or until 2^max_depth "
        "points. The U-turn is judged by the generalised criterion at every merge of two "
        "halves of the binary tree, on the merged span and, as Stan has done since 2019, on "
        "each half extended by the other's nearest point, which catches a turn that falls "
        "between the halves. "
        "The next state is drawn from all the trajectory's points with weights exp(-H): within "
        "a new subtree multinomially, and across the merge with min(1, W_new / W_old), which "
        "favours points far from the start. The construction is reversible, so the chain "
        "samples exp(-U) exactly at any step size; too large a step shows as a low accept_stat "
        "(the mean of min(1, exp(H0 - H)) over the new points) and as divergent transitions "
        "(a leapfrog step with H - H0 > 1000, Stan's divergent__, recorded per step as "
        "divergent), which end a tree early, as in a funnel's neck: there the chains miss the "
        "region the step cannot resolve, and a run with divergences after the burn-in fails "
        "its verdict. With step_size auto the burn-in "
        "tunes the step by dual averaging toward an accept_stat of 0.8 and a diagonal (or, "
        "metric dense, a full) mass matrix M to the target's scales, as Stan's warm-up does "
        "(pooled over the chains, or each chain alone with adapt chain); both stay fixed "
        "after it, and the U-turn checks then read "
        "the velocity M^-1 p.",
        acceptance=(0.5, 1.0),  # Stan's accept_stat, whose usual target is 0.8
    )
    fractional_acceptance = True  # accepted: the accept_stat, in [0, 1]
    # A compiled ``step`` of fixed shape would run all 2^max_depth - 1 leapfrog steps every
    # time: what compiles is the forest's iteration (``make_chunk``).

    def noise(self, chains, dim):
        """xi: the momentum p0. direction[:, j] < 1/2: doubling j extends forward in time.
        pick[:, n]: the within-subtree choice at the tree's n-th new point (doubling j, step k:
        n = 2^j - 1 + k; column 2^max_depth - 1 is unused). merge[:, j]: doubling j's merge.
        That is 2^max_depth + 2 max_depth + d draws a chain and step (1044 + d at max_depth
        10), whatever the tree's depth: fine on the 2-D teaching targets, while for many chains of a
        large model a smaller max_depth keeps the noise blocks (samplers.base.Noise) short."""
        depth = self.max_depth
        return {
            "xi": Draw("normal", (chains, dim)),
            "direction": Draw("uniform", (chains, depth)),
            "pick": Draw("uniform", (chains, 2**depth)),
            "merge": Draw("uniform", (chains, depth)),
        }

    def start(self, state, target, generator):
        state = super().start(state, target, generator)
        none = torch.zeros_like(state.U)
        if self.auto:
            state = self.adapting_start(state, target, generator)
            return NUTSAdaptState(**vars(state), divergent=none, leapfrogs=none)
        return NUTSState(**vars(state), divergent=none, leapfrogs=none)

    def observe(self, state):
        """``divergent``: 1 where the step's tree diverged (Stan's divergent__), else 0;
        ``leapfrogs``: its leapfrog steps, the gradient evaluations it cost (n_leapfrog__)."""
        return {"divergent": state.divergent, "leapfrogs": state.leapfrogs}

    def update(self, state, target, batch, noise, trace=None):
        chains = state.position.shape[0]
        eps, inv_mass = self.stepping(state)
        # in the run's dtype (where of floats: f32)
        step = torch.full_like(state.U, eps) if inv_mass is None else eps[:, 0]
        p0 = momentum(noise["xi"], factor(inv_mass))
        h0 = state.U + kinetic(p0, inv_mass)
        zero = torch.zeros_like(state.U)
        # the tree: its ends in time (position, momentum, gradient), the sum rho of its momenta,
        # the log of its total weight, and its sample (position, U, grad U, L)
        left = right = (state.position, p0, state.grad)
        rho, log_weight = p0, zero
        sample = (state.position, state.U, state.grad, state.loss)
        done = state.diverged | ~torch.isfinite(h0)
        metro, steps = zero, zero  # accept_stat's sum and count
        divergent = torch.zeros_like(done)
        # for ``trace``: points on either side of the start, and each subtree's points
        n_left = n_right = torch.zeros(chains, dtype=torch.long, device=p0.device)
        built = []
        for j in range(self.max_depth):
            if bool(done.all()):  # the one host sync a doubling
                break
            forward = noise["direction"][:, j] < 0.5
            sign = torch.where(forward, step, -step)[:, None]  # the signed step, [C, 1]
            start = tuple(_pick(forward, r, lt) for r, lt in zip(right, left, strict=True))
            picks = noise["pick"][:, 2**j - 1 : 2 ** (j + 1) - 1]
            sub = self._subtree(j, start, sign, h0, ~done, picks, state, target, trace, inv_mass)
            metro, steps = metro + sub["metro"], steps + sub["steps"]
            divergent = divergent | sub["divergent"]
            merged = sub["valid"]  # only chains that were still building can be valid
            # Stan's checks across the merge of the tree (A) and the subtree (B): A with B's
            # first point, and A's end that B grew from ("near") with B
            far, near, first, last = _pick(forward, left[1], right[1]), start[1], *sub["p"]
            across = _turns(rho + first, far, first, inv_mass) | _turns(
                near + sub["rho"], near, last, inv_mass
            )
            take = merged & (noise["merge"][:, j] < torch.exp(sub["log_weight"] - log_weight))
            sample = tuple(_pick(take, s, t) for s, t in zip(sub["sample"], sample, strict=True))
            log_weight = torch.where(
                merged, torch.logaddexp(log_weight, sub["log_weight"]), log_weight
            )
            end = sub["end"]
            right = tuple(_pick(merged & forward, e, r) for e, r in zip(end, right, strict=True))
            left = tuple(_pick(merged & ~forward, e, lt) for e, lt in zip(end, left, strict=True))
            rho = _pick(merged, rho + sub["rho"], rho)
            done = done | ~merged | _turns(rho, left[1], right[1], inv_mass) | across
            if trace is not None:
                offset = torch.where(forward, n_right, -n_left)[:, None]
                ahead = torch.arange(1, 2**j + 1, device=p0.device)
                built.append(
                    (sub["points"], offset + torch.where(forward, 1, -1)[:, None] * ahead, merged)
                )
                n_right = n_right + (merged & forward) * 2**j
                n_left = n_left + (merged & ~forward) * 2**j
        position, u, grad, loss = sample
        if trace is not None:
            trace["proposal"] = position
            trace["path"] = self._path(state.position, built, n_left, n_right)
        new = replace(
            state,
            position=position,
            U=u,
            grad=grad,
            loss=loss,
            divergent=divergent.to(u.dtype),
            leapfrogs=steps,
        )
        accept_stat = metro / steps.clamp_min(1)
        if self.auto:
            new = self.adapted(state, new, accept_stat)
        return new, loss, accept_stat

    def _subtree(self, depth, start, sign, h0, live, picks, state, target, trace, inv_mass):
        """2^depth leapfrog steps of step ``sign`` ([C, 1]) from ``start`` for the ``live``
        chains, with the subtree's progressive multinomial sample and the U-turn checks of every
        merge of binary spans (``_merge_turns``). Per level l a span's first momentum, the
        running momentum sum before it and the momentum of the leaf before it are kept (a
        checkpoint), so span [k + 1 - 2^l, k] is checked when (k + 1) % 2^l == 0 with rho =
        (sum to k) - (sum before the span). A chain that is no longer valid goes on
        integrating unmasked (one [C, d] pass for all): its subtree is dropped, and past its
        end nothing it computes is read."""
        w, p, grad = start
        half = 0.5 * sign
        valid, divergent = live, torch.zeros_like(live)
        log_weight = torch.full_like(h0, -math.inf)
        sample = (w, h0, grad, h0)  # replaced at the first point of every valid chain
        metro, steps = torch.zeros_like(h0), torch.zeros_like(h0)
        rho = torch.zeros_like(p)  # the momentum sum of the subtree's points so far
        # level -> the span's first momentum, the sum before the span, the momentum before it
        first, before, prev = {}, {}, {}
        points = []
        for k in range(2**depth):
            p_prev = p
            p_half = p - half * grad
            w = w + sign * sharp(p_half, inv_mass)
            e = self.energy(w, state, target, None)
            grad = e.grad
            p = p_half - half * grad
            # log weight exp(H0 - H); a NaN energy weighs nothing (H = inf, as Stan's)
            log_w = torch.nan_to_num(h0 - e.value - kinetic(p, inv_mass), nan=-math.inf)
            # every step a valid chain takes counts in accept_stat, the diverging one too
            metro = metro + torch.where(valid, log_w.clamp_max(0).exp(), 0.0)
            steps = steps + valid
            kept = log_w >= -MAX_DELTA_H  # else the step diverged (Stan's divergent__)
            divergent = divergent | (valid & ~kept)
            valid = valid & kept
            log_weight_new = torch.logaddexp(log_weight, log_w)
            take = valid & (picks[:, k] < torch.exp(log_w - log_weight_new))
            new = (w, e.value, grad, e.loss)
            sample = tuple(_pick(take, n, s) for n, s in zip(new, sample, strict=True))
            log_weight = torch.where(valid, log_weight_new, log_weight)
            if k == 0:
                p_first = p
            for level in range(1, depth + 1):
                if k % 2**level == 0:  # leaf k opens a span of 2^level leaves
                    first[level], before[level], prev[level] = p, rho, p_prev
            rho = rho + p
            for level in range(1, depth + 1):
                if (k + 1) % 2**level == 0:  # and closes one: its two halves merge
                    turned = _merge_turns(level, rho, p, first, before, prev, inv_mass)
                    valid = valid & ~turned
            if trace is not None:
                points.append(w)
        return {
            "valid": valid,
            "divergent": divergent,
            "p": (p_first, p),  # the momenta of its first and last points
            "end": (w, p, grad),
            "rho": rho,
            "log_weight": log_weight,
            "sample": sample,
            "metro": metro,
            "steps": steps,
            "points": torch.stack(points, 1) if trace is not None else None,
        }

    def _path(self, start: Tensor, built: list, n_left: Tensor, n_right: Tensor) -> Tensor:
        """The tree's points in time order, leftmost first: [C, L, d], L = min(2^max_depth + 1,
        129), NaN after a chain's last point; a longer tree is subsampled evenly (both ends
        kept, the sample not necessarily)."""
        chains, dim = start.shape
        size = 2**self.max_depth
        length = min(size + 1, PATH_POINTS)
        buffer = start.new_full((chains, size + 1, dim), math.nan)  # column ``size``: discards
        rows = torch.arange(chains, device=start.device)
        buffer[rows, n_left] = start
        for points, offset, merged in built:
            index = torch.where(merged[:, None], offset + n_left[:, None], size)
            buffer[rows[:, None], index] = points
        buffer[:, size] = math.nan
        count = 1 + n_left + n_right
        i = torch.arange(length, device=start.device)
        scale = ((count - 1).to(start.dtype) / (length - 1))[:, None]
        even = torch.round(i * scale).long()
        column = torch.where((count > length)[:, None], even, i)
        return buffer[rows[:, None], column]

    def make_chunk(self, target, state, length, positions):
        """A block as a forest whose iteration is one compiled call (samplers.compiled_forest),
        on a CPU and a target torch.export can trace; elsewhere the forest stays eager (None)."""
        if state.position.device.type != "cpu" or not getattr(target, "exportable", True):
            return None
        from .compiled_forest import ForestChunk

        return ForestChunk(self, target, state, length, positions)

    def eager(self, state, target, noise, positions=False, trace=False):
        """A block of at least FOREST_STEPS steps grows as one ``Forest`` (samplers.forest): each
        chain goes on to its next step's tree as soon as its own tree stops, so the block costs
        about its busiest chain's leapfrog steps, not the sum over its steps of each step's
        deepest tree. The same draws and records as ``step`` one row at a time, which shorter
        blocks (many chains: NUTS's 2^max_depth draws a chain make short noise blocks), traced
        ones and the warm-up's (each step adapts the next from all chains) take: there the
        forest's bookkeeping costs more than it saves."""
        steps = next(iter(noise.values())).shape[0] if noise else 0
        warming = self.auto and int(state.count.max()) < self.check_warmup()  # lockstep adapts
        if trace or steps < FOREST_STEPS or warming:
            return super().eager(state, target, noise, positions, trace)
        forest = Forest(self, state, target, noise)
        forest.grow()
        return forest.state(), forest.info(positions)


def _merge_turns(
    level: int, rho: Tensor, p: Tensor, first: dict, before: dict, prev: dict, inv_mass
) -> Tensor:
    """[C] bool: the span of 2^level leaves that ends at the leaf of momentum ``p`` (the
    subtree's momentum sum to it: ``rho``) makes a U-turn, by Stan's three checks on the merge
    of its halves A and B (base_nuts.hpp, build_tree): A and B together, A with B's first point,
    and A's last point with B. ``first``, ``before``, ``prev``: per level, the first momentum of
    the level's current span, the momentum sum before it and the momentum of the leaf before
    it. At level 1 each half is one point and the two extra checks are the first."""
    turned = _turns(rho - before[level], first[level], p, inv_mass)
    if level == 1:
        return turned
    b_first, b_before, a_last = first[level - 1], before[level - 1], prev[level - 1]
    a_extended = b_before - before[level] + b_first  # A's momenta and B's first
    b_extended = a_last + (rho - b_before)  # A's last momentum and B's
    a_turned = _turns(a_extended, first[level], b_first, inv_mass)
    return turned | a_turned | _turns(b_extended, a_last, p, inv_mass)


def _turns(rho: Tensor, p_minus: Tensor, p_plus: Tensor, inv_mass: Tensor | None) -> Tensor:
    """``u_turn`` of a span from its end momenta: the criterion reads M^-1 p (``sharp``)."""
    return u_turn(rho, sharp(p_minus, inv_mass), sharp(p_plus, inv_mass))


def _pick(mask: Tensor, new: Tensor, old: Tensor) -> Tensor:
    return torch.where(mask.reshape(-1, *[1] * (new.ndim - 1)), new, old)
