"""Ensemble quasi-Newton (EQN; TATi: Heber et al. 2020, eqs. 18-19): BAOAB preconditioned per walker
by the Cholesky factor of the other walkers' covariance. It subclasses ``Splitting`` (eta = 0 is
plain BAOAB) and keeps BAOAB's letters: the registry gives it no ``scheme``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from landscapes import ParamError

from .base import State
from .spec import FRICTION, P003, SG, TEMPERATURE, Param, aligned, kernel_spec
from .splitting import Splitting, SplittingState


@dataclass
class EQNState(SplittingState):
    factors: list  # per parameter tensor of the layout: B_i's block, [C, n, n] lower-triangular
    t: int  # steps taken (host side): B is rebuilt exactly when t % covariance_every == 0
    kick: Tensor  # [C, d] B^T grad U with these factors: the last half-kick's, the next first's


class EQN(Splitting):
    """Ensemble quasi-Newton (Leimkuhler, Matthews & Weare 2018; Heber et al. 2020, eqs. 18-19, with
    the transposes corrected as in docs/methods/tati.md): BAOAB in which walker i kicks with B_i^T
    grad U and drifts with B_i p, B_i = chol(I + eta cov(theta_[i])), the covariance (1/(L - 1)) of
    the OTHER walkers, so the divergence term vanishes. The chains are the walkers (a coupled
    ensemble). B is block-diagonal over the target's parameter tensors (``layout``), frozen between
    rebuilds made exactly when step % covariance_every == 0 (step 0 included), each block rescaled
    by its largest entry before Cholesky; where a walker's Cholesky fails its eta is halved and it
    is tried again (below 1e-12: eta = 0, B = I). eta = 0 or one walker is plain BAOAB. A step reads
    each B twice: once for both drifts, once for B^T grad U, which the next step's first kick reuses
    (``kick``) unless B is rebuilt in between."""

    SPEC = kernel_spec(
        "eqn",
        "ensemble",
        P003 + ", eqs. 18-19 (Leimkuhler, Matthews & Weare 2018)",
        [
            *SG,
            FRICTION,
            TEMPERATURE,
            Param("eta", "float", 10.0, "covariance blending eta of B = chol(I + eta cov)", 0, 1e6),
            Param(
                "covariance_every",
                "int",
                1000,
                "steps between rebuilds of B (at step % covariance_every == 0)",
                1,
                10_000_000,
            ),
        ],
        equation=aligned(
            r"p \leftarrow p - \tfrac{h}{2} B_i^\top \nabla U(w_i),\quad"
            r" w_i \leftarrow w_i + \tfrac{h}{2} B_i p",
            r"p \leftarrow a p + \sqrt{T(1 - a^2)}\,R,\quad"
            r" w_i \leftarrow w_i + \tfrac{h}{2} B_i p,\quad"
            r" p \leftarrow p - \tfrac{h}{2} B_i^\top \nabla U(w_i)",
            r"B_i = \operatorname{chol}\big(I + \eta\,\operatorname{cov}(w_{[i]})\big)",
        ),
        text="Ensemble quasi-Newton (Leimkuhler, Matthews & Weare 2018) as in the TATi paper: the "
        "chains are walkers of one ensemble, and each runs BAOAB preconditioned by B_i, the "
        "Cholesky factor of I + eta times the covariance of the OTHER walkers. Where the "
        "ensemble is spread (a soft direction) B_i stretches the steps, so the slow modes of a "
        "stiff, anisotropic target mix many times faster at a step the stiff mode allows. B_i "
        "is frozen between rebuilds every covariance_every steps and never reads walker i, so "
        "the dynamics keep exp(-U/T) (the divergence term vanishes). eta = 0 or one walker is "
        "plain BAOAB. B is block-diagonal over the parameter tensors. As in TATi, every walker "
        "starts at one point (unless the run gives a start): B = I until the first rebuild, "
        "after step 0, once BAOAB has spread the walkers; an ensemble drawn wide at the start "
        "would stretch the stiff directions past BAOAB's stable step.",
    )
    coupled = True  # each walker's B reads every other walker
    particles = True
    compilable = False  # the rebuild's schedule is a host-side count

    def initial(self, target, generator, chains):
        """Every walker at one point, the target's start for one chain, as TATi starts them
        (Heber et al. 2020, Sec. 3.4.2: all runs "from an equilibrated position" found by SGD).
        Their covariance is then 0, so B = I until the first rebuild after step 0, by which time
        BAOAB has spread them. From N(0, I) draws instead, B ~ chol((1 + eta) I) stretches every
        direction at step 0, the stiff ones past BAOAB's stability limit (on the d = 4 Gaussian
        of their Fig. 10 at h = 0.125 every walker diverged)."""
        return target.initial(generator, 1).expand(chains, -1).clone()

    def start(self, state, target, generator):
        base = super().start(state, target, generator)
        sizes = [math.prod(shape) for shape in target.layout.values()]
        if max(sizes) > MAX_BLOCK:
            raise ParamError(
                "eqn",
                f"a parameter tensor of {max(sizes)} entries would need a {max(sizes)}^2 matrix "
                f"per walker; EQN takes tensors of at most {MAX_BLOCK} entries",
            )
        return EQNState(**vars(base), factors=[], t=0, kick=base.grad)  # B = I until step 0

    def plain(self, state: State) -> bool:
        """B = I throughout: no blending, or a walker without others."""
        return self.eta == 0 or state.position.shape[0] < 2

    def rebuild(self, w: Tensor, ok: Tensor, target) -> list[Tensor]:
        """B_i per block from the walkers ``ok`` ([C] bool: finite ones) other than i."""
        factors, first = [], 0
        for shape in target.layout.values():
            n = math.prod(shape)
            x = torch.where(ok[:, None], w[:, first : first + n], 0.0)
            first += n
            others = ok.sum() - ok.to(x.dtype)  # L - 1 for a walker in the ensemble
            total, outer = x.sum(0), torch.einsum("ci,cj->ij", x, x)
            mean = (total - x) / others.clamp(min=1)[:, None]
            second = (outer - torch.einsum("ci,cj->cij", x, x)) / others.clamp(min=1)[:, None, None]
            cov = second - torch.einsum("ci,cj->cij", mean, mean)
            factors.append(cholesky_blend(cov, self.eta))
        return factors

    def update(self, state, target, batch, noise):
        if self.plain(state):
            new, loss, accepted = super().update(state, target, batch, noise)
            return replace(new, t=state.t + 1), loss, accepted
        factors, kick = state.factors, state.kick  # B^T grad U: the last step's final kick
        if state.t % self.covariance_every == 0:
            ok = ~state.diverged & torch.isfinite(state.position).all(-1)
            factors = self.rebuild(state.position, ok, target)
            kick = apply(factors, state.grad, transpose=True)
        h, T = self.step_size, self.temperature
        w, p = state.position, state.p
        p = p - 0.5 * h * kick  # B: B^T grad U
        a = math.exp(-self.friction * h)
        q = a * p + math.sqrt(T * (1 - a * a)) * noise["xi0"]  # O (A moves only w: O goes first)
        bp, bq = apply(factors, torch.stack((p, q), 1)).unbind(1)  # one pass over B for both
        w = w + 0.5 * h * bp  # A: B p
        w = w + 0.5 * h * bq  # A: B p after O
        e = self.energy(w, state, target, batch)
        kick = apply(factors, e.grad, transpose=True)
        p = q - 0.5 * h * kick  # B
        new = replace(
            state,
            position=w,
            p=p,
            grad=e.grad,
            loss=e.loss,
            factors=factors,
            t=state.t + 1,
            kick=kick,
        )
        return new, e.loss, torch.ones_like(e.loss)


MAX_BLOCK = 1024  # entries of one parameter tensor EQN preconditions (a 1024^2 matrix a walker)


def cholesky_blend(cov: Tensor, eta: float) -> Tensor:
    """chol(I + eta cov) per walker ([C, n, n]), rescaled by the largest entry first (TATi);
    a walker whose factorisation fails retries with eta halved, down to eta = 0 (B = I)."""
    n = cov.shape[-1]
    eye = torch.eye(n, dtype=cov.dtype, device=cov.device).expand_as(cov)
    etas = torch.full(cov.shape[:1], float(eta), dtype=cov.dtype, device=cov.device)
    while True:
        blend = etas[:, None, None]
        m = torch.where(blend > 0, eye + blend * cov, eye)  # eta 0: I even where cov is NaN
        scale = m.abs().amax((-2, -1), keepdim=True)
        factor, info = torch.linalg.cholesky_ex(m / scale)
        failed = (info != 0) | ~torch.isfinite(factor).all(-1).all(-1)
        if not failed.any():  # a host sync, at a rebuild only
            return factor * scale.sqrt()
        etas = torch.where(failed, etas / 2, etas)
        etas = torch.where(etas < 1e-12, torch.zeros_like(etas), etas)


def apply(factors: list[Tensor], v: Tensor, transpose: bool = False) -> Tensor:
    """B v (or B^T v) for the block-diagonal B of ``factors``, per walker: v [C, d], or
    [C, k, d] for k vectors a walker (B read once for all k).

    Computed as row vectors times a matrix, v^T B^T (or v^T B): on the CPU torch's batched
    matrix times a column vector (``einsum("cij,cj->ci")``) is 4x slower at 16 x 64^2 and 8x
    at 16 x 1024^2 (float64). B v rounds as that einsum did; B^T v sums in another order
    (a relative difference of ~1e-15 in float64)."""
    rows = v if v.ndim == 3 else v.unsqueeze(1)
    parts, first = [], 0
    for b in factors:
        n = b.shape[-1]
        x = rows if len(factors) == 1 else rows[..., first : first + n]
        parts.append(torch.bmm(x, b if transpose else b.mT))
        first += n
    out = torch.cat(parts, -1) if len(parts) > 1 else parts[0]
    return out if v.ndim == 3 else out.squeeze(1)
