"""The mass matrix M of HMC and NUTS, held by its inverse M^-1 (what the warm-up estimates: the
positions' variances or covariance). ``inv_mass``: None, the identity; [C, d], a diagonal per
chain; [C, d, d], a dense matrix per chain (``metric: dense``). The momentum is p ~ N(0, M), the
kinetic energy p M^-1 p / 2, and a position moves by eps M^-1 p (Neal 2011, sec. 4.1)."""

from __future__ import annotations

import torch
from torch import Tensor


def sharp(p: Tensor, inv_mass: Tensor | None) -> Tensor:
    """M^-1 p: the velocity a position moves by and the U-turn criterion reads (Stan's p_sharp)."""
    if inv_mass is None:
        return p
    if inv_mass.ndim == 2:  # a diagonal, broadcast over any leading dimensions of p
        return inv_mass * p
    return (inv_mass @ p[..., None])[..., 0]


def kinetic(p: Tensor, inv_mass: Tensor | None) -> Tensor:
    """p M^-1 p / 2 ([C])."""
    return 0.5 * (p * sharp(p, inv_mass)).sum(-1)


def factor(inv_mass: Tensor | None) -> Tensor | None:
    """What turns N(0, I) draws into momenta (see ``momentum``): M^1/2 of a diagonal, or the
    Cholesky factor L of a dense M^-1 = L L^T."""
    if inv_mass is None:
        return None
    return inv_mass.rsqrt() if inv_mass.ndim == 2 else torch.linalg.cholesky(inv_mass)


def momentum(xi: Tensor, scale: Tensor | None) -> Tensor:
    """p ~ N(0, M) from xi ~ N(0, I) and ``factor(inv_mass)``: dense, p = L^-T xi, whose
    covariance is (L L^T)^-1 = M."""
    if scale is None:
        return xi
    if scale.ndim == 2:
        return xi * scale
    return torch.linalg.solve_triangular(scale.mT, xi[..., None], upper=True)[..., 0]
