"""What a kernel's step carries and reports: the chain-batched ``State``, the per-step ``Info``,
and the ``Energy`` at a position. Apart from ``samplers.base`` so that the compiled path
(``samplers.compiled``) reads them without importing the kernels' base, which loads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor


@dataclass
class State:
    """What every kernel carries; kernels with more subclass it (momentum, statistics)."""

    position: Tensor  # [C, d]
    center: Tensor  # [C, d]: the localisation centre (the starting point)
    diverged: Tensor  # [C] bool: frozen after a NaN/Inf


@dataclass
class Info:
    """Per-chain results of one step ([C] each), or of many stacked ([T, C])."""

    loss: Tensor  # L as the step evaluated it (SG kernels: L_batch(w_t); MH: at w_{t+1})
    accepted: Tensor  # float: 1 where an MH proposal was accepted (1 for kernels without MH)
    diverged: Tensor  # bool
    position: Tensor | None = None  # after the step, when ``run(..., positions=True)``
    scalars: dict[str, Tensor] = field(default_factory=dict)  # ``observe`` and step extras
    # with ``trace`` (the animated view): the point each chain proposed (the new position for
    # kernels without one) [C, d], and an integrator's path to it [C, L, d] (HMC, NUTS;
    # NaN-padded)
    proposal: Tensor | None = None
    path: Tensor | None = None


@dataclass
class Energy:
    """U and its pieces at a position, for one batch."""

    loss: Tensor  # L [C]
    loss_grad: Tensor | None  # grad L [C, d] (what adaptive preconditioners adapt on; None
    # unless the kernel's ``uses_loss_grad``)
    value: Tensor  # U [C]
    grad: Tensor  # grad U [C, d]
