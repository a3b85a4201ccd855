"""The No-U-Turn Sampler: HMC that picks its own trajectory length, per chain.

Hoffman & Gelman (2014), with the multinomial sampling and the generalised U-turn criterion of
Betancourt (2017, "A conceptual introduction to Hamiltonian Monte Carlo", appendix A) as Stan
implements them; identity mass matrix, a fixed step size (no dual averaging).
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch import Tensor

from .base import Draw
from .integrators import MHKernel
from .spec import LOC, NBETA, Param, aligned, kernel_spec
from .state import Info

MAX_DELTA_H = 1000.0  # a leapfrog step whose energy error H - H0 exceeds this diverged (Stan's)
PATH_POINTS = 129  # at most this many points of a tree in ``trace["path"]``
# the waiting chains settle together once they are this fraction of the unfinished ones: each
# settle costs as many tensor ops as a few leaves, and a chain waits a leaf or two for it
SETTLE_WAITING = 0.3
FOREST_STEPS = 8  # blocks this long or longer grow as a forest (``NUTS.eager``)
SPARSE_LEVELS = 8192  # above this many span checkpoint entries (levels x chains x d), sparse


class NUTS(MHKernel):
    """p0 ~ N(0, I), H = U + |p|^2 / 2; the tree starts as the one point (w, p0). At doubling
    j = 0, 1, ..., max_depth - 1 each chain draws a direction v = +-1 and, from the tree's end on
    that side, takes 2^j leapfrog steps of signed step v eps (a subtree). Every point z carries
    the weight exp(H0 - H(z)). The subtree's own sample is drawn progressively: point z replaces
    it with probability w(z) / (sum of the subtree's weights so far), a multinomial draw. The
    subtree is invalid when a step diverges (H - H0 > 1000) or when any of its binary subtrees
    (spans of 2^l consecutive points aligned on 2^l) makes a U-turn: with rho the sum of the
    span's momenta and p-, p+ its end momenta, not (rho . p- > 0 and rho . p+ > 0). An invalid
    subtree ends that chain's tree and is dropped. A valid one is merged: it replaces the tree's
    sample with probability min(1, W_sub / W_tree) (the biased progressive rule, which favours
    the new half), W_tree += W_sub, and the chain stops when the whole tree makes a U-turn, or
    at max_depth. The sample is the next state. ``accepted`` reports Stan's accept_stat: the
    mean over the tree's new points of min(1, exp(H0 - H)).

    One step (``update``) builds all chains' trees in lockstep on [C, d] tensors; a chain whose
    tree has stopped keeps its values (masked) while the others go on. A block of steps
    (``eager``) lets each chain go on to its next step's tree instead (``_Forest``), with the
    same arithmetic, and so the same draws."""

    SPEC = kernel_spec(
        "nuts",
        "mcmc",
        "Hoffman & Gelman (2014), JMLR 15",
        [
            # fixed (no dual averaging): the registry's 1e-3 would build max_depth trees of
            # 1023 steps on the teaching targets at every iteration
            Param("step_size", "float", 0.1, "leapfrog step size epsilon (fixed)", 1e-12, 10.0),
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
            r"p_0 \sim \mathcal{N}(0, I),\quad H = U(w) + \tfrac{1}{2}\lVert p \rVert^2,"
            r"\quad \text{tree } \mathcal{T} = \{(w_t, p_0)\}",
            r"\text{doubling } j:\ v_j = \pm 1,\ 2^j \text{ leapfrog steps of } v_j\,\varepsilon"
            r" \text{ from } \mathcal{T}\text{'s end on side } v_j",
            r"\text{stop if } \rho \cdot p^- \le 0 \text{ or } \rho \cdot p^+ \le 0"
            r" \text{ on any binary subtree},\ \rho = \textstyle\sum p",
            r"\text{sample } z \in \mathcal{T} \text{ with probability } \propto e^{-H(z)}"
            r"\ \text{(progressively)}",
        ),
        text="The No-U-Turn Sampler (Hoffman & Gelman 2014) in its multinomial form (Betancourt "
        "2017), as Stan runs it with a unit mass matrix: HMC without a trajectory length. "
        "Each chain doubles its trajectory forwards or backwards in time (a coin flip a "
        "doubling) until the trajectory starts to turn back on itself, judged by the "
        "generalised U-turn criterion on every binary subtree, or until 2^max_depth points. "
        "The next state is drawn from all the trajectory's points with weights exp(-H): within "
        "a new subtree multinomially, and across the merge with min(1, W_new / W_old), which "
        "favours points far from the start. The construction is reversible, so the chain "
        "samples exp(-U) exactly at any step size; too large a step shows as a low accept_stat "
        "(the mean of min(1, exp(H0 - H)) over the new points) and as divergences (H - H0 > "
        "1000), which end a tree early, as in a funnel's neck. The step size is fixed here "
        "(Stan tunes it by dual averaging during warm-up).",
        acceptance=(0.5, 1.0),  # Stan's accept_stat, whose usual target is 0.8
    )
    fractional_acceptance = True  # accepted: the accept_stat, in [0, 1]
    # NOT compilable: each doubling asks the host whether every chain's tree has stopped (one
    # sync a doubling; the forest: one a leaf) so a step ends at the deepest tree it needs; a
    # compiled step of fixed shape would run all 2^max_depth - 1 leapfrog steps every time.
    compilable = False

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

    def update(self, state, target, batch, noise, trace=None):
        chains = state.position.shape[0]
        step = torch.full_like(state.U, self.step_size)  # in the run's dtype (where of floats: f32)
        p0 = noise["xi"]
        h0 = state.U + 0.5 * (p0 * p0).sum(-1)
        zero = torch.zeros_like(state.U)
        # the tree: its ends in time (position, momentum, gradient), the sum rho of its momenta,
        # the log of its total weight, and its sample (position, U, grad U, L)
        left = right = (state.position, p0, state.grad)
        rho, log_weight = p0, zero
        sample = (state.position, state.U, state.grad, state.loss)
        done = state.diverged | ~torch.isfinite(h0)
        metro, steps = zero, zero  # accept_stat's sum and count
        # for ``trace``: points on either side of the start, and each subtree's points
        n_left = n_right = torch.zeros(chains, dtype=torch.long, device=p0.device)
        built = []
        for j in range(self.max_depth):
            if bool(done.all()):  # the one host sync a doubling (see ``compilable``)
                break
            forward = noise["direction"][:, j] < 0.5
            sign = torch.where(forward, step, -step)[:, None]  # the signed step, [C, 1]
            start = tuple(_pick(forward, r, lt) for r, lt in zip(right, left, strict=True))
            picks = noise["pick"][:, 2**j - 1 : 2 ** (j + 1) - 1]
            sub = self._subtree(j, start, sign, h0, ~done, picks, state, target, trace)
            metro, steps = metro + sub["metro"], steps + sub["steps"]
            merged = sub["valid"]  # only chains that were still building can be valid
            take = merged & (noise["merge"][:, j] < torch.exp(sub["log_weight"] - log_weight))
            sample = tuple(_pick(take, s, t) for s, t in zip(sub["sample"], sample, strict=True))
            log_weight = torch.where(
                merged, torch.logaddexp(log_weight, sub["log_weight"]), log_weight
            )
            end = sub["end"]
            right = tuple(_pick(merged & forward, e, r) for e, r in zip(end, right, strict=True))
            left = tuple(_pick(merged & ~forward, e, lt) for e, lt in zip(end, left, strict=True))
            rho = _pick(merged, rho + sub["rho"], rho)
            done = done | ~merged | _u_turn(rho, left[1], right[1])
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
        new = replace(state, position=position, U=u, grad=grad, loss=loss)
        return new, loss, metro / steps.clamp_min(1)

    def _subtree(self, depth, start, sign, h0, live, picks, state, target, trace):
        """2^depth leapfrog steps of step ``sign`` ([C, 1]) from ``start`` for the ``live``
        chains, with the subtree's progressive multinomial sample and the U-turn check of every
        binary span. Per level l the span's first momentum and the running momentum sum before
        it are kept (a checkpoint), so span [k + 1 - 2^l, k] is checked when (k + 1) % 2^l == 0
        with rho = (sum to k) - (sum before the span). A chain that is no longer valid goes on
        integrating unmasked (one [C, d] pass for all): its subtree is dropped, and past its
        end nothing it computes is read."""
        w, p, grad = start
        half = 0.5 * sign
        valid = live
        log_weight = torch.full_like(h0, -math.inf)
        sample = (w, h0, grad, h0)  # replaced at the first point of every valid chain
        metro, steps = torch.zeros_like(h0), torch.zeros_like(h0)
        rho = torch.zeros_like(p)  # the momentum sum of the subtree's points so far
        first, before = {}, {}  # level -> the span's first momentum, the sum before the span
        points = []
        for k in range(2**depth):
            p_half = p - half * grad
            w = w + sign * p_half
            e = self.energy(w, state, target, None)
            grad = e.grad
            p = p_half - half * grad
            # log weight exp(H0 - H); a NaN energy weighs nothing (H = inf, as Stan's)
            log_w = torch.nan_to_num(h0 - e.value - 0.5 * (p * p).sum(-1), nan=-math.inf)
            # every step a valid chain takes counts in accept_stat, the diverging one too
            metro = metro + torch.where(valid, log_w.clamp_max(0).exp(), 0.0)
            steps = steps + valid
            valid = valid & (log_w >= -MAX_DELTA_H)
            log_weight_new = torch.logaddexp(log_weight, log_w)
            take = valid & (picks[:, k] < torch.exp(log_w - log_weight_new))
            new = (w, e.value, grad, e.loss)
            sample = tuple(_pick(take, n, s) for n, s in zip(new, sample, strict=True))
            log_weight = torch.where(valid, log_weight_new, log_weight)
            for level in range(1, depth + 1):
                if k % 2**level == 0:
                    first[level], before[level] = p, rho
            rho = rho + p
            for level in range(1, depth + 1):
                if (k + 1) % 2**level == 0:
                    valid = valid & ~_u_turn(rho - before[level], first[level], p)
            if trace is not None:
                points.append(w)
        return {
            "valid": valid,
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

    def eager(self, state, target, noise, positions=False, trace=False):
        """A block of at least FOREST_STEPS steps grows as one ``_Forest``: each chain goes on
        to its next step's tree as soon as its own tree stops, so the block costs about its
        busiest chain's leapfrog steps, not the sum over its steps of each step's deepest
        tree. The same draws and records as ``step`` one row at a time, which shorter blocks
        (many chains: NUTS's 2^max_depth draws a chain make short noise blocks) and traced
        ones take: there the forest's bookkeeping costs more than it saves."""
        steps = next(iter(noise.values())).shape[0] if noise else 0
        if trace or steps < FOREST_STEPS:
            return super().eager(state, target, noise, positions, trace)
        forest = _Forest(self, state, target, noise)
        forest.grow()
        return forest.state(), forest.info(positions)


def _u_turn(rho: Tensor, p_minus: Tensor, p_plus: Tensor) -> Tensor:
    """[C] bool: the span with momentum sum ``rho`` and end momenta p-, p+ turned back (or is
    not finite): not (rho . p- > 0 and rho . p+ > 0)."""
    ends = torch.minimum(torch.linalg.vecdot(rho, p_minus), torch.linalg.vecdot(rho, p_plus))
    return ~(ends > 0)


def _pick(mask: Tensor, new: Tensor, old: Tensor) -> Tensor:
    return torch.where(mask.reshape(-1, *[1] * (new.ndim - 1)), new, old)


class _Forest:
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
    sum ``rho``, the log of its weight and its sample (w | g | U | L); the subtree being built
    has the same three (``*_sub``) and, per span level l = 1..max_depth - 1, the momentum that
    opened its current 2^l-leaf span and its momentum sum before that span (``first``,
    ``before``). A chain whose new state is not finite is frozen where it was and flagged, as
    ``samplers.base.contain`` does after each step."""

    def __init__(self, kernel: NUTS, state, target, noise: dict):
        self.kernel, self.start, self.target = kernel, state, target
        length, chains, d = noise["xi"].shape
        depth, device, u = kernel.max_depth, state.position.device, state.U
        self.length, self.chains, self.dim, self.depth = length, chains, d, depth
        self.xi = noise["xi"].reshape(length * chains, d)
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
        self.sparse = device.type == "cpu" and max(depth - 1, 0) * chains * d > SPARSE_LEVELS
        if self.sparse:
            self.opens, self.closes = opens.T.contiguous(), closes.T.contiguous()  # [k, level]
        else:  # as [level, k, d] masks (on a CPU, a table of at most a few MB)
            self.opens, self.closes = opens[..., None].expand(-1, -1, d), closes
            if device.type == "cpu":
                self.opens = self.opens.contiguous()
        self.size_of = 2 ** torch.arange(depth, device=device)  # doubling j's leaves
        # constants as tensors: an op with a Python number converts it each time (~1 us)
        self.step_size = torch.full_like(u, kernel.step_size)  # in the run's dtype
        self.back = -self.step_size
        self.zero, self.half_h = torch.zeros_like(u), u.new_tensor(0.5)
        self.floor = u.new_tensor(-MAX_DELTA_H)
        self.last, self.length_ = self.chain.new_tensor(depth - 1), self.chain.new_tensor(length)
        self.per_step = torch.tensor([chains, depth, 2**depth], device=device)
        # a chain's tree and subtree (see the class doc); t: its step; j, k: its doubling and
        # leaf; n: the pick of its tree's next point; at: its doubling's direction and merge
        self.sample = torch.cat([state.position, state.grad, u[:, None], state.loss[:, None]], 1)
        self.sample0 = self.sample
        self.sample_sub = (state.position, state.grad, u, state.loss)  # apart: 4 cheaper wheres
        self.diverged = state.diverged.clone()
        index = torch.zeros(chains, dtype=torch.long, device=device)
        self.t, self.j, self.k, self.size, self.n, self.at = (index,) * 6
        self.row = self.chain - chains  # of the noise rows, t C + c (planting adds C)
        self.active = self.forward = self.valid = torch.ones_like(self.diverged)
        self.h0 = self.log_weight = self.metro = self.steps = self.zero
        self.w, self.p, self.g = state.position, torch.zeros_like(state.position), state.grad
        self.rho = self.rho_sub = self.p
        self.other = torch.cat([self.w, self.p, self.g], 1)
        self.first, self.before = (u.new_zeros(max(depth - 1, 0), chains, d) for _ in "fb")
        self.log_weight_sub = self.metro_sub = self.zero
        # each step's records; row ``length`` takes the writes of chains that record nothing
        self.record = u.new_zeros(length + 1, chains, d + 2)  # position | loss | accepted
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

    # -- one leaf ----------------------------------------------------------------------------
    def _leaf(self) -> None:
        """One leapfrog step of every running chain's subtree, with the subtree's progressive
        multinomial sample and the U-turn checks of the spans this leaf closes."""
        half, sign, g, running = self.half, self.sign, self.g, self.running
        p_half = self.p - half * g
        w = self.w + sign * p_half
        e = self.kernel.energy(w, self.start, self.target, None)
        g = e.grad
        p = p_half - half * g
        # log weight exp(H0 - H); a NaN energy weighs nothing (H = inf, as Stan's)
        kinetic = self.half_h * torch.linalg.vecdot(p, p)
        log_w = torch.nan_to_num(self.h0 - e.value - kinetic, nan=-math.inf)
        # every step a valid chain takes counts in accept_stat, the diverging one too
        self.metro_sub = self.metro_sub + torch.where(running, log_w.clamp_max(0).exp(), self.zero)
        kept = running & (log_w >= self.floor)
        log_weight = torch.logaddexp(self.log_weight_sub, log_w)
        take = kept & (self.pick.index_select(0, self.n) < torch.exp(log_w - log_weight))
        taken, (w_sub, g_sub, u_sub, loss_sub) = take[:, None], self.sample_sub
        self.sample_sub = (
            torch.where(taken, w, w_sub),
            torch.where(taken, g, g_sub),
            torch.where(take, e.value, u_sub),
            torch.where(take, e.loss, loss_sub),
        )
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
        """Leaf k's span checkpoints (its momentum p and the subtree's momentum sum before it,
        for the spans it opens), then [C] bool: a span it closes, [k + 1 - 2^l, k], turned
        back (its momentum sum: ``rho``, the sum to k, less the sum before the span)."""
        if not self.sparse:
            opens = self.opens.index_select(1, k)
            self.first = torch.where(opens, p, self.first)
            self.before = torch.where(opens, self.rho_sub, self.before)
            span = rho - self.before
            return (self.closes.index_select(1, k) & _u_turn(span, self.first, p)).any(0)
        first, before = self.first.flatten(0, 1), self.before.flatten(0, 1)  # views
        at, chain = self._pairs(self.opens, k)
        first.index_copy_(0, at, p.index_select(0, chain))
        before.index_copy_(0, at, self.rho_sub.index_select(0, chain))
        at, chain = self._pairs(self.closes, k)
        span = rho.index_select(0, chain) - before.index_select(0, at)
        turned = _u_turn(span, first.index_select(0, at), p.index_select(0, chain))
        return torch.zeros_like(k).index_add_(0, chain, turned.long()) > 0

    def _pairs(self, table: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """The (level, chain) pairs of ``table`` ([k, level]) at the chains' k: their rows of
        the flattened [L, C] checkpoints, and their chains (a host sync)."""
        levels = table.shape[1]
        pair = table.index_select(0, k).flatten().nonzero().squeeze(1)  # chain * L + level
        chain = pair.div(levels, rounding_mode="floor")
        return (pair - chain * levels) * self.chains + chain, chain

    # -- settling the waiting chains ---------------------------------------------------------
    def _settle(self) -> int:
        """The waiting chains merge their subtree, or stop when it is invalid; those whose
        tree stopped record their step and plant the next; the others start a new doubling.
        Returns how many chains have steps left."""
        ending = self.active & ~self.running
        merged = ending & self.valid
        self.metro = torch.where(ending, self.metro + self.metro_sub, self.metro)
        self.steps = torch.where(ending, self.steps + self.k, self.steps)
        # the biased progressive rule: the subtree's sample with probability W_sub / W_tree
        u = self.merge.index_select(0, self.at)
        take = merged & (u < torch.exp(self.log_weight_sub - self.log_weight))
        w_sub, g_sub, u_sub, loss_sub = self.sample_sub
        sub = torch.cat([w_sub, g_sub, u_sub[:, None], loss_sub[:, None]], 1)
        self.sample = torch.where(take[:, None], sub, self.sample)
        both = torch.logaddexp(self.log_weight, self.log_weight_sub)
        self.log_weight = torch.where(merged, both, self.log_weight)
        self.rho = rho = torch.where(merged[:, None], self.rho + self.rho_sub, self.rho)
        # the whole tree's U-turn; the ends' order does not matter
        other = self.other[:, self.dim : 2 * self.dim]
        more = merged & ~_u_turn(rho, other, self.p) & (self.j < self.last)
        here = torch.cat([self.w, self.p, self.g], 1)
        planted = self._record(ending & ~more)
        here = self._plant(planted, here)
        self._double(more | planted, planted, here)
        return int(self.active.sum())

    def _record(self, stop: Tensor) -> Tensor:
        """Record the steps of the chains whose tree stopped; returns those with a next step."""
        d, sample = self.dim, self.sample
        # ``samplers.base.contain``: the new state or its loss not finite
        self.diverged = self.diverged | (stop & ~torch.isfinite(sample).all(-1))
        self.sample = sample = torch.where(self.diverged[:, None], self.sample0, sample)
        accepted = self.metro / self.steps.clamp_min(1)
        slot = torch.where(stop, self.t, self.length_)
        row = torch.cat([sample[:, :d], sample[:, 2 * d + 1 :], accepted[:, None]], 1)
        self.record[slot, self.chain] = row
        self.record_diverged[slot, self.chain] = self.diverged
        self.t = self.t + stop
        self.active = self.t < self.length_
        return stop & self.active

    def _plant(self, mask: Tensor, here: Tensor) -> Tensor:
        """The tree of step t for the chains in ``mask``: p0 ~ N(0, I), H0 = U + |p0|^2 / 2,
        the tree the one point (w, p0), its weight exp(0), its sample the state. ``here``: the
        growing ends (w | p | g); returns them with the new trees'."""
        d, sample, per_step = self.dim, self.sample, self.per_step
        self.row = self.row + mask * per_step[0]
        p0 = self.xi.index_select(0, self.row)
        h0 = sample[:, 2 * d] + self.half_h * torch.linalg.vecdot(p0, p0)
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
        d, sample = self.dim, self.sample
        return replace(
            self.start,
            position=sample[:, :d].contiguous(),
            grad=sample[:, d : 2 * d].contiguous(),
            U=sample[:, 2 * d].contiguous(),
            loss=sample[:, 2 * d + 1].contiguous(),
            diverged=self.diverged,
        )

    def info(self, positions: bool = False) -> Info:
        """Each step's records, [T, C] (positions [T, C, d]); a diverged chain's loss NaN and
        its accepted 0, as ``samplers.base.contain`` reports them."""
        d, record, diverged = self.dim, self.record[:-1], self.record_diverged[:-1]
        return Info(
            loss=torch.where(diverged, math.nan, record[..., d]),
            accepted=torch.where(diverged, 0.0, record[..., d + 1]),
            diverged=diverged,
            position=record[..., :d].contiguous() if positions else None,
        )
