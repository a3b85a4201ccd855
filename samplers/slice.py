"""Slice samplers: Neal's (2003) slice sampling along a random direction (hit-and-run), and
elliptical slice sampling (Murray, Adams & MacKay 2010) for targets with a Gaussian part.

A slice step draws a level under the density at the current point and moves to a point of the
"slice" above that level, found by a search along a line (or an ellipse) whose number of trials
depends on the data: each chain searches until it lands in its slice, all chains batched, the
finished ones masked. Every search gets a cap (``max_shrinks``) and one pre-drawn column per
possible trial, so a step reads a fixed number of draws. ``samplers/gibbs.py`` reuses the line
search along the coordinate axes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from landscapes import ParamError, Target

from .base import Draw, Kernel, State
from .integrators import all_accepted
from .spec import LOC, NBETA, Param, Watch, aligned, kernel_spec

# points of a traced path at most: the Playground keeps 33 a step (charts/animation.py)
PATH_POINTS = 33

WIDTH = Param(
    "width", "float", 1.0, "initial interval width w along the line (the target's scale)", 1e-6, 1e6
)
# Neal's m: the interval grows to at most m widths, J = floor(m V) to the left and m - 1 - J to
# the right; 20 gives up to 19 widths in all, about ten on each side
STEPS_OUT = Param(
    "max_steps_out",
    "int",
    20,
    "m: the interval grows to at most m widths, split at random between the two ends "
    "(0 or 1: no stepping out)",
    0,
    1000,
)
# a shrinkage draw cuts the interval by a uniform factor: e^-1 a trial on average, so 50 trials
# cover a width e^50 times the slice's length before the cap is reached
SHRINKS = Param(
    "max_shrinks",
    "int",
    50,
    "most points tried in the shrinkage a step; if none lands in the slice the chain stays "
    "where it is (counted in 'capped')",
    1,
    1000,
)
# Neal (2003), Sec. 4: stepping out costs about (slice length) / width evaluations, shrinkage
# about log2(width / slice length): ~3-6 a line search when the width suits the target
EXPENSIVE = Watch(
    "evaluations",
    15.0,
    "each line search costs many energy evaluations: the width is far from the target's scale "
    "along a line (Neal 2003, Sec. 4)",
    "a width near the target's scale (its standard deviation along a line)",
)
CAPPED = Watch(
    "capped",
    0.0,
    "some searches reached max_shrinks without a point in the slice, and the chain stayed",
    "a larger max_shrinks, or a width near the target's scale",
)


@dataclass
class SliceState(State):
    U: Tensor  # [C] the energy at the position
    loss: Tensor  # [C] the loss L there
    evaluations: Tensor  # [C] energy evaluations the last step made
    capped: Tensor  # [C] searches of the last step that reached max_shrinks (the chain stayed)


@dataclass
class Line:
    """A line search's outcome: the new point, its energy and loss, its cost, and the points
    tried (``path``: [C, P, d] or None)."""

    position: Tensor
    U: Tensor
    loss: Tensor
    evaluations: Tensor
    capped: Tensor
    path: Tensor | None


class SliceKernel(Kernel):
    """What slice kernels share: a state with the energy and the search's cost, the energy's
    value without its gradient (a slice test needs no gradient), and Neal's line search."""

    minibatch = False
    traces = True
    # NOT compilable: each search iteration asks the host whether every chain is done (one sync
    # an iteration), so a step costs the trials its slowest chain needs, not the cap's
    compilable = False

    def start(self, state, target, generator):
        loss, value = self.values(state.position, state.center, target)
        zero = torch.zeros_like(value)
        return SliceState(**vars(state), U=value, loss=loss, evaluations=zero, capped=zero)

    def observe(self, state):
        return {"evaluations": state.evaluations, "capped": state.capped}

    def values(self, w: Tensor, center: Tensor, target: Target) -> tuple[Tensor, Tensor]:
        """(L, U) at ``w`` ([C, d]): U = nbeta L + prior + (localization/2)|w - center|^2, the
        same U as ``Kernel.energy`` without the gradient."""
        loss = target.loss(w)
        nbeta = self.nbeta_for(target)
        value = loss if nbeta == 1 else nbeta * loss
        if target.has_prior:
            value = value + target.prior_energy(w)
        if self.localization:
            diff = w - center
            value = value + 0.5 * self.localization * (diff * diff).sum(-1)
        return loss, value

    def values_at(
        self, w: Tensor, center: Tensor, target: Target, index: Tensor
    ) -> tuple[Tensor, Tensor]:
        """``values`` at the rows ``index`` of ``w`` alone (the chains still searching), NaN
        elsewhere: a search's later trials cost what its unfinished chains need."""
        return on_rows(lambda x, c: self.values(x, c, target), w, center, index)

    def line(
        self,
        state: SliceState,
        target: Target,
        direction: Tensor,
        u: Tensor,
        active: Tensor,
        trace: bool,
    ) -> Line:
        """One slice step from ``state`` along w + s ``direction`` (unit, [C, d] or [1, d]) with
        the draws ``u`` ([C, 3 + max_shrinks]: the level, the interval's offset, the split of m,
        then one per shrinkage trial); chains not ``active`` stay."""
        x0, center = state.position, state.center
        log_y = -state.U + torch.log1p(-u[:, 0])  # log u, u in (0, 1]: x0 is in its slice
        left, right, evaluations = self.step_out(x0, center, target, direction, log_y, u, active)
        path = None
        if trace:
            size = min(3 + self.max_shrinks, PATH_POINTS)
            path = x0.new_full((x0.shape[0], size, x0.shape[1]), math.nan)
            path[:, 0] = x0
            path[:, 1] = torch.where(active[:, None], x0 + left[:, None] * direction, math.nan)
            path[:, 2] = torch.where(active[:, None], x0 + right[:, None] * direction, math.nan)
        found = self.shrink(state, target, direction, log_y, left, right, u[:, 3:], active, path)
        found.evaluations = found.evaluations + evaluations
        return found

    def step_out(self, x0, center, target, direction, log_y, u, active):
        """Neal (2003) Fig. 3: an interval of width w placed at random around x0 (s = 0) grows
        by w at an end while that end is in the slice, J = floor(m V) times at most on the left
        and m - 1 - J on the right. Returns its ends (as s) and the evaluations made."""
        width, m = self.width, self.max_steps_out
        left = -width * u[:, 1]
        right = left + width
        j = torch.floor(m * u[:, 2])
        k = (m - 1) - j
        go_left, go_right = active & (j > 0), active & (k > 0)
        evaluations = torch.zeros_like(log_y)
        while len(index := torch.cat([go_left, go_right]).nonzero()[:, 0]):  # one host sync
            ends = torch.cat([x0 + left[:, None] * direction, x0 + right[:, None] * direction])
            _, value = self.values_at(ends, torch.cat([center, center]), target, index)
            value_left, value_right = value.chunk(2)
            grow_left = go_left & (-value_left >= log_y)  # a NaN energy is outside
            grow_right = go_right & (-value_right >= log_y)
            evaluations = evaluations + go_left + go_right
            left = torch.where(grow_left, left - width, left)
            right = torch.where(grow_right, right + width, right)
            j, k = j - grow_left.to(j.dtype), k - grow_right.to(k.dtype)
            go_left, go_right = grow_left & (j > 0), grow_right & (k > 0)
        return left, right, evaluations

    def shrink(self, state, target, direction, log_y, left, right, draws, active, path) -> Line:
        """Neal (2003) Fig. 5: s ~ U(L, R) until w + s e is in the slice; a trial outside it
        becomes the interval's end on its side of s = 0, so the interval closes on x0. At most
        ``draws.shape[1]`` trials: a chain still outside then stays at x0 (the truncated
        procedure is still reversible: a path of k trials from x0 to x1 is, trial for trial, one
        from x1 to x0), and its ``capped`` is 1."""
        x0 = state.position
        position, value, loss = x0, state.U, state.loss
        done = ~active
        evaluations = torch.zeros_like(log_y)
        for trial in range(draws.shape[1]):
            index = (~done).nonzero()[:, 0]  # one host sync a trial
            if not len(index):
                break
            s = left + draws[:, trial] * (right - left)
            point = x0 + s[:, None] * direction
            loss_new, value_new = self.values_at(point, state.center, target, index)
            trying = ~done
            inside = trying & (-value_new >= log_y)
            evaluations = evaluations + trying
            position = torch.where(inside[:, None], point, position)
            value = torch.where(inside, value_new, value)
            loss = torch.where(inside, loss_new, loss)
            if path is not None:  # past the path's length the last column holds the latest
                column = min(3 + trial, path.shape[1] - 1)
                path[:, column] = torch.where(trying[:, None], point, path[:, column])
            outside = trying & ~inside
            left = torch.where(outside & (s < 0), s, left)
            right = torch.where(outside & (s >= 0), s, right)
            done = done | inside
        capped = (~done).to(log_y.dtype)
        return Line(position, value, loss, evaluations, capped, path)


