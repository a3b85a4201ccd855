"""Posterior-predictive metrics of a classification network's draws (those of Yu et al., Sec. 4.1).

From draws theta_1..theta_S of the posterior, on the network's test (or validation) split of N
points with labels y_n:

- ``log_p``: the ensemble log-likelihood (1/N) sum_n log((1/S) sum_s p(y_n | x_n, theta_s)),
  by logsumexp - log S;
- ``mean_single_log_p``: the mean over draws of each draw's own (1/N) sum_n log p(y_n | x_n,
  theta_s); by Jensen's inequality ``log_p`` is never below it;
- ``accuracy``: of the argmax of the draw-averaged probabilities p_bar(. | x_n);
- ``ece``: sum_i P(i) |acc_i - conf_i| over 30 equal-width bins (i/30, (i+1)/30] of the
  top-label confidence max_k p_bar(k | x_n), P(i) the share of points in bin i;
- ``confidence``: the mean of max_k p_bar(k | x_n);
- ``curvature``: Srinivas et al.'s C(theta): on a fixed 10% subset of the points (at least one;
  ``curvature_subset``), |lambda_max| / (|grad_x l| + 1e-6), l the point's cross-entropy as a
  function of the INPUT x (not the weights) and lambda_max the top eigenvalue in magnitude of
  its input Hessian from 20 power iterations of Hessian-vector products (double backward),
  averaged over the subset and over at most ``CURVATURE_DRAWS`` (20) draws spread evenly over
  the S (the Hessian-vector products cost 20 backward passes a draw: the cap keeps a run's
  thousands of draws from costing more than its sampling).

``Accumulator`` takes the draws in batches as a run keeps them ([k, d], or [k, C, d]: a block's
kept steps across C chains) and keeps running sums on the draws' device, per chain: the
log-sum-exp of log p(y_n | x_n, theta) ([C, N]), the summed probabilities ([C, N, classes]) and
the single draws' log-likelihood ([C]), and the few draws the curvature will use. ``result``
combines the chains a run kept (those that did not diverge) into the metrics. ``metrics`` is the
same over all draws at once. No Streamlit here: the run's "predictive" observable (runs.observe)
and the CLI use this module.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from landscapes import ParamError, Target

ECE_BINS = 30
CURVATURE_FRACTION = 10  # the curvature's subset: 1 point in 10 (at least one)
CURVATURE_DRAWS = 20
POWER_ITERATIONS = 20
# |grad| + eps in the ratio's denominator (Yu et al.'s code; docs/methods/sgrld.md)
CURVATURE_EPS = 1e-6
SUBSET_SEED = 0  # the fixed subset and the power iterations' start vectors
NUMBERS_PER_PASS = 1 << 22  # activations held by one forward pass: draws x points x widths
CURVATURE_POINTS = 4096  # points per double-backward pass
SPLITS = ("test", "val")
KEYS = (
    "split",
    "draws",
    "log_p",
    "mean_single_log_p",
    "accuracy",
    "ece",
    "confidence",
    "curvature",
    "curvature_draws",
)


def evaluation_set(target: Target, split: str = "test") -> tuple[Tensor, Tensor]:
    """(x [N, in], y [N]) of a classification network's ``split`` ("test" or "val"); a
    ParamError on "observables" for any other target, on "split" for a split it lacks."""
    task = getattr(target, "task", None)
    if task != "classification":
        what = "a regression network" if task else "not a network (no data)"
        raise ParamError(
            "observables",
            f"predictive metrics need a classification network; {target.name} is {what}",
        )
    if split not in SPLITS:
        raise ParamError("split", f"must be one of {list(SPLITS)}, got {split!r}")
    x, y = (target.x_test, target.y_test) if split == "test" else (target.x_val, target.y_val)
    if len(y) == 0:
        raise ParamError(
            "split",
            f"{target.name} has no {split} points (a validation set: digits with n < 1437)",
        )
    return x, y


def evenly_spread(total: int, most: int) -> list[int]:
    """At most ``most`` indices of ``range(total)``, spread evenly, first and last included."""
    if total <= most:
        return list(range(total))
    if most == 1:
        return [0]
    return sorted({round(i * (total - 1) / (most - 1)) for i in range(most)})


def curvature_subset(points: int) -> Tensor:
    """The fixed subset of an evaluation set's indices the curvature uses: 1 in 10 (at least
    one), drawn once from SUBSET_SEED, in increasing order."""
    g = torch.Generator().manual_seed(SUBSET_SEED)
    keep = max(1, points // CURVATURE_FRACTION)
    return torch.randperm(points, generator=g)[:keep].sort().values


def expected_calibration_error(confidence: Tensor, correct: Tensor, bins: int = ECE_BINS) -> Tensor:
    """sum_i (n_i / N) |acc_i - conf_i| over ``bins`` equal-width bins (i/bins, (i+1)/bins] of
    ``confidence`` ([N], in [0, 1]); ``correct`` [N] bool. Empty bins add nothing."""
    index = (torch.ceil(confidence * bins).long() - 1).clamp(0, bins - 1)
    conf = confidence.new_zeros(bins).scatter_add_(0, index, confidence)
    acc = confidence.new_zeros(bins).scatter_add_(0, index, correct.to(confidence.dtype))
    return (acc - conf).abs().sum() / len(confidence)


def input_curvature(
    target: Target, draws: Tensor, x: Tensor, y: Tensor, iterations: int = POWER_ITERATIONS
) -> Tensor:
    """[S, P]: |lambda_max(H_x l)| / (|grad_x l| + 1e-6) of each draw (``draws`` [S, d]) at
    each point (``x`` [P, in], ``y`` [P]), l the point's cross-entropy as a function of its
    input. All draws and points at once: the inputs are copied per draw ([S, P, in]), so the
    gradient of the summed loss is every point's own, and each Hessian-vector product (a
    double backward) acts on every (draw, point) block of the block-diagonal Hessian at once;
    ``iterations`` power iterations from a seeded random start give the Rayleigh quotient."""
    draws = draws.to(device=target.device, dtype=target.dtype)
    x, y = x.to(device=target.device), y.to(device=target.device)
    params = target.unflatten(draws.detach())
    g = torch.Generator().manual_seed(SUBSET_SEED)
    parts = []
    for start in range(0, len(y), CURVATURE_POINTS):
        xs, ys = x[start : start + CURVATURE_POINTS], y[start : start + CURVATURE_POINTS]
        start_v = torch.randn(len(draws), *xs.shape, generator=g, dtype=torch.float64)
        with torch.enable_grad():
            inputs = xs.expand(len(draws), *xs.shape).clone().requires_grad_(True)
            loss = target.per_sample(target.forward(params, inputs), ys)  # [S, P]
            (grad,) = torch.autograd.grad(loss.sum(), inputs, create_graph=True)
            v = start_v.to(grad)
            v = v / torch.linalg.vector_norm(v, dim=-1, keepdim=True)
            eig = torch.zeros_like(loss)
            for _ in range(iterations):
                (hv,) = torch.autograd.grad(grad, inputs, grad_outputs=v, retain_graph=True)
                eig = (v * hv).sum(-1)
                v = hv / torch.linalg.vector_norm(hv, dim=-1, keepdim=True).clamp_min(1e-30)
        slope = torch.linalg.vector_norm(grad.detach(), dim=-1)
        parts.append(eig.detach().abs() / (slope + CURVATURE_EPS))
    return torch.cat(parts, 1)


class Accumulator:
    """Running sums of the predictive metrics over draws added in batches (module doc).

    ``chains``: the C of the [k, C, d] batches ``add`` takes ([k, d] when 1). ``expected``: the
    draws the caller will add in all (k x C summed over batches), so that the curvature's at
    most ``curvature_draws`` are spread evenly over them, in the order added (step-major: a
    batch's first step's chains, then the next step's); None: the first ``curvature_draws``."""

    def __init__(
        self,
        target: Target,
        split: str = "test",
        chains: int = 1,
        expected: int | None = None,
        curvature_draws: int = CURVATURE_DRAWS,
    ):
        self.x, self.y = evaluation_set(target, split)
        self.target, self.split, self.chains = target, split, chains
        n, classes = len(self.y), target.classes
        device = target.device
        self.lse = torch.full((chains, n), -math.inf, dtype=torch.float64, device=device)
        self.prob = torch.zeros(chains, n, classes, dtype=torch.float64, device=device)
        self.single = torch.zeros(chains, dtype=torch.float64, device=device)
        self.steps = 0  # draws added per chain
        total = curvature_draws if expected is None else expected
        self.picks = evenly_spread(total, curvature_draws)
        self.picked: list[tuple[int, Tensor]] = []  # (chain, draw [d])
        # a forward pass holds steps x C x points x width numbers: whole steps while a step's
        # every point fits NUMBERS_PER_PASS, else one step on a slice of the points
        width = sum(getattr(target, "sizes", (target.dim,)))
        self.steps_per_pass = max(1, NUMBERS_PER_PASS // (chains * n * width))
        self.points_per_pass = max(1, NUMBERS_PER_PASS // (chains * width))

    def add(self, draws: Tensor) -> None:
        """Accumulate ``draws``: [k, d] (one chain) or [k, C, d]; no host sync."""
        if draws.ndim == 2:
            draws = draws[:, None]
        k, chains = draws.shape[:2]
        if chains != self.chains:
            raise ParamError("draws", f"must have {self.chains} chains, got {chains}")
        draws = draws.to(device=self.target.device, dtype=self.target.dtype)
        for q in self.picks:
            step, chain = divmod(q, chains)
            if self.steps <= step < self.steps + k:
                self.picked.append((chain, draws[step - self.steps, chain].clone()))
        target, n, along = self.target, len(self.y), self.points_per_pass
        for s in range(0, k, self.steps_per_pass):
            piece = draws[s : s + self.steps_per_pass]
            m = piece.shape[0]
            params = target.unflatten(piece.reshape(m * chains, -1))
            for a in range(0, n, along):
                x, y = self.x[a : a + along], self.y[a : a + along]
                logits = target.forward(params, x).double()  # [m C, points, classes]
                logp = torch.log_softmax(logits, -1).reshape(m, chains, *logits.shape[1:])
                picked = logp.gather(-1, y.expand(m, chains, -1)[..., None]).squeeze(-1)
                lse = self.lse[:, a : a + along]  # [C, points], a view
                lse.copy_(torch.logaddexp(lse, torch.logsumexp(picked, 0)))
                self.prob[:, a : a + along] += logp.exp().sum(0)
                self.single += picked.sum((0, 2))
        self.steps += k

    def result(self, keep: Tensor | None = None) -> dict:
        """The metrics (KEYS) over the chains ``keep`` ([C] bool; None: all) holds true for;
        with no draws every metric is None."""
        keep = torch.ones(self.chains, dtype=torch.bool) if keep is None else keep.cpu()
        kept = keep.tolist()
        draws = self.steps * sum(kept)
        out = dict.fromkeys(KEYS)
        out.update({"split": self.split, "draws": draws, "curvature_draws": 0})
        if not draws:
            return out
        rows = keep.to(self.lse.device)
        n = len(self.y)
        lse = torch.logsumexp(self.lse[rows], 0) - math.log(draws)  # [N]
        probs = self.prob[rows].sum(0) / draws  # [N, classes]
        confidence, label = probs.max(-1)
        correct = label == self.y
        out["log_p"] = float(lse.mean())
        out["mean_single_log_p"] = float(self.single[rows].sum() / (draws * n))
        out["accuracy"] = float(correct.double().mean())
        out["ece"] = float(expected_calibration_error(confidence, correct))
        out["confidence"] = float(confidence.mean())
        chosen = [w for chain, w in self.picked if kept[chain]]
        if chosen:
            subset = curvature_subset(n).to(self.x.device)
            ratio = input_curvature(
                self.target, torch.stack(chosen), self.x[subset], self.y[subset]
            )
            out["curvature"] = float(ratio.double().mean())
            out["curvature_draws"] = len(chosen)
        return out


def metrics(
    target: Target, draws: Tensor, split: str = "test", curvature_draws: int = CURVATURE_DRAWS
) -> dict:
    """The predictive metrics (module doc; KEYS) of ``draws`` [S, d] on ``split``, all at once;
    the curvature at ``curvature_draws`` draws spread evenly over the S."""
    acc = Accumulator(target, split, 1, len(draws), curvature_draws)
    acc.add(draws)
    return acc.result()
