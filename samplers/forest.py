"""NUTS's trees for a block of steps, grown as a forest: each chain goes on to its next step's
tree as soon as its own stops (``samplers.nuts.NUTS.eager``)."""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch import Tensor

from .metric import factor, momentum, sharp
from .state import Info

MAX_DELTA_H = 1000.0  # a leapfrog step whose energy error H - H0 exceeds this diverged (Stan's)
# the waiting chains settle together once they are this fraction of the unfinished ones: each
# settle costs as many tensor ops as a few leaves, and a chain waits a leaf or two for it
SETTLE_WAITING = 0.3
FOREST_STEPS = 8  # blocks this long or longer grow as a forest (``samplers.nuts.NUTS.eager``)
SPARSE_LEVELS = 8192  # above this many span checkpoint entries (levels x chains x d), sparse


def u_turn(rho: Tensor, p_minus: Tensor, p_plus: Tensor) -> Tensor:
    """[C] bool: the span with momentum sum ``rho`` and end momenta p-, p+ turned back (or is
    not finite): not (rho . p- > 0 and rho . p+ > 0)."""
    return ~(torch.minimum(_dot(rho, p_minus), _dot(rho, p_plus)) > 0)


def _dot(a: Tensor, b: Tensor) -> Tensor:
    """a . b over the last dimension. On a CPU, torch's reduction over a last dimension of 2 or
    3 costs about 40 ns an output (vecdot of [9, 128, 2]: 44 us, of [9, 128, 4]: 14 us), where
    a batched matmul costs half: the forest's span checks of every level ([L, C, d]) on the 2-D
    targets take it; a [C, d] pair (one level: the lockstep step) is faster by vecdot. The two
    give the same bits for d = 2 and 3 (checked on 10^6 random pairs, float32 and float64)."""
    if a.device.type == "cpu" and a.shape[-1] in (2, 3) and max(a.ndim, b.ndim) > 2:
        return (a.unsqueeze(-2) @ b.unsqueeze(-1))[..., 0, 0]
    return torch.linalg.vecdot(a, b)