class Slice(SliceKernel):
    """Slice sampling (Neal 2003: the stepping-out procedure of Fig. 3 and the shrinkage of
    Fig. 5) along a uniformly random direction e = eta / |eta| per chain and step
    (hit-and-run): log y = -U(w) + log u, an interval of width w around w (s = 0) on the line
    w + s e is stepped out while its ends are in the slice {s : -U(w + s e) >= log y}, then
    points s ~ U(L, R) are tried, each miss shrinking the interval towards s = 0, until one is
    in the slice: the next state. Every step moves all coordinates, needs no gradient and
    leaves exp(-U) exactly invariant, whatever the width."""

    SPEC = kernel_spec(
        "slice",
        "mcmc",
        "Neal (2003), Slice sampling, Annals of Statistics 31(3)",
        [WIDTH, STEPS_OUT, SHRINKS, NBETA, LOC],
        equation=aligned(
            r"e = \eta / \lVert \eta \rVert,\quad \log y = -U(w_t) + \log u",
            r"S = \{ s : -U(w_t + s\,e) \ge \log y \}",
            r"L = -w\,v_1,\ R = L + w,\ J = \lfloor m v_2 \rfloor",
            r"\text{while } L \in S\ (\text{at most } J \text{ times}):\ L \leftarrow L - w",
            r"\text{while } R \in S\ (\text{at most } m - 1 - J \text{ times}):"
            r"\ R \leftarrow R + w",
            r"s \sim \mathcal{U}(L, R):\ s \in S \Rightarrow w_{t+1} = w_t + s\,e;",
            r"\text{else } L \leftarrow s\ (s < 0),\ R \leftarrow s\ (s \ge 0),\ \text{again}",
        ),
        text="Slice sampling (Neal 2003) along a random line: each step draws a level under the "
        "density at the current point and a direction uniformly at random, places an interval "
        "of width w around the point on that line, steps it out by w while its ends are above "
        "the level (at most m widths in all, Neal's Fig. 3), then draws points in it, shrinking "
        "it towards the current point after each miss, until one is above the level (Fig. 5). "
        "It needs no gradient and no step size to tune: the chain samples exp(-U) exactly for "
        "any width, and every step moves. There is no acceptance rate to watch (every step "
        "moves); watch 'evaluations', the energy evaluations a step costs: about 3-6 when the "
        "width matches the target's scale along a line, many more when it does not (a width "
        "far too small steps out up to m times and moves by small steps; one far too large "
        "shrinks about log(width / slice length) times). 'capped' counts steps whose "
        "shrinkage reached max_shrinks without a point in the slice: the chain stayed where "
        "it was (still a valid chain), and it should stay 0.",
        acceptance=None,  # every step moves to a point in its slice: no MH test
        watch=(EXPENSIVE, CAPPED),
    )

    def noise(self, chains, dim):
        """xi: the direction (normalised). u: the level, the interval's offset, the split of
        m, and one draw per shrinkage trial."""
        return {
            "xi": Draw("normal", (chains, dim)),
            "u": Draw("uniform", (chains, 3 + self.max_shrinks)),
        }

    def update(self, state, target, batch, noise, trace=None):
        xi = noise["xi"]
        direction = xi / torch.linalg.vector_norm(xi, dim=-1, keepdim=True).clamp_min(1e-300)
        active = ~state.diverged & torch.isfinite(state.U)
        found = self.line(state, target, direction, noise["u"], active, trace is not None)
        new = replace(
            state,
            position=found.position,
            U=found.U,
            loss=found.loss,
            evaluations=found.evaluations,
            capped=found.capped,
        )
        if trace is not None:
            trace["proposal"], trace["path"] = new.position, found.path
        return new, new.loss, all_accepted(state)


