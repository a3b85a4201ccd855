"""The No-U-Turn Sampler: HMC that picks its own trajectory length, per chain.

Hoffman & Gelman (2014), with the multinomial sampling and the generalised U-turn criterion of
Betancourt (2017, "A conceptual introduction to Hamiltonian Monte Carlo", appendix A) as Stan
implements them; a fixed step size and the identity mass matrix, or with ``step_size: auto``
both adapted during the burn-in by Stan's warm-up (samplers.warmup).
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch import Tensor

from .base import Draw
from .forest import MAX_DELTA_H, Forest, kinetic, sharp, u_turn
from .integrators import MHKernel
from .spec import LOC, NBETA, Param, aligned, kernel_spec
from .warmup import Adaptive, adapting_params

PATH_POINTS = 129  # at most this many points of a tree in ``trace["path"]``
FOREST_STEPS = 8  # blocks this long or longer grow as a forest (``NUTS.eager``)


class NUTS(Adaptive, MHKernel):
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
    (``eager``) lets each chain go on to its next step's tree instead (``Forest``), with the
    same arithmetic, and so the same draws.

    With ``step_size: auto`` the burn-in adapts the step and a diagonal mass matrix M
    (samplers.warmup): p0 ~ N(0, M), w moves by eps M^-1 p, the kinetic energy is
    p M^-1 p / 2, and the U-turn criterion reads rho . M^-1 p (Stan's)."""

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
        "1000), which end a tree early, as in a funnel's neck. With step_size auto the burn-in "
        "tunes the step by dual averaging toward an accept_stat of 0.8 and a diagonal mass "
        "matrix to the target's scales, as Stan's warm-up does (pooled over the chains); both "
        "stay fixed after it.",
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

    def start(self, state, target, generator):
        state = super().start(state, target, generator)
        return self.adapting_start(state, target, generator) if self.auto else state

    def update(self, state, target, batch, noise, trace=None):
        chains = state.position.shape[0]
        eps, inv_mass = self.stepping(state)
        # in the run's dtype (where of floats: f32)
        step = torch.full_like(state.U, eps) if inv_mass is None else eps[:, 0]
        p0 = noise["xi"] if inv_mass is None else noise["xi"] * inv_mass.rsqrt()
        h0 = state.U + kinetic(p0, inv_mass)
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
            sub = self._subtree(j, start, sign, h0, ~done, picks, state, target, trace, inv_mass)
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
            done = done | ~merged | u_turn(rho, sharp(left[1], inv_mass), sharp(right[1], inv_mass))
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
        accept_stat = metro / steps.clamp_min(1)
        if self.auto:
            new = self.adapted(state, new, accept_stat)
        return new, loss, accept_stat

    def _subtree(self, depth, start, sign, h0, live, picks, state, target, trace, inv_mass):
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
            w = w + sign * (p_half if inv_mass is None else inv_mass * p_half)
            e = self.energy(w, state, target, None)
            grad = e.grad
            p = p_half - half * grad
            # log weight exp(H0 - H); a NaN energy weighs nothing (H = inf, as Stan's)
            log_w = torch.nan_to_num(h0 - e.value - kinetic(p, inv_mass), nan=-math.inf)
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
                    span, ends = rho - before[level], (first[level], p)
                    valid = valid & ~u_turn(span, *(sharp(x, inv_mass) for x in ends))
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


def _pick(mask: Tensor, new: Tensor, old: Tensor) -> Tensor:
    return torch.where(mask.reshape(-1, *[1] * (new.ndim - 1)), new, old)


