"""DE-MC-Z: Differential Evolution Markov Chain from past states, with the snooker update
(ter Braak & Vrugt 2008, Statistics and Computing 18).

The C chains are the population. Chain i proposes x_i + gamma (z_r1 - z_r2) + e, the difference
of two distinct rows of the archive Z (the population's past states, appended every ``thin``
steps), and with probability ``snooker`` a snooker move along the line through x_i and a third
row z. Both proposals are symmetric given Z (the snooker's with its Jacobian factor), so each
step is a Metropolis step that keeps the target for any fixed Z. Z grows with the chains' own
past, which makes the method adaptive, not Markov: the paper's argument is that of adaptive
MCMC, the adaptation fading as Z grows.

Z is held in ``Archive``, not in a tensor field of the state: ``contain`` freezes the per-chain
rows of a state's tensors, and a [rows, d] archive whose row count equals the chain count
would be taken for one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from .base import Draw
from .integrators import MHKernel, MHState
from .spec import LOC, NBETA, Param, aligned, kernel_spec

KEY = 1 << 62  # integer draws: an index is a key modulo the count m (bias at most m / 2^62)
GAMMA = 2.38  # gamma = 2.38 / sqrt(2 d): the random-walk optimum for differences of two draws
SNOOKER = (1.2, 2.2)  # the snooker's gamma_s ~ U(1.2, 2.2) (ter Braak & Vrugt 2008)


class Rows:
    """The archive's storage: a buffer grown by doubling (to ``capacity`` rows at most), shared
    by the states of a run. ``writes`` counts the appends made to it: a state whose archive saw
    fewer is an older branch, and copies its rows before it appends (so re-running an old
    state does not write into the rows a later state reads)."""

    def __init__(self, data: Tensor, writes: int = 0):
        self.data, self.writes = data, writes


@dataclass(frozen=True)
class Archive:
    """Z: the first ``count`` rows of ``rows.data``; ``seen``: the states ever offered to it.

    Up to ``capacity`` rows Z keeps every state, as in the paper. Past it, a state offered as
    the n-th replaces a uniformly chosen row with probability capacity / n (reservoir sampling,
    Vitter's algorithm R): Z stays a uniform random subset of all the states so far, so a row
    drawn from it is a uniform draw from the whole history, as in the paper, and the
    adaptation still fades (a new state enters with probability capacity / n). A ring buffer
    (the most recent states) would instead keep Z following the chains for ever. Once full,
    rows are replaced in place: a state older than the newest must then not be run again."""

    rows: Rows
    count: int
    seen: int
    writes: int

    @staticmethod
    def empty(dim: int, like: Tensor) -> Archive:
        return Archive(Rows(like.new_empty(0, dim)), 0, 0, 0)

    @property
    def z(self) -> Tensor:
        return self.rows.data[: self.count]

    def appended(self, new: Tensor, keys: Tensor, capacity: int) -> Archive:
        """Z with the rows ``new`` ([k, d], in order) offered; ``keys`` ([k] int64 draws in
        [0, KEY)) choose the rows they replace once Z holds ``capacity`` rows."""
        k = new.shape[0]
        if k == 0:
            return self
        store = self.rows
        if self.writes != store.writes:  # an older state's branch: its own copy of its rows
            store = Rows(store.data[: self.count].clone())
        n, device = self.seen, new.device
        index = torch.arange(n, n + k, device=device)
        slot = torch.where(index < capacity, index, keys[:k] % (index + 1))
        # two offers drawing the same row: the later one wins, as in the sequential algorithm
        # (sorted by row, then by order: the last of each row's run)
        order = torch.arange(k, device=device)
        ranked = (slot * k + order)[slot < capacity].sort().values
        slot, order = ranked // k, ranked % k
        last = torch.ones_like(slot, dtype=torch.bool)
        last[:-1] = slot[1:] != slot[:-1]
        slot, order = slot[last], order[last]
        count = min(capacity, n + k)
        if store.data.shape[0] < count:  # grow by doubling: memory follows the rows in use
            grown = new.new_empty(min(capacity, max(count, 2 * store.data.shape[0])), new.shape[1])
            grown[: self.count] = store.data[: self.count]
            store = Rows(grown, store.writes)
        store.data[slot] = new[order]
        store.writes += 1
        return Archive(store, count, n + k, store.writes)


@dataclass
class DEMCZState(MHState):
    archive: Archive  # Z (not a tensor: see the module's docstring)
    t: int  # steps taken (host side): Z takes the population when t % thin == 0


def distinct(keys: Tensor, m: int) -> tuple[Tensor, Tensor, Tensor]:
    """Three distinct uniform indices into m rows per chain from ``keys`` ([C, 3] int64): r1,
    then r2 from the other m - 1, then r3 from the other m - 2 (fewer rows: repeats)."""
    r1 = keys[:, 0] % m
    if m < 2:
        return r1, r1, r1
    r2 = keys[:, 1] % (m - 1)
    r2 = r2 + (r2 >= r1).long()
    if m < 3:
        return r1, r2, r1
    lo, hi = torch.minimum(r1, r2), torch.maximum(r1, r2)
    r3 = keys[:, 2] % (m - 2)
    r3 = r3 + (r3 >= lo).long()
    r3 = r3 + (r3 >= hi).long()
    return r1, r2, r3


class DEMCZ(MHKernel):
    """DE-MC-Z (ter Braak & Vrugt 2008): chain i proposes x' = x_i + gamma (z_r1 - z_r2) + e,
    z_r1 and z_r2 two distinct rows of the archive Z, gamma = step_size 2.38 / sqrt(2 d) (1 with
    probability ``jump``: a jump between modes), e ~ N(0, b^2 I); or, with probability
    ``snooker``, x' = x_i + gamma_s (projection of z_r1 - z_r2 on the line through x_i and a
    third row z), gamma_s ~ U(1.2, 2.2), whose acceptance carries the Jacobian factor
    (|x' - z| / |x_i - z|)^(d - 1). Accepted with min(1, exp(U(x_i) - U(x')) * factor). Z starts
    as the finite starting points (and, with ``spread`` > 0, as many points around them) and
    takes the finite chains' positions every ``thin`` steps, up to ``archive`` rows (then by
    reservoir sampling, see ``Archive``). A chain that is not finite never enters Z."""

    SPEC = kernel_spec(
        "de-mcmc-z",
        "mcmc",
        "ter Braak & Vrugt (2008), Statistics and Computing 18",
        [
            Param(
                "step_size",
                "float",
                1.0,
                "scale of gamma = step_size 2.38 / sqrt(2 d) (1: the paper's)",
                1e-12,
                10.0,
            ),
            NBETA,
            LOC,
            Param("jump", "float", 0.1, "probability of gamma = 1 (a mode jump)", 0.0, 1.0),
            Param("snooker", "float", 0.1, "probability of a snooker update", 0.0, 1.0),
            Param("jitter", "float", 1e-4, "b: e ~ N(0, b^2 I) added to a DE proposal", 0.0, 1e6),
            Param("thin", "int", 10, "K: Z takes the population every K steps", 1, 10_000_000),
            Param(
                "archive",
                "int",
                100_000,
                "rows Z keeps (past them: a uniform random subset of all states)",
                3,
                100_000_000,
            ),
            Param(
                "spread",
                "float",
                0.0,
                "Z also starts with start + spread N(0, I), one per chain (0: off)",
                0.0,
                1e6,
            ),
        ],
        equation=aligned(
            r"x' = x_i + \gamma\,(z_{r_1} - z_{r_2}) + e,\quad e \sim N(0, b^2 I)",
            r"\gamma = s\,\tfrac{2.38}{\sqrt{2d}} \ (\gamma = 1 \text{ w.p. } p_{\mathrm{jump}})",
            r"\text{snooker (w.p. } p_s\text{)}: x' = x_i + \gamma_s\,"
            r"\big((z_{r_1} - z_{r_2})^\top u\big)\,u,",
            r"\quad u = \tfrac{x_i - z}{\lVert x_i - z \rVert},\ \gamma_s \sim U(1.2, 2.2)",
            r"x_i \leftarrow x' \text{ w.p. } \min\big(1,\ e^{\,U(x_i) - U(x')}\,J\big)",
            r"J = \big(\lVert x' - z \rVert / \lVert x_i - z \rVert\big)^{d-1}"
            r" \text{ (snooker), else } 1",
            r"Z \leftarrow Z \cup \{x_1, \dots, x_C\} \text{ every } K \text{ steps}",
        ),
        text="DE-MC-Z, differential evolution Markov chain with an archive of past states (ter "
        "Braak & Vrugt 2008), as the MCMC Interactive Gallery shows it: the chains are one "
        "population, and each proposes a jump along the difference of two random past states, "
        "z_r1 - z_r2, times gamma = 2.38 / sqrt(2 d), plus a tiny jitter e. Past states have "
        "the target's scale and orientation, so the proposal takes the shape of a correlated "
        "or badly scaled target without a gradient and without tuning. A tenth of the DE moves "
        "take gamma = 1, which carries a chain from one mode to another, and a tenth of all "
        "moves are snooker moves along the line through the chain and a third past state z. "
        "Each proposal is accepted by Metropolis. The archive Z starts as the chains' starting "
        "points and takes the population every K = thin steps; past archive rows it keeps a "
        "uniform random subset of all past states. Because Z holds the chains' own past, the "
        "method is adaptive, not Markov; the paper argues that it still converges, as each "
        "new state changes Z less and less. It "
        "needs few chains (the paper uses three up to d = 50-100: Z, not the population, "
        "supplies the differences). The differences are only as good as Z: chains that all "
        "start at one point (a network's w0, a given start) give differences of zero, so the "
        "chains crawl at the jitter's scale with an acceptance near 1 (set spread > 0). An "
        "acceptance far below 0.1 (a thin ring, a funnel's neck) asks for a smaller step_size. "
        "Every chain's step reads Z, so the chains are not independent.",
        # RWMH's band: the DE move's gamma is the random-walk optimum (Roberts, Gelman & Gilks
        # 1997, about 0.23 in high dimension). Measured at the defaults: 0.25 on a d = 10
        # Gaussian (tests/test_demcz.py), 0.23-0.27 on the banana, mixture and squiggle, 0.08
        # on the donut's thin ring (0.13 at step_size 0.5, 0.20 at 0.25)
        acceptance=(0.1, 0.8),
    )
    coupled = True  # every chain's proposal reads Z, which all chains fill
    compilable = False  # Z's count and the append schedule are host-side

    def noise(self, chains, dim):
        return {
            "xi": Draw("normal", (chains, dim)),  # the jitter e
            "u": Draw("uniform", (chains,)),  # the Metropolis test
            "move": Draw("uniform", (chains, 3)),  # mode jump, snooker, gamma_s
            "pick": Draw("integers", (chains, 3), KEY),  # r1, r2 and the snooker's z
            "slot": Draw("integers", (chains,), KEY),  # the rows an append replaces
        }

    def start(self, state, target, generator):
        mh = super().start(state, target, generator)
        x = mh.position
        rows = x[_finite(mh)]
        if self.spread > 0:
            jitter = torch.randn(rows.shape, generator=generator, device=x.device, dtype=x.dtype)
            rows = torch.cat([rows, rows + self.spread * jitter])
        keys = torch.randint(KEY, (rows.shape[0],), generator=generator, device=x.device)
        archive = Archive.empty(x.shape[1], x).appended(rows, keys, self.archive)
        return DEMCZState(**vars(mh), archive=archive, t=0)

    def update(self, state, target, batch, noise, trace=None):
        x, archive = state.position, state.archive
        if archive.count == 0:  # no chain was ever finite: nothing to propose from
            return replace(state, t=state.t + 1), state.loss, torch.zeros_like(state.loss)
        z = archive.z
        r1, r2, r3 = distinct(noise["pick"], archive.count)
        diff = z[r1] - z[r2]
        move = noise["move"]
        scale = self.step_size * GAMMA / math.sqrt(2 * x.shape[1])
        gamma = torch.full_like(move[:, 0], scale).masked_fill(move[:, 0] < self.jump, 1.0)
        gamma = gamma[:, None]
        step = x + gamma * diff
        de = step + self.jitter * noise["xi"]
        anchor, snook, log_jacobian = self.snooker_move(x, z[r3], diff, move[:, 2])
        chosen = (move[:, 1] < self.snooker) & (archive.count >= 3)
        proposal = torch.where(chosen[:, None], snook, de)
        if trace is not None:  # x_i, x_i + gamma (z_r1 - z_r2), x'; snooker: x_i, z, x'
            trace["proposal"] = proposal
            middle = torch.where(chosen[:, None], anchor, step)
            trace["path"] = torch.stack([x, middle, proposal], 1)
        e = self.energy(proposal, state, target, None)
        log_ratio = state.U - e.value + torch.where(chosen, log_jacobian, 0.0)
        new, loss, accepted = self.settle(state, proposal, e, log_ratio, noise["u"])
        t = state.t + 1
        if t % self.thin == 0:
            ok = ~state.diverged & _finite(new)
            archive = archive.appended(new.position[ok], noise["slot"], self.archive)
        return replace(new, archive=archive, t=t), loss, accepted

    def snooker_move(
        self, x: Tensor, anchor: Tensor, diff: Tensor, u: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The snooker proposal x' = x + gamma_s c (x - z), c (x - z) the projection of
        z_r1 - z_r2 on the line through x and z = ``anchor``; returns (z, x', log of the
        Jacobian factor (d - 1) log(|x' - z| / |x - z|) = (d - 1) log|1 + gamma_s c|).
        Where x = z (no line) the factor is -inf: rejected."""
        axis = x - anchor
        norm2 = (axis * axis).sum(-1)
        c = (diff * axis).sum(-1) / torch.where(norm2 > 0, norm2, 1.0)
        gamma = SNOOKER[0] + (SNOOKER[1] - SNOOKER[0]) * u
        proposal = x + (gamma * c)[:, None] * axis
        log_jacobian = (x.shape[1] - 1) * torch.log(torch.abs(1 + gamma * c))
        return anchor, proposal, torch.where(norm2 > 0, log_jacobian, -math.inf)


def _finite(state: MHState) -> Tensor:
    """[C] bool: the chain's position, energy, gradient and loss are finite (what ``contain``
    keeps)."""
    return (
        torch.isfinite(state.position).all(-1)
        & torch.isfinite(state.grad).all(-1)
        & torch.isfinite(state.U)
        & torch.isfinite(state.loss)
    )
