"""Nested sampling (Skilling 2006, Bayesian Analysis 1(4)) with the RadFriends region (Buchner
2016, Statistics and Computing 26), as the MCMC Interactive Gallery shows it: the evidence of a
box-bounded target with its error, and weighted posterior draws.

What Z means here. The prior is uniform on a box B: the target's plotted ``bounds`` (2-D
targets) or the caller's ``bounds``. The likelihood is exp(-U), U the energy kernels sample:
nbeta L plus the target's prior term (for a potential, U is its loss). Skilling's evidence with
that prior is E = (1 / |B|) int_B exp(-U) dw. ``log_z`` is the normaliser of exp(-U) restricted
to the box, log int_B exp(-U) dw = log E + log |B|: a potential's own ``log_z`` when the box
holds all its mass, less where the box cuts it off (the banana's box cuts 0.3%).

The algorithm. N live points start as uniform draws on B. Iteration i removes the live point of
lowest likelihood L_i, records it with the prior volume estimate X_i = exp(-i / N) and the
weight w_i = X_{i-1} - X_i, and replaces it by a uniform draw on B with L > L_i. That draw
comes from the RadFriends region, the union of balls of radius r around the live points (in
the unit cube the box maps to, so each axis counts by its share of the box): pick a live point
at random, a uniform point in its ball, keep it with probability 1 / (the number of balls that
hold it) if it lies in the box and beats L_i. The radius r is Buchner's bootstrap: resample
the live points with replacement, take the largest distance from a left-out point to its
nearest kept one, and the maximum of that over B rounds. Candidates are drawn many at a time
as one tensor operation and the first valid one (in draw order) is kept: the same law as one
at a time. The run stops when the live points could add less than ``dlogz`` to log Z (the
largest live L times X_i: dynesty's criterion log(Z + L_max X_i) - log Z < dlogz), or at
``max_iter``; the live points then enter with weight X_n / N each. The default dlogz = 0.1 is
Basin's: dynesty's default grows with N (0.41 at 400 live points, when it adds the live points
at the end as here) and UltraNest's is 0.5. From 0.5 to 0.1 a run takes about 1.5 N more
iterations: log Z moves by less than 0.005 (the live points' own term takes in what is left),
but the weighted posterior gains a quarter more effective draws (gaussian, donut, banana at
N = 200).

The error of log Z is Skilling's sqrt(H / N), H the information (nats from prior to
posterior). Randomness comes only from the generator given, so a seed repeats a run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from landscapes import ParamError, Target

from .spec import NBETA, Param, aligned, kernel_spec

# Rounds of the bootstrap that sets the radius: the Gallery's RadFriends-NS uses 20.
BOOTSTRAPS = 20
# Candidates a batch draws at least: fewer would leave the batch's fixed cost (a dozen tensor
# operations) to dominate. At most: the [batch, N, d] differences to the centres hold 2^22
# numbers (32 MB in float64), and never more than 4096 candidates.
BATCH_MIN, BATCH_MAX, BATCH_ELEMENTS = 16, 4096, 1 << 22
# A replacement not found within this many region draws stops the run ("stuck"): the contour
# has a plateau (L constant over a set of positive volume) or the region lost it.
MAX_DRAWS = 1_000_000

PARAMS = (
    Param("live", "int", 400, "N: live points (more: a smaller error, sqrt(H / N))", 10, 100_000),
    Param(
        "dlogz",
        "float",
        0.1,
        "stop when the live points could add less than this to log Z (dynesty's criterion)",
        1e-6,
        100.0,
    ),
    Param("max_iter", "int", 100_000, "most iterations (removed points)", 1, 100_000_000),
    Param(
        "update",
        "int",
        None,
        "iterations between two bootstraps of the radius (empty: N / 10)",
        1,
        100_000_000,
        optional=True,
    ),
    Param("bootstraps", "int", BOOTSTRAPS, "B: bootstrap rounds of the radius", 1, 1000),
    NBETA,
)

SPEC = kernel_spec(
    "nested",
    "nested",
    "Skilling (2006), Bayesian Analysis 1(4); RadFriends: Buchner (2016), Statistics and "
    "Computing 26",
    PARAMS,
    doc="Nested sampling with RadFriends: the evidence log Z with its error, and weighted draws.",
    build=lambda **params: params,  # the settings ``nested_sample`` takes (a run, not a kernel)
    equation=aligned(
        r"X_i = e^{-i/N},\quad Z \approx \sum_{i \le n} L_i\,(X_{i-1} - X_i)"
        r" + \tfrac{X_n}{N} \sum_{j \in \text{live}} L_j",
        r"\sigma_{\log Z} = \sqrt{H / N},\quad H = \sum_i p_i \log \tfrac{L_i}{Z},\quad"
        r" p_i = \tfrac{L_i\,(X_{i-1} - X_i)}{Z}",
        r"w_{\text{new}} \sim \mathcal{U}\big(\{w \in B \cap \textstyle\bigcup_j"
        r" \mathrm{Ball}(w_j, r) : L(w) > L_i\}\big)",
    ),
    text=(
        "Nested sampling integrates exp(-U) over a box instead of walking a chain. N live points "
        "start uniform on the box; each iteration removes the worst one, which marks a contour "
        "that holds a fraction e^(-i/N) of the box, and replaces it by a uniform draw inside "
        "that contour. RadFriends draws it from the union of balls around the live points, "
        "their radius bootstrapped so the union covers the contour. The removed points, "
        "weighted by likelihood times the volume between contours, give the evidence log Z "
        "with its error sqrt(H/N) and a weighted posterior. It needs a box holding the mass "
        "and few dimensions: the balls cover ever more volume outside the contour as the "
        "dimension grows, so draws are wasted, and a part of the contour farther than the "
        "radius from every live point (a mode no live point found) is lost. Nothing is "
        "accepted or rejected by an MH test: watch the evaluations per iteration "
        "(efficiency) and whether log Z matches the exact normaliser within its error."
    ),
)


@dataclass(frozen=True)
class Dead:
    """The points nested sampling removed (then the final live points, ascending in L):
    ``positions`` [M, d], ``log_l`` [M] (log L = -U), ``log_x`` [M] (the prior volume
    estimate, -i / N; the live points share the last one) and ``log_w`` [M], the log posterior
    weights L_i (X_{i-1} - X_i) / Z (they sum to 1)."""

    positions: Tensor
    log_l: Tensor
    log_x: Tensor
    log_w: Tensor


@dataclass(frozen=True)
class NestedTrace:
    """What the animation draws, for the traced iterations (every ``trace_every``-th, the
    first ``trace_max``): ``iteration`` [K]; ``live`` [K, N, d], the live points before the
    removal (the region is the union of balls around them); ``removed`` [K, d]; ``added``
    [K, d] (the replacement); ``radius`` [K] in the unit cube: a ball is the axis-aligned
    ellipse with semi-axes radius x ``scale`` [d] (the box's widths); ``rejected``
    [K, R, d]: candidates tried in the region that failed L > L_min before the one kept
    (NaN rows pad); ``log_l_min`` [K] and ``log_z`` [K] (the removed points' part of log Z
    so far, box-normalised as ``NestedResult.log_z``)."""

    iteration: Tensor
    live: Tensor
    removed: Tensor
    added: Tensor
    radius: Tensor
    scale: Tensor
    rejected: Tensor
    log_l_min: Tensor
    log_z: Tensor


@dataclass(frozen=True)
class NestedResult:
    """``log_z`` = log int_box exp(-U) dw with its error ``log_z_error`` (sqrt(H / N));
    ``log_evidence`` = log_z - ``log_volume``, Skilling's Z for the uniform prior on the box;
    ``information`` H in nats; ``dead`` the weighted posterior; ``iterations`` the points
    removed; ``evaluations`` the energy evaluations the one-at-a-time algorithm makes (the N
    starts, then each candidate in the region up to the one kept; batching evaluates a few more
    at once, not counted); ``stopped``: "dlogz", "max_iter" or "stuck" (no replacement within
    MAX_DRAWS draws); ``trace`` or None."""

    log_z: float
    log_z_error: float
    log_evidence: float
    log_volume: float
    information: float
    dead: Dead
    live: int
    iterations: int
    evaluations: int
    stopped: str | None
    bounds: tuple[tuple[float, float], ...]
    trace: NestedTrace | None = None

    @property
    def weights(self) -> Tensor:
        """[M]: the posterior weights (summing to 1)."""
        return self.dead.log_w.exp()

    @property
    def ess(self) -> float:
        """Kish's effective sample size of the weights, 1 / sum p_i^2."""
        return float(1.0 / (self.weights**2).sum())

    @property
    def efficiency(self) -> float:
        """Iterations per energy evaluation after the N starts (1: every candidate kept)."""
        return self.iterations / max(1, self.evaluations - self.live)

    def mean(self) -> Tensor:
        """[d]: the weighted posterior mean."""
        return self.weights @ self.dead.positions

    def cov(self) -> Tensor:
        """[d, d]: the weighted posterior covariance."""
        centred = self.dead.positions - self.mean()
        return (centred * self.weights[:, None]).T @ centred

    def resample(self, generator: torch.Generator, n: int | None = None) -> Tensor:
        """[n, d]: equally weighted posterior draws, drawn with replacement by weight (n: the
        effective sample size by default), for histograms."""
        count = math.ceil(self.ess) if n is None else n
        index = torch.multinomial(self.weights, count, replacement=True, generator=generator)
        return self.dead.positions[index]


def prior_box(target: Target, bounds: Sequence[Sequence[float]] | None = None) -> tuple:
    """(lo [d], hi [d]) of the uniform prior: ``bounds`` (one (lo, hi) per coordinate), else
    the target's plotted ``bounds`` when they cover all its coordinates. ParamError (a
    ValueError) naming ``bounds`` otherwise."""
    if bounds is None:
        bounds = target.bounds
        if bounds is None:
            raise ParamError(
                "bounds",
                f"nested sampling needs a box prior, and target {target.name!r} has no bounds "
                f"(a network has none): pass bounds, one (lo, hi) per coordinate ({target.dim})",
            )
        if len(bounds) != target.dim:
            raise ParamError(
                "bounds",
                f"target {target.name!r} has bounds for {len(bounds)} of its {target.dim} "
                f"coordinates: pass bounds, one (lo, hi) per coordinate",
            )
    try:
        pairs = [(float(lo), float(hi)) for lo, hi in bounds]
    except (TypeError, ValueError):
        raise ParamError("bounds", "must be a list of (lo, hi) pairs of numbers") from None
    if len(pairs) != target.dim:
        raise ParamError(
            "bounds", f"must hold one (lo, hi) per coordinate: {target.dim}, got {len(pairs)}"
        )
    if not all(math.isfinite(lo) and math.isfinite(hi) and lo < hi for lo, hi in pairs):
        raise ParamError("bounds", f"each (lo, hi) must be finite with lo < hi, got {pairs}")
    kw = {"dtype": target.dtype, "device": target.device}
    return torch.tensor([p[0] for p in pairs], **kw), torch.tensor([p[1] for p in pairs], **kw)


def _logaddexp(a: float, b: float) -> float:
    if a == -math.inf:
        return b
    if b == -math.inf:
        return a
    top = max(a, b)
    return top + math.log1p(math.exp(-abs(a - b)))


def bootstrap_radius(points: Tensor, rounds: int, generator: torch.Generator) -> float:
    """RadFriends' radius (Buchner 2016): over ``rounds`` resamplings of ``points`` [N, d] with
    replacement, the largest distance from a left-out point to its nearest kept one."""
    n = points.shape[0]
    dist = _sq_dist(points, points)
    picks = torch.randint(n, (rounds, n), generator=generator, device=points.device)
    kept = torch.zeros(rounds, n, dtype=torch.bool, device=points.device)
    kept.scatter_(1, picks, True)
    radius = 0.0
    for k in kept:  # a left-out point's row only: about N / e of them a round
        out = dist[~k]
        if len(out):
            radius = max(radius, float(out.masked_fill(~k, math.inf).amin(-1).max()))
    return math.sqrt(radius)


def in_region(x: Tensor, centres: Tensor, radius: float) -> Tensor:
    """[K] bool: whether each row of ``x`` [K, d] lies in the union of balls of ``radius``
    around ``centres`` [N, d] (unit-cube coordinates)."""
    return _counts(x, centres, radius) > 0


def _counts(x: Tensor, centres: Tensor, radius: float) -> Tensor:
    """[K]: how many balls of ``radius`` around ``centres`` hold each row of ``x``."""
    return (_sq_dist(x, centres) <= radius * radius).sum(-1)


def _sq_dist(x: Tensor, y: Tensor) -> Tensor:
    """[K, N]: squared distances between the rows of ``x`` [K, d] and ``y`` [N, d], exactly
    (torch.cdist's matrix-product form rounds). Coordinate by coordinate in few dimensions:
    torch.cdist's exact form splits even 16 x 300 distances over threads (1 ms with two threads
    on a busy CPU, against 0.06 ms here), and a sum over a trailing axis of 2 is 10x slower."""
    if x.shape[1] > 16:
        diff = x[:, None, :] - y[None, :, :]
        return (diff * diff).sum(-1)
    total = x.new_zeros(x.shape[0], y.shape[0])
    for j in range(x.shape[1]):
        diff = x[:, j, None] - y[None, :, j]
        total += diff * diff
    return total


class NestedSampler:
    """One nested-sampling run, stepped by ``step`` (a run loop records and cancels between
    calls) and summed up by ``result`` at any time. Positions live in the unit cube ``u``;
    ``positions`` maps them to the box."""

    def __init__(
        self,
        target: Target,
        generator: torch.Generator,
        *,
        live: int = 400,
        dlogz: float = 0.1,
        max_iter: int = 100_000,
        update: int | None = None,
        bootstraps: int = BOOTSTRAPS,
        nbeta: float | None = None,
        bounds: Sequence[Sequence[float]] | None = None,
        trace_every: int = 0,
        trace_max: int = 500,
        rejected_max: int = 32,
    ):
        if not isinstance(generator, torch.Generator):
            raise ParamError(
                "generator", "must be a torch.Generator (seed it for a repeatable run)"
            )
        if generator.device.type != target.device.type:
            raise ParamError(
                "generator",
                f"is on {generator.device} but the target on {target.device}: make it there",
            )
        if trace_every < 0 or trace_max < 0 or rejected_max < 0:
            raise ParamError("trace_every", "trace_every, trace_max and rejected_max must be >= 0")
        settings = SPEC.validate(
            {"live": live, "dlogz": dlogz, "max_iter": max_iter, "update": update}
            | {"bootstraps": bootstraps, "nbeta": nbeta}
        )
        self.lo, self.hi = prior_box(target, bounds)
        self.target, self.g, self.dim = target, generator, target.dim
        self.n, self.dlogz = settings["live"], settings["dlogz"]
        self.max_iter, self.bootstraps = settings["max_iter"], settings["bootstraps"]
        # N / 10: between two bootstraps the contour's volume shrinks by e^(-1/10), the live
        # points' spacing by about e^(-1/(10 d)), so the radius kept is at most ~5% larger (in
        # 2-D) than a fresh bootstrap's: a few draws wasted, on the safe side (a larger
        # region), while the bootstrap's B N^2 distances are paid once every N / 10 iterations
        self.update = settings["update"] or max(1, self.n // 10)
        self.nbeta = target.nbeta if settings["nbeta"] is None else settings["nbeta"]
        self.scale = self.hi - self.lo
        self.log_volume = float(self.scale.log().sum())
        self.trace_every, self.trace_max, self.rejected_max = trace_every, trace_max, rejected_max
        self.u = self._uniform(self.n)
        self.log_l = self._log_l(self.u)
        self.evaluations, self.iteration, self.stopped = self.n, 0, None
        self.log_e = -math.inf  # log of the dead points' sum of L_i w_i (the prior's evidence)
        self.radius, self.batch, self.rate = math.nan, BATCH_MIN, 0.5
        self.batch_max = max(BATCH_MIN, min(BATCH_MAX, BATCH_ELEMENTS // (self.n * self.dim)))
        self._dead_u: list[Tensor] = []
        self._dead_log_l: list[float] = []
        self._frames: list[dict] = []

    # -- the pieces ------------------------------------------------------------------------
    def _uniform(self, k: int) -> Tensor:
        return torch.rand(k, self.dim, generator=self.g, device=self.g.device, dtype=self.lo.dtype)

    def positions(self, u: Tensor) -> Tensor:
        """Box coordinates of unit-cube points ``u`` [..., d]."""
        return self.lo + u * self.scale

    def _log_l(self, u: Tensor) -> Tensor:
        """[K]: log L = -U at unit-cube points (U = nbeta L + the target's prior term; the
        value only, no gradient); NaN counts as L = 0."""
        w = self.positions(u)
        with torch.no_grad():
            loss = self.target.loss(w)
            energy = loss if self.nbeta == 1 else self.nbeta * loss
            if self.target.has_prior:
                energy = energy + self.target.prior_energy(w)
        return torch.nan_to_num(-energy, nan=-math.inf)

    def _candidates(self, k: int) -> Tensor:
        """[k', d]: the candidates of ``k`` region draws that the region keeps (in the box,
        and past the 1 / (balls holding it) coin), in draw order."""
        g, dev, dtype = self.g, self.g.device, self.u.dtype
        pick = torch.randint(self.n, (k,), generator=g, device=dev)
        direction = torch.randn(k, self.dim, generator=g, device=dev, dtype=dtype)
        direction = direction / torch.linalg.vector_norm(direction, dim=-1, keepdim=True)
        length = self.radius * torch.rand(k, generator=g, device=dev, dtype=dtype) ** (1 / self.dim)
        x = self.u[pick] + direction * length[:, None]
        coin = torch.rand(k, generator=g, device=dev, dtype=dtype)
        # its own ball holds a candidate: a count of 0 is rounding at the ball's edge
        count = _counts(x, self.u, self.radius).clamp_min(1)
        keep = ((x >= 0) & (x <= 1)).all(-1) & (coin * count < 1)
        return x[keep]

    def _replacement(self, log_l_min: float) -> tuple[Tensor, Tensor, Tensor] | None:
        """(u [d], log L [], rejected [r, d]): the first region candidate with log L above
        ``log_l_min``, and the candidates evaluated before it; None after MAX_DRAWS draws."""
        drawn, rejected = 0, []
        while drawn < MAX_DRAWS:
            k = self.batch
            x = self._candidates(k)
            drawn += k
            log_l = self._log_l(x)
            good = (log_l > log_l_min).nonzero()
            if len(good):
                j = int(good[0, 0])
                self.evaluations += j + 1
                self.rate = 0.8 * self.rate + 0.2 * len(good) / drawn
                self.batch = int(min(self.batch_max, max(BATCH_MIN, math.ceil(2 / self.rate))))
                rejected.append(x[:j])
                return x[j], log_l[j], torch.cat(rejected)
            self.evaluations += len(x)
            rejected.append(x[: self.rejected_max])
            self.rate *= 0.5
            self.batch = min(self.batch_max, 2 * k)
        return None

    # -- the loop --------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.stopped is not None

    def step(self, iterations: int = 1) -> bool:
        """Run up to ``iterations`` iterations; False once the run has stopped."""
        for _ in range(iterations):
            if self.done:
                break
            self._iterate()
        return not self.done

    def _iterate(self) -> None:
        worst = int(self.log_l.argmin())
        log_l_min, log_l_max = (float(v) for v in self.log_l.aminmax())
        i = self.iteration + 1
        remaining = log_l_max - (i - 1) / self.n  # L_max X_{i-1}: what the live points could add
        if self.log_e > -math.inf and _logaddexp(self.log_e, remaining) - self.log_e < self.dlogz:
            self.stopped = "dlogz"
            return
        if self.iteration >= self.max_iter:
            self.stopped = "max_iter"
            return
        if (i - 1) % self.update == 0:
            self.radius = bootstrap_radius(self.u, self.bootstraps, self.g)
        found = self._replacement(log_l_min)
        if found is None:
            self.stopped = "stuck"
            return
        new_u, new_log_l, rejected = found
        traced = self.trace_every and (i - 1) % self.trace_every == 0
        if traced and len(self._frames) < self.trace_max:
            self._keep_frame(i, worst, new_u, rejected, log_l_min)
        self._dead_u.append(self.u[worst].clone())
        self._dead_log_l.append(log_l_min)
        # w_i = X_{i-1} - X_i = e^{-(i-1)/N} (1 - e^{-1/N})
        log_width = -(i - 1) / self.n + math.log(-math.expm1(-1 / self.n))
        self.log_e = _logaddexp(self.log_e, log_l_min + log_width)
        self.u[worst], self.log_l[worst] = new_u, new_log_l
        self.iteration = i

    def _keep_frame(self, i: int, worst: int, new_u: Tensor, rejected: Tensor, log_l_min: float):
        tried = self.positions(rejected[-self.rejected_max :])
        pad = tried.new_full((self.rejected_max - len(tried), self.dim), math.nan)
        self._frames.append(
            {
                "iteration": i,
                "live": self.positions(self.u),
                "removed": self.positions(self.u[worst]),
                "added": self.positions(new_u),
                "radius": self.radius,
                "rejected": torch.cat([tried, pad]),
                "log_l_min": log_l_min,
                "log_z": self.log_e + self.log_volume,
            }
        )

    def removed(self, start: int = 0) -> tuple[Tensor, Tensor]:
        """(positions [m, d], log L [m]) of the points removed after the first ``start``
        iterations, in order: what a run records as it goes (iteration i has log X = -i / N)."""
        u = self._dead_u[start:]
        log_l = torch.tensor(self._dead_log_l[start:], dtype=self.lo.dtype, device=self.lo.device)
        return (self.positions(torch.stack(u)) if u else self.lo.new_zeros(0, self.dim)), log_l

    # -- the answer ------------------------------------------------------------------------
    def result(self) -> NestedResult:
        """The estimate so far (the final one once ``done``): the dead points, then the live
        points with weight X_n / N each. Does not change the sampler."""
        n, dtype, dev = self.n, self.lo.dtype, self.lo.device
        order = self.log_l.argsort()
        u = torch.cat([torch.stack(self._dead_u) if self._dead_u else self.u[:0], self.u[order]])
        dead_log_l = torch.tensor(self._dead_log_l, dtype=dtype, device=dev)
        log_l = torch.cat([dead_log_l, self.log_l[order]])
        steps = torch.arange(1, self.iteration + 1, dtype=dtype, device=dev)
        log_x = torch.cat(
            [-steps / n, torch.full((n,), -self.iteration / n, dtype=dtype, device=dev)]
        )
        log_width = torch.cat(
            [-(steps - 1) / n + math.log(-math.expm1(-1 / n)), log_x[-n:] - math.log(n)]
        )
        log_e = float(torch.logsumexp(log_l + log_width, 0))
        log_w = log_l + log_width - log_e
        p = log_w.exp()
        terms = torch.where(p > 0, p * (log_l - log_e), torch.zeros_like(p))
        information = max(0.0, float(terms.sum()))
        return NestedResult(
            log_z=log_e + self.log_volume,
            log_z_error=math.sqrt(information / n),
            log_evidence=log_e,
            log_volume=self.log_volume,
            information=information,
            dead=Dead(self.positions(u), log_l, log_x, log_w),
            live=n,
            iterations=self.iteration,
            evaluations=self.evaluations,
            stopped=self.stopped,
            bounds=tuple(zip(self.lo.tolist(), self.hi.tolist(), strict=True)),
            trace=self._trace(),
        )

    def _trace(self) -> NestedTrace | None:
        if not self._frames:
            return None
        dtype, dev = self.lo.dtype, self.lo.device

        def column(key: str) -> Tensor:
            values = [f[key] for f in self._frames]
            if isinstance(values[0], Tensor):
                return torch.stack(values)
            return torch.tensor(
                values, dtype=torch.long if key == "iteration" else dtype, device=dev
            )

        return NestedTrace(
            iteration=column("iteration"),
            live=column("live"),
            removed=column("removed"),
            added=column("added"),
            radius=column("radius"),
            scale=self.scale.clone(),
            rejected=column("rejected"),
            log_l_min=column("log_l_min"),
            log_z=column("log_z"),
        )


def nested_sample(
    target: Target,
    generator: torch.Generator,
    *,
    bounds: Sequence[Sequence[float]] | None = None,
    trace_every: int = 0,
    trace_max: int = 500,
    **settings,
) -> NestedResult:
    """Run nested sampling on ``target`` to its stop and return the result. ``settings``:
    ``PARAMS`` (live, dlogz, max_iter, update, bootstraps, nbeta). ``trace_every`` k > 0 keeps
    every k-th iteration's frame for the animation, the first ``trace_max`` of them."""
    sampler = NestedSampler(
        target, generator, bounds=bounds, trace_every=trace_every, trace_max=trace_max, **settings
    )
    while sampler.step(256):
        pass
    return sampler.result()