def on_rows(fn, w: Tensor, center: Tensor, index: Tensor) -> tuple[Tensor, ...]:
    """``fn(w, center)`` (a tuple of [C] tensors) computed at the rows ``index`` alone and
    scattered back into [C] tensors, NaN at the other rows."""
    rows = w.shape[0]
    if len(index) == rows:
        return fn(w, center)
    parts = fn(w.index_select(0, index), center.index_select(0, index))
    return tuple(w.new_full((rows,), math.nan).index_copy_(0, index, part) for part in parts)


def gaussian_prior_std(target: Target) -> Tensor | None:
    """[d] standard deviations of the target's prior where it is N(0, diag(std^2)) in the
    sampled coordinates, else None: a target's ``prior_std`` (N(0, prior_std^2 I), the Target
    contract), an MLP's per-tensor Gaussian prior; not a horseshoe, not a reparametrised one."""
    if not target.has_prior or target.reparametrised:
        return None
    like = {"dtype": target.dtype, "device": target.device}
    stds = getattr(target, "prior_stds", None)  # the MLP: one std per layer tensor
    if stds is not None:
        if getattr(target, "prior", None) != "gaussian":
            return None
        parts = [
            torch.full((size,), std, **like)
            for size, std in zip(target.layer_sizes, stds, strict=True)
        ]
        return torch.cat(parts)
    if target.prior_std is None:
        return None
    return torch.full((target.dim,), float(target.prior_std), **like)


