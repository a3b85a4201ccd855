"""Gibbs sampling, coordinate by coordinate: exact conditionals on a Gaussian, slice steps along
the axes elsewhere (slice-within-Gibbs; the line search of ``samplers/slice.py``)."""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor

from landscapes import Target
from landscapes.potentials import Gaussian

from .base import Draw
from .integrators import all_accepted
from .slice import (
    CAPPED,
    EXPENSIVE,
    PATH_POINTS,
    SHRINKS,
    STEPS_OUT,
    WIDTH,
    SliceKernel,
    SliceState,
)
from .spec import LOC, NBETA, aligned, kernel_spec


class Gibbs(SliceKernel):
    """A systematic scan: one step updates w_1, ..., w_d in turn, each from its conditional
    given the others. On the Gaussian potential (U = nbeta/2 (w - mu)^T P (w - mu) +
    (gamma/2)|w - w0|^2 = 1/2 w^T Q w - b^T w + const, Q = nbeta P + gamma I, b = nbeta P mu +
    gamma w0) the conditional is exact: w_i ~ N(w_i - (Q w - b)_i / Q_ii, 1 / Q_ii). Elsewhere
    coordinate i takes one slice step along the axis e_i (Neal 2003, stepping out and
    shrinkage, as ``slice``), which leaves that conditional invariant. Each coordinate's move
    keeps exp(-U), so the sweep does."""

    SPEC = kernel_spec(
        "gibbs",
        "mcmc",
        "Geman & Geman (1984), IEEE TPAMI 6; slice steps: Neal (2003), Annals of Statistics 31(3)",
        [WIDTH, STEPS_OUT, SHRINKS, NBETA, LOC],
        equation=aligned(
            r"\text{for } i = 1, \dots, d:\ w_i \sim p(w_i \mid w_{-i}) \propto e^{-U(w)}",
            r"\text{Gaussian } U = \tfrac{1}{2} w^\top Q w - b^\top w:\ w_i \sim"
            r" \mathcal{N}\big(w_i - (Q w - b)_i / Q_{ii},\ 1 / Q_{ii}\big)",
            r"\text{otherwise: one slice step along the axis } e_i",
            r"\quad \text{(stepping out, shrinkage)}",
        ),
        text="Gibbs sampling (Geman & Geman 1984): one step sweeps the coordinates in order and "
        "draws each from its distribution given all the others, so the chain moves along the "
        "axes, one axis at a time (the Playground animates the moves axis by axis). On the "
        "Gaussian potential the conditionals are Gaussians and drawn exactly; on every other "
        "target each coordinate takes one slice step along its axis (slice-within-Gibbs, Neal "
        "2003), with the width, stepping out and shrinkage of 'slice'. Exact for the target, "
        "no step size. It mixes fast when the coordinates are nearly independent and slowly "
        "when they are strongly correlated (a tilted, narrow Gaussian or the banana), where "
        "every move is short along a diagonal valley: watch the effective sample size. There "
        "is no acceptance rate (every step moves); on the slice path watch 'evaluations' (a "
        "step's energy evaluations per coordinate; 1 on the Gaussian) and "
        "'capped' (coordinate searches that reached max_shrinks and stayed; it should stay "
        "0). A sweep costs d searches, each evaluating the whole target: meant for the "
        "teaching potentials, not networks.",
        acceptance=None,  # every coordinate moves to a point of its conditional: no MH test
        watch=(EXPENSIVE, CAPPED),
    )

    def noise(self, chains, dim):
        """u: per coordinate, the level, the interval's offset, the split of m, and one draw
        per shrinkage trial (the slice path; ``draws`` swaps in xi on a Gaussian)."""
        return {"u": Draw("uniform", (chains, dim, 3 + self.max_shrinks))}

    def draws(self, target, chains, dim):
        if self.exact(target):  # xi: the standard normal of each coordinate's conditional
            return {"xi": Draw("normal", (chains, dim))}
        return super().draws(target, chains, dim)

    @staticmethod
    def exact(target: Target) -> bool:
        """Whether the conditionals are drawn exactly: the Gaussian potential, no prior."""
        return isinstance(target, Gaussian) and not target.has_prior

    def update(self, state, target, batch, noise, trace=None):
        chains, dim = state.position.shape
        path = None
        if trace is not None:
            path = state.position.new_full((chains, min(dim + 1, PATH_POINTS), dim), torch.nan)
            path[:, 0] = state.position
        if self.exact(target):
            new = self.conditional_sweep(state, target, noise["xi"], path)
        else:
            new = self.slice_sweep(state, target, noise["u"], path)
        if trace is not None:
            trace["proposal"], trace["path"] = new.position, path
        return new, new.loss, all_accepted(state)

    @staticmethod
    def column(i: int, dim: int, path: Tensor) -> int:
        """The path's column for the point after coordinate i: i + 1, or, for more coordinates
        than the path has columns, evenly spread (the last coordinate in the last column)."""
        return 1 + i * (path.shape[1] - 1) // dim

    def conditional_sweep(
        self, state: SliceState, target: Gaussian, xi: Tensor, path: Tensor | None
    ) -> SliceState:
        """Each coordinate in turn from its exact Gaussian conditional."""
        nbeta, gamma = self.nbeta_for(target), self.localization
        dim = target.dim
        eye = torch.eye(dim, dtype=target.precision.dtype, device=target.precision.device)
        q = nbeta * target.precision + gamma * eye
        b = (nbeta * (target.precision @ target.mean))[None] + gamma * state.center  # [C, d]
        active = ~state.diverged
        w = state.position.clone()
        for i in range(dim):
            residual = w @ q[:, i] - b[:, i]  # (Q w - b)_i
            q_ii = q[i, i]
            w_i = w[:, i] - residual / q_ii + xi[:, i] / q_ii.sqrt()
            w[:, i] = torch.where(active, w_i, w[:, i])
            if path is not None:
                path[:, self.column(i, dim, path)] = w
        loss, value = self.values(w, state.center, target)
        one = torch.ones_like(value)
        return replace(
            state, position=w, U=value, loss=loss, evaluations=one, capped=torch.zeros_like(one)
        )

    def slice_sweep(
        self, state: SliceState, target: Target, u: Tensor, path: Tensor | None
    ) -> SliceState:
        """Each coordinate in turn by one slice step along its axis."""
        dim = state.position.shape[1]
        axes = torch.eye(dim, dtype=state.position.dtype, device=state.position.device)
        active = ~state.diverged & torch.isfinite(state.U)
        evaluations, capped = torch.zeros_like(state.U), torch.zeros_like(state.U)
        for i in range(dim):
            found = self.line(state, target, axes[i : i + 1], u[:, i], active, False)
            evaluations, capped = evaluations + found.evaluations, capped + found.capped
            state = replace(state, position=found.position, U=found.U, loss=found.loss)
            if path is not None:
                path[:, self.column(i, dim, path)] = found.position
        # per coordinate: a line search's cost, judged as a slice step's (slice.EXPENSIVE)
        return replace(state, evaluations=evaluations / dim, capped=capped)