class Forest:
    """Every chain's trees for a block of T steps (``noise``: [T, C, ...] each), grown one
    leapfrog step (a leaf) per iteration for all chains at once, each chain at its own place:
    its own step t of the block, doubling j, and leaf k of that doubling's subtree. A chain
    whose subtree is complete (its 2^j leaves) or invalid waits, frozen, until enough chains
    wait (``SETTLE_WAITING``); then one ``_settle`` merges every waiting chain's subtree, and
    starts its next doubling, or records its step and plants the tree of its next step. So a
    block costs about its busiest chain's leaves, where in lockstep every step cost its
    deepest tree's. A chain done with its T steps idles: its rows are still computed and never
    read (the tensors keep their [C, ...] shapes, so each row's arithmetic, and so each draw,
    is exactly a one-step update's).

    A chain's tree: its growing end (w, p, g) and its ``other`` end (w | p | g), its momentum
    sum ``rho``, the log of its weight and its sample (w | g | U | L), and whether a leapfrog
    step of it diverged (``divergent``); the subtree being built has its own momentum sum,
    weight and sample (``*_sub``) and, per span level l = 1..max_depth - 1, the momentum that
    opened its current 2^l-leaf span, its momentum sum before that span and the momentum of
    the leaf before it (``first``, ``before``, ``prev``: what Stan's checks across a merge
    read, ``samplers.nuts._merge_turns``). A chain whose new state is not finite is frozen
    where it was and flagged, as ``samplers.base.contain`` does after each step.

    ``steps``: the first rows of ``noise`` to take (default all; the rest is padding, as a
    compiled forest's fixed shapes have it). ``dense``: the span checks as dense ops whatever
    their size (no host sync: a compiled iteration, ``samplers.compiled_forest``)."""

    def __init__(self, kernel, state, target, noise: dict, steps=None, dense=False):
        self.kernel, self.start, self.target = kernel, state, target
        rows, chains, d = noise["xi"].shape
        length = rows if steps is None else steps
        depth, device, u = kernel.max_depth, state.position.device, state.U
        self.length, self.chains, self.dim, self.depth = length, chains, d, depth
        self.xi = noise["xi"].reshape(rows * chains, d)
        self.direction, self.merge = noise["direction"].flatten(), noise["merge"].flatten()
        self.pick = noise["pick"].flatten()
        self.chain = torch.arange(chains, device=device)
        # leaf k of a subtree opens a span of 2^l leaves where k % 2^l == 0 and closes one
        # where (k + 1) % 2^l == 0 (so a level it closes is at most the subtree's depth), as
        # tables [level, k]; the last k, a chain not running, does neither. The span levels'
        # checkpoints are [L, C, d] (levels first: 2-3 times cheaper ops than [C, L, d]).
        k = torch.arange(2 ** (depth - 1) + 2, device=device)
        level = 2 ** torch.arange(1, depth, device=device)[:, None]
        opens, closes = k % level == 0, (k + 1) % level == 0
        opens[:, -1] = closes[:, -1] = False
        self.resting = k.new_tensor(len(k) - 1)  # that last k
        # Dense: every level of every chain at each leaf, as a few [L, C, d] ops; sparse, on a
        # CPU with many of them: only the (level, chain) pairs that open or close a span (about
        # one a chain), gathered, as there the per-element cost of the dense ops dominates.
        levels = max(depth - 1, 0) * chains * d
        self.sparse = not dense and device.type == "cpu" and levels > SPARSE_LEVELS
        if self.sparse:
            self.opens, self.closes = opens.T.contiguous(), closes.T.contiguous()  # [k, level]
        else:  # as [level, k, d] masks (on a CPU, a table of at most a few MB)
            self.opens, self.closes = opens[..., None].expand(-1, -1, d), closes
            if device.type == "cpu":
                self.opens = self.opens.contiguous()
        self.size_of = 2 ** torch.arange(depth, device=device)  # doubling j's leaves
        # constants as tensors: an op with a Python number converts it each time (~1 us)
        # in the run's dtype; an adapted step and metric (samplers.warmup) are the chains' own
        auto = getattr(kernel, "auto", False)
        self.step_size = state.log_step.exp() if auto else torch.full_like(u, kernel.step_size)
        self.inv_mass = state.inv_mass if auto else None
        self.scale = factor(self.inv_mass)  # p0 = momentum(xi, scale) ~ N(0, M)
        self.back = -self.step_size
        self.zero, self.half_h = torch.zeros_like(u), u.new_tensor(0.5)
        self.floor = u.new_tensor(-MAX_DELTA_H)
        self.last, self.length_ = self.chain.new_tensor(depth - 1), self.chain.new_tensor(length)
        self.per_step = torch.tensor([chains, depth, 2**depth], device=device)
        # a chain's tree and subtree (see the class doc); t: its step; j, k: its doubling and
        # leaf; n: the pick of its tree's next point; at: its doubling's direction and merge
        self.sample = torch.cat([state.position, state.grad, u[:, None], state.loss[:, None]], 1)
        self.sample0 = self.sample
        # apart: 4 cheaper wheres than one on their cat
        self.w_sub, self.g_sub, self.u_sub, self.loss_sub = (
            state.position,
            state.grad,
            u,
            state.loss,
        )
        self.diverged = state.diverged.clone()
        self.divergent = torch.zeros_like(self.diverged)  # the tree's: H - H0 > MAX_DELTA_H
        # the state's divergent and leapfrogs: the last step's of a chain that is not frozen
        self.divergent_state = getattr(state, "divergent", torch.zeros_like(u))
        self.leapfrogs_state = getattr(state, "leapfrogs", torch.zeros_like(u))
        index = torch.zeros(chains, dtype=torch.long, device=device)
        self.t, self.j, self.k, self.size, self.n, self.at = (index,) * 6
        self.row = self.chain - chains  # of the noise rows, t C + c (planting adds C)
        self.active = self.forward = self.valid = torch.ones_like(self.diverged)
        self.h0 = self.log_weight = self.metro = self.steps = self.zero
        self.w, self.p, self.g = state.position, torch.zeros_like(state.position), state.grad
        self.rho = self.rho_sub = self.p
        self.other = torch.cat([self.w, self.p, self.g], 1)
        self.first, self.before, self.prev = (
            u.new_zeros(max(depth - 1, 0), chains, d) for _ in "fbp"
        )
        self.log_weight_sub = self.metro_sub = self.zero
        # each step's records; row ``length`` takes the writes of chains that record nothing
        # position | loss | accepted | divergent | leapfrogs
        self.record = u.new_zeros(length + 1, chains, d + 4)
        self.record_diverged = self.diverged.new_zeros(length + 1, chains)
        everyone = self.active
        here = self._plant(everyone, torch.cat([self.w, self.p, self.g], 1))
        self._double(everyone, everyone, here)

    def grow(self) -> None:
        """Leaves until every chain has taken its T steps, settling when enough chains wait
        (one host sync a leaf)."""
        active = self.chains
        while active:
            waiting = active - int(self.running.sum())
            if waiting and waiting >= min(active, SETTLE_WAITING * active):
                active = self._settle()
            else:
                self._leaf()

    def iterate(self) -> None:
        """Settle every waiting chain, then a leaf for every running one: an iteration without a
        host sync, in which no chain waits (``samplers.compiled_forest`` compiles it)."""
        self._merge()
        self._leaf()

    # -- one leaf ----------------------------------------------------------------------------
    def _leaf(self) -> None:
        """One leapfrog step of every running chain's subtree, with the subtree's progressive
        multinomial sample and the U-turn checks of the spans this leaf closes."""
        half, sign, g, running = self.half, self.sign, self.g, self.running
        p_half = self.p - half * g
        w = self.w + sign * sharp(p_half, self.inv_mass)
        e = self.kernel.energy(w, self.start, self.target, None)
        g = e.grad
        p = p_half - half * g
        # log weight exp(H0 - H); a NaN energy weighs nothing (H = inf, as Stan's)
        kinetic = self.half_h * torch.linalg.vecdot(p, sharp(p, self.inv_mass))
        log_w = torch.nan_to_num(self.h0 - e.value - kinetic, nan=-math.inf)
        # every step a valid chain takes counts in accept_stat, the diverging one too
        self.metro_sub = self.metro_sub + torch.where(running, log_w.clamp_max(0).exp(), self.zero)
        kept = running & (log_w >= self.floor)
        self.divergent = self.divergent | (running & ~kept)  # Stan's divergent__
        log_weight = torch.logaddexp(self.log_weight_sub, log_w)
        take = kept & (self.pick.index_select(0, self.n) < torch.exp(log_w - log_weight))
        taken = take[:, None]
        self.w_sub = torch.where(taken, w, self.w_sub)
        self.g_sub = torch.where(taken, g, self.g_sub)
        self.u_sub = torch.where(take, e.value, self.u_sub)
        self.loss_sub = torch.where(take, e.loss, self.loss_sub)
        self.log_weight_sub = torch.where(kept, log_weight, self.log_weight_sub)
        moving = running[:, None]
        rho = torch.where(moving, self.rho_sub + p, self.rho_sub)
        turned = self._spans(torch.where(running, self.k, self.resting), p, rho)
        self.valid = torch.where(running, kept & ~turned, self.valid)
        self.rho_sub = rho
        self.w = torch.where(moving, w, self.w)
        self.p = torch.where(moving, p, self.p)
        self.g = torch.where(moving, g, self.g)
        self.k, self.n = self.k + running, self.n + running
        self.running = self.valid & (self.k < self.size)

    def _spans(self, k: Tensor, p: Tensor, rho: Tensor) -> Tensor:
        """Leaf k's span checkpoints (its momentum p, the subtree's momentum sum before it and
        the previous leaf's momentum, ``self.p``, for the spans it opens), then [C] bool: a
        span it closes, [k + 1 - 2^l, k], turned back (its momentum sum: ``rho``, the sum to k,
        less the sum before the span), or from level 2 on, by Stan's checks across its halves
        A and B, A with B's first point or A's last point with B (their checkpoints: level
        l - 1's, the row below; ``samplers.nuts._merge_turns``, the same arithmetic)."""
        if not self.sparse:
            opens = self.opens.index_select(1, k)
            self.first = torch.where(opens, p, self.first)
            self.before = torch.where(opens, self.rho_sub, self.before)
            self.prev = torch.where(opens, self.p, self.prev)
            span = rho - self.before
            first, last = sharp(self.first, self.inv_mass), sharp(p, self.inv_mass)
            turned = u_turn(span, first, last)
            if len(turned) > 1:
                b_first, b_before, a_last = self.first[:-1], self.before[:-1], self.prev[:-1]
                a_extended = b_before - self.before[1:] + b_first
                b_extended = a_last + (rho - b_before)
                across = u_turn(a_extended, first[1:], first[:-1]) | u_turn(
                    b_extended, sharp(a_last, self.inv_mass), last
                )  # not ``turned[1:] |=``: inductor's C++ for it does not compile (torch 2.13)
                turned = torch.cat([turned[:1], turned[1:] | across])
            return (self.closes.index_select(1, k) & turned).any(0)
        first, before, prev = (x.flatten(0, 1) for x in (self.first, self.before, self.prev))
        at, chain = self._pairs(self.opens, k)  # the rows are views: written in place
        first.index_copy_(0, at, p.index_select(0, chain))
        before.index_copy_(0, at, self.rho_sub.index_select(0, chain))
        prev.index_copy_(0, at, self.p.index_select(0, chain))
        at, chain = self._pairs(self.closes, k)
        rho, p = rho.index_select(0, chain), p.index_select(0, chain)
        span_first, span_before = first.index_select(0, at), before.index_select(0, at)
        halves = at >= self.chains  # level 2 and up: the halves' row is the one below
        below = torch.where(halves, at - self.chains, at)
        b_first, b_before, a_last = (x.index_select(0, below) for x in (first, before, prev))
        a_extended = b_before - span_before + b_first
        b_extended = a_last + (rho - b_before)
        velocity = self._velocity(chain)
        span_first, b_first, a_last, p = (velocity(x) for x in (span_first, b_first, a_last, p))
        turned = u_turn(rho - span_before, span_first, p) | (
            halves & (u_turn(a_extended, span_first, b_first) | u_turn(b_extended, a_last, p))
        )
        return torch.zeros_like(k).index_add_(0, chain, turned.long()) > 0

    def _velocity(self, chain: Tensor):
        """``sharp`` for momenta of the chains ``chain``: x -> M^-1 x (the identity: x)."""
        if self.inv_mass is None:
            return lambda x: x
        inv_mass = self.inv_mass.index_select(0, chain)
        return lambda x: sharp(x, inv_mass)

    def _pairs(self, table: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """The (level, chain) pairs of ``table`` ([k, level]) at the chains' k: their rows of
        the flattened [L, C] checkpoints, and their chains (a host sync)."""
        levels = table.shape[1]
        pair = table.index_select(0, k).flatten().nonzero().squeeze(1)  # chain * L + level
        chain = pair.div(levels, rounding_mode="floor")
        return (pair - chain * levels) * self.chains + chain, chain

    # -- settling the waiting chains ---------------------------------------------------------
    def _settle(self) -> int:
        """The waiting chains settle (``_merge``); returns how many chains have steps left."""
        self._merge()
        return int(self.active.sum())

    def _merge(self) -> None:
        """The waiting chains merge their subtree, or stop when it is invalid; those whose
        tree stopped record their step and plant the next; the others start a new doubling."""
        ending = self.active & ~self.running
        merged = ending & self.valid
        self.metro = torch.where(ending, self.metro + self.metro_sub, self.metro)
        self.steps = torch.where(ending, self.steps + self.k, self.steps)
        # the biased progressive rule: the subtree's sample with probability W_sub / W_tree
        u = self.merge.index_select(0, self.at)
        take = merged & (u < torch.exp(self.log_weight_sub - self.log_weight))
        sub = torch.cat([self.w_sub, self.g_sub, self.u_sub[:, None], self.loss_sub[:, None]], 1)
        self.sample = torch.where(take[:, None], sub, self.sample)
        both = torch.logaddexp(self.log_weight, self.log_weight_sub)
        self.log_weight = torch.where(merged, both, self.log_weight)
        # the whole tree's U-turn (the ends' order does not matter) and Stan's checks across
        # the merge of the tree and the subtree (samplers.nuts.NUTS.update)
        other = self.other[:, self.dim : 2 * self.dim]
        turned = self._across(other) if self.depth > 1 else torch.zeros_like(merged)
        self.rho = rho = torch.where(merged[:, None], self.rho + self.rho_sub, self.rho)
        ends = sharp(other, self.inv_mass), sharp(self.p, self.inv_mass)
        more = merged & ~(u_turn(rho, *ends) | turned) & (self.j < self.last)
        here = torch.cat([self.w, self.p, self.g], 1)
        planted = self._record(ending & ~more)
        here = self._plant(planted, here)
        self._double(more | planted, planted, here)

    def _across(self, other: Tensor) -> Tensor:
        """[C] bool: the tree (far end momentum ``other``) with its subtree's first point, or
        the tree's end the subtree grew from with the subtree, makes a U-turn. The top span
        level opens only at a subtree's leaf 0, so its checkpoints hold that leaf's momentum
        and the momentum before it, the tree's end (max_depth 1 has no level: there both
        checks are the whole tree's)."""
        first, near = self.first[-1], self.prev[-1]
        a_turned = u_turn(self.rho + first, *(sharp(x, self.inv_mass) for x in (other, first)))
        ends = sharp(near, self.inv_mass), sharp(self.p, self.inv_mass)
        return a_turned | u_turn(near + self.rho_sub, *ends)

    def _record(self, stop: Tensor) -> Tensor:
        """Record the steps of the chains whose tree stopped; returns those with a next step."""
        d, sample = self.dim, self.sample
        # ``samplers.base.contain``: the new state or its loss not finite
        self.diverged = self.diverged | (stop & ~torch.isfinite(sample).all(-1))
        self.sample = sample = torch.where(self.diverged[:, None], self.sample0, sample)
        accepted = self.metro / self.steps.clamp_min(1)
        divergent = self.divergent.to(accepted.dtype)
        kept = stop & ~self.diverged  # a frozen chain's state keeps its last divergent
        self.divergent_state = torch.where(kept, divergent, self.divergent_state)
        self.leapfrogs_state = torch.where(kept, self.steps, self.leapfrogs_state)
        slot = torch.where(stop, self.t, self.length_)
        columns = [sample[:, :d], sample[:, 2 * d + 1 :], accepted[:, None], divergent[:, None]]
        columns.append(self.steps[:, None])
        self._write(slot, torch.cat(columns, 1), self.diverged)
        self.t = self.t + stop
        self.active = self.t < self.length_
        return stop & self.active

    def _write(self, slot: Tensor, row: Tensor, diverged: Tensor) -> None:
        """Each chain's record at its step ``slot`` (row ``length``: the chains recording
        nothing)."""
        self.record[slot, self.chain] = row
        self.record_diverged[slot, self.chain] = diverged

    def _plant(self, mask: Tensor, here: Tensor) -> Tensor:
        """The tree of step t for the chains in ``mask``: p0 ~ N(0, I), H0 = U + |p0|^2 / 2,
        the tree the one point (w, p0), its weight exp(0), its sample the state. ``here``: the
        growing ends (w | p | g); returns them with the new trees'."""
        d, sample, per_step = self.dim, self.sample, self.per_step
        self.row = self.row + mask * per_step[0]
        p0 = momentum(self.xi.index_select(0, self.row), self.scale)
        h0 = sample[:, 2 * d] + self.half_h * torch.linalg.vecdot(p0, sharp(p0, self.inv_mass))
        self.h0 = torch.where(mask, h0, self.h0)
        self.alive = torch.isfinite(self.h0) & ~self.diverged  # else the tree stays a point
        rows = mask[:, None]
        self.sample0 = torch.where(rows, sample, self.sample0)
        end = torch.cat([sample[:, :d], p0, sample[:, d : 2 * d]], 1)
        self.other = torch.where(rows, end, self.other)
        self.rho = torch.where(rows, p0, self.rho)
        self.log_weight = self.log_weight.masked_fill(mask, 0.0)
        self.metro = self.metro.masked_fill(mask, 0.0)
        self.steps = self.steps.masked_fill(mask, 0.0)
        self.divergent = self.divergent & ~mask
        self.n = torch.where(mask, self.row * per_step[2], self.n)
        self.at = torch.where(mask, self.row * per_step[1] - 1, self.at)  # doubling -1
        self.j = self.j.masked_fill(mask, -1)
        return torch.where(rows, end, here)

    def _double(self, mask: Tensor, planted: Tensor, here: Tensor) -> None:
        """Doubling j + 1 for the chains in ``mask``: a direction v = +-1 and a new subtree
        from the tree's end on that side (the ends swap where v turns)."""
        d = self.dim
        self.j, self.at = self.j + mask, self.at + mask
        forward = self.direction.index_select(0, self.at) < self.half_h
        swap = (mask & (forward != self.forward))[:, None]
        grow = torch.where(swap, self.other, here)
        self.other = torch.where(swap, here, self.other)
        self.w, self.p, self.g = grow[:, :d], grow[:, d : 2 * d], grow[:, 2 * d :]
        self.forward = torch.where(mask, forward, self.forward)
        self.sign = torch.where(self.forward, self.step_size, self.back)[:, None]
        self.half = self.half_h * self.sign
        self.k = self.k.masked_fill(mask, 0)
        self.size = torch.where(mask, self.size_of.index_select(0, self.j), self.size)
        self.valid = torch.where(planted, self.alive, self.valid)  # a merged subtree's: True
        self.running = self.valid & self.active
        self.log_weight_sub = self.log_weight_sub.masked_fill(mask, -math.inf)
        self.metro_sub = self.metro_sub.masked_fill(mask, 0.0)
        self.rho_sub = self.rho_sub.masked_fill(mask[:, None], 0.0)

    # -- results -----------------------------------------------------------------------------
    def state(self):
        """The chains' state after their T steps."""
        d, sample, start = self.dim, self.sample, self.start
        counted = {}
        if hasattr(start, "count"):  # a warm-up's step count (samplers.warmup), past its end
            counted["count"] = torch.where(self.diverged, start.count, start.count + self.length)
        if hasattr(start, "divergent"):  # samplers.nuts.NUTSState's
            counted["divergent"] = self.divergent_state
            counted["leapfrogs"] = self.leapfrogs_state
        return replace(
            start,
            position=sample[:, :d].contiguous(),
            grad=sample[:, d : 2 * d].contiguous(),
            U=sample[:, 2 * d].contiguous(),
            loss=sample[:, 2 * d + 1].contiguous(),
            diverged=self.diverged,
            **counted,
        )

    def info(self, positions: bool = False) -> Info:
        """Each step's records, [T, C] (positions [T, C, d]), with the scalars ``divergent`` and
        ``leapfrogs`` (``samplers.nuts.NUTS.observe``); a diverged chain's loss and scalars NaN
        and its accepted 0, as ``samplers.base.contain`` reports them."""
        d, record, diverged = self.dim, self.record[:-1], self.record_diverged[:-1]
        return Info(
            loss=torch.where(diverged, math.nan, record[..., d]),
            accepted=torch.where(diverged, 0.0, record[..., d + 1]),
            diverged=diverged,
            position=record[..., :d].contiguous() if positions else None,
            scalars={
                "divergent": torch.where(diverged, math.nan, record[..., d + 2]),
                "leapfrogs": torch.where(diverged, math.nan, record[..., d + 3]),
            },
        )