@dataclass
class EllipticalState(State):
    phi: Tensor  # [C] the energy outside the Gaussian: nbeta L (+ a non-Gaussian prior's)
    loss: Tensor  # [C] the loss L
    evaluations: Tensor  # [C] energy evaluations the last step made
    capped: Tensor  # [C] 1 where the last step reached max_shrinks (the chain stayed)
    mean: Tensor  # [C, d] the Gaussian's mean m
    scale: Tensor  # [C, d] its standard deviations


class EllipticalSlice(Kernel):
    """Elliptical slice sampling (Murray, Adams & MacKay 2010, Fig. 2) for exp(-U) = N(w; m,
    Sigma) exp(-Phi(w)). The Gaussian is the target's Gaussian prior N(0, diag(sigma^2))
    (``gaussian_prior_std``) times, with localization gamma > 0, the pull N(w0, I / gamma)
    around the chain's start: Sigma^-1 = diag(sigma^-2) + gamma I, m = gamma Sigma w0 (a
    product of Gaussians). Phi is the rest: nbeta L, plus the prior's energy where the prior is
    not Gaussian. A step draws nu ~ N(0, Sigma), the level log y = -Phi(w) + log u and an angle
    theta ~ U(0, 2 pi) with the bracket [theta - 2 pi, theta]; it tries w' = m + (w - m)
    cos theta + nu sin theta, and after each miss shrinks the bracket to the side of theta = 0
    (the current point) and draws theta in it again, at most ``max_shrinks`` trials (then the
    chain stays). A target without a Gaussian prior and localization 0 is refused."""

    SPEC = kernel_spec(
        "elliptical-slice",
        "mcmc",
        "Murray, Adams & MacKay (2010), Elliptical slice sampling, AISTATS (JMLR W&CP 9)",
        [
            Param(
                "max_shrinks",
                "int",
                50,
                "most angles tried a step; if none lands in the slice the chain stays where it "
                "is (counted in 'capped')",
                1,
                1000,
            ),
            NBETA,
            LOC,
        ],
        equation=aligned(
            r"e^{-U(w)} \propto \mathcal{N}(w;\, m, \Sigma)\, e^{-\Phi(w)}",
            r"\Sigma^{-1} = \mathrm{diag}(\sigma^{-2}) + \gamma I,\ m = \gamma\,\Sigma\, w_0",
            r"\nu \sim \mathcal{N}(0, \Sigma),\quad \log y = -\Phi(w_t) + \log u",
            r"\theta \sim \mathcal{U}(0, 2\pi),\ [\theta_-, \theta_+] = [\theta - 2\pi, \theta]",
            r"w' = m + (w_t - m)\cos\theta + \nu \sin\theta",
            r"-\Phi(w') \ge \log y \Rightarrow w_{t+1} = w'",
            r"\text{else } \theta_\mp \leftarrow \theta\ (\theta \lessgtr 0),"
            r"\ \theta \sim \mathcal{U}(\theta_-, \theta_+),\ \text{again}",
        ),
        text="Elliptical slice sampling (Murray, Adams & MacKay 2010) for a posterior with a "
        "Gaussian prior: each step draws a point nu from the Gaussian and searches the ellipse "
        "through the current point and nu for a point whose likelihood is above a level drawn "
        "under the current one, shrinking the range of angles towards the current point after "
        "each miss. No step size, no gradient, exact for the target, and strong when the prior "
        "dominates the shape of the posterior (a network with a Gaussian prior). The Gaussian "
        "is the target's Gaussian prior and, with localization gamma > 0, the pull towards the "
        "start (gamma/2)|w - w0|^2; the rest (nbeta L) is the likelihood. A target with neither "
        "(the 2-D teaching potentials at localization 0) is refused. There is no acceptance "
        "rate (every step moves); watch 'evaluations', the likelihood evaluations a step "
        "costs: near 1-3 where the likelihood is weak against the Gaussian, growing as it "
        "sharpens (a likelihood far narrower than the Gaussian, as with many data points, "
        "needs many shrinks and moves little). 'capped' counts steps that reached max_shrinks "
        "and stayed; it should stay 0.",
        acceptance=None,  # every step moves to a point in its slice: no MH test
        watch=(
            Watch(
                "evaluations",
                10.0,
                "the likelihood is much narrower than the Gaussian part, so each step shrinks "
                "many times and moves little (Murray, Adams & MacKay 2010, Sec. 4)",
                "slice, or a gradient kernel (mala, nuts)",
            ),
            CAPPED,
        ),
    )
    minibatch = False
    traces = True
    compilable = False  # one host sync a trial: a step costs its slowest chain's trials

    def noise(self, chains, dim):
        """xi: nu in units of the Gaussian's scale. u: the level, then one angle a trial."""
        return {
            "xi": Draw("normal", (chains, dim)),
            "u": Draw("uniform", (chains, 1 + self.max_shrinks)),
        }

    def gaussian(self, state: State, target: Target) -> tuple[Tensor, Tensor]:
        """The Gaussian part's mean and scale, [C, d] each (ParamError where there is none)."""
        std = gaussian_prior_std(target)
        gamma = self.localization
        if std is None and not gamma:
            raise ParamError(
                "elliptical-slice.localization",
                f"target {target.name!r} has no Gaussian prior for the ellipses: set "
                "localization > 0 (a Gaussian pull (gamma/2)|w - w0|^2 around the start), pick "
                "a target with a Gaussian prior (normal-crossing with prior_std > 0, mlp with "
                "prior=gaussian, ntk-fcn in the standard parametrisation), or use slice or gibbs",
            )
        w = state.position
        precision = torch.full_like(w[0], gamma) if std is None else std**-2 + gamma
        mean = gamma * state.center / precision
        return mean, (precision**-0.5).expand_as(w).clone()

    def likelihood(self, w: Tensor, target: Target) -> tuple[Tensor, Tensor]:
        """(L, Phi) at ``w``: Phi = nbeta L, plus the prior's energy where it is not Gaussian."""
        loss = target.loss(w)
        nbeta = self.nbeta_for(target)
        phi = loss if nbeta == 1 else nbeta * loss
        if target.has_prior and gaussian_prior_std(target) is None:
            phi = phi + target.prior_energy(w)
        return loss, phi

    def start(self, state, target, generator):
        mean, scale = self.gaussian(state, target)
        loss, phi = self.likelihood(state.position, target)
        zero = torch.zeros_like(phi)
        return EllipticalState(
            **vars(state),
            phi=phi,
            loss=loss,
            evaluations=zero,
            capped=zero,
            mean=mean,
            scale=scale,
        )

    def observe(self, state):
        return {"evaluations": state.evaluations, "capped": state.capped}

    def update(self, state, target, batch, noise, trace=None):
        f, m, u = state.position, state.mean, noise["u"]
        nu = state.scale * noise["xi"]
        log_y = -state.phi + torch.log1p(-u[:, 0])
        theta = 2 * math.pi * u[:, 1]
        low, high = theta - 2 * math.pi, theta
        position, phi, loss = f, state.phi, state.loss
        done = state.diverged | ~torch.isfinite(state.phi)
        evaluations = torch.zeros_like(phi)
        path = None
        if trace is not None:
            size = min(1 + self.max_shrinks, PATH_POINTS)
            path = f.new_full((f.shape[0], size, f.shape[1]), math.nan)
            path[:, 0] = f
        for trial in range(self.max_shrinks):
            index = (~done).nonzero()[:, 0]  # one host sync a trial
            if not len(index):
                break
            if trial:
                theta = low + u[:, 1 + trial] * (high - low)
            point = m + (f - m) * torch.cos(theta)[:, None] + nu * torch.sin(theta)[:, None]
            loss_new, phi_new = on_rows(lambda x, _: self.likelihood(x, target), point, m, index)
            trying = ~done
            inside = trying & (-phi_new >= log_y)  # a NaN likelihood is outside
            evaluations = evaluations + trying
            position = torch.where(inside[:, None], point, position)
            phi, loss = torch.where(inside, phi_new, phi), torch.where(inside, loss_new, loss)
            if path is not None:
                column = min(1 + trial, path.shape[1] - 1)
                path[:, column] = torch.where(trying[:, None], point, path[:, column])
            outside = trying & ~inside
            low = torch.where(outside & (theta < 0), theta, low)
            high = torch.where(outside & (theta >= 0), theta, high)
            done = done | inside
        capped = (~done).to(phi.dtype)
        new = replace(
            state, position=position, phi=phi, loss=loss, evaluations=evaluations, capped=capped
        )
        if trace is not None:
            trace["proposal"], trace["path"] = position, path
        return new, loss, all_accepted(state)
