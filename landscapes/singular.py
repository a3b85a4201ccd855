"""One-dimensional singular models: the polynomial regression y = x * prod w_i^p_i (a normal
crossing) and the one-input tanh network, whose learning coefficients are known."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from .base import Batch, ParamError
from .data import Dataset, n_test, normal_inputs, regression, torch_generator, uniform_inputs
from .networks import (
    Network,
    check_data_size,
    network_facts,
)
from .truths import normal_crossing_rlct, tanh_llc


class Polynomial(Network):
    """y_hat = x * prod_i w_i^(p_i); truth w0 = 0 (so y is pure noise), a normal crossing."""

    exportable = True  # its few ops export, torch.func's gradient included

    def __init__(self, powers: Sequence[int], dataset: Dataset):
        super().__init__("polynomial", {"w": (len(powers),)}, dataset)
        self.powers = torch.tensor(powers, dtype=torch.float64)
        self.w0 = torch.zeros(self.dim, dtype=torch.float64)
        self.true_llc = normal_crossing_rlct(powers)
        self.lowered = (self.powers - 1).clamp(min=0)  # the slope's max(p_j - 1, 0), kept
        self._full_moments()

    def _data_changed(self) -> None:
        super()._data_changed()
        self._full_moments()

    def _full_moments(self) -> None:
        """The full data's moments, and E[x^2], E[xy], E[y^2] read from them once (``to``
        moves and casts them with the rest: they are tensors)."""
        m = self.full_moments = self._moments((self.x, self.y))
        self.full_xx, self.full_xy, self.full_yy = m[0, 0], m[0, 1], m[1, 1]

    def forward(self, params: dict[str, Tensor], x: Tensor) -> Tensor:
        coef = (params["w"] ** self.powers).prod(-1)  # [C]
        return coef[:, None, None] * x

    # The model is linear in coef = prod_i w_i^p_i, so a batch's loss mean((coef x - y)^2) is
    # coef^2 E[x^2] - 2 coef E[xy] + E[y^2]: with the full data's moments computed once, a
    # full-batch step costs a few operations on [C] tensors instead of autograd over [C, n].
    @staticmethod
    def _moments(batch: Batch) -> Tensor:
        z = torch.cat(batch, -1)  # [B, 2] or [C, B, 2]: x, y
        return torch.transpose(z, -1, -2) @ z / z.shape[-2]  # [(C,) 2, 2]

    def _quadratic(self, w: Tensor, batch: Batch) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        terms = w**self.powers  # [C, d]
        coef = terms.prod(-1)
        if batch is None:
            xx, xy, yy = self.full_xx, self.full_xy, self.full_yy
        else:
            m = self._moments(batch)
            xx, xy, yy = m[..., 0, 0], m[..., 0, 1], m[..., 1, 1]  # [C]: per chain
        return (xx, xy), terms, coef, coef * (coef * xx - 2 * xy) + yy

    def _loss(self, w: Tensor, batch: Batch) -> Tensor:
        return self._quadratic(w, batch)[3]

    def _loss_and_grad(self, w: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
        m, terms, coef, loss = self._quadratic(w, batch)
        # d coef / d w_j = p_j w_j^(p_j - 1) prod_{k != j} w_k^p_k: the product of the other
        # terms by exclusive cumulative products from each side (no division: w_j may be 0)
        ones = coef.new_ones(coef.shape[0], 1)
        before = torch.cat([ones, terms[:, :-1]], 1).cumprod(1)
        after = torch.cat([terms[:, 1:], ones], 1).flip(1).cumprod(1).flip(1)
        slope = torch.where(self.powers > 0, self.powers * w**self.lowered, 0)
        xx, xy = m
        return loss, (2 * (coef * xx - xy))[:, None] * slope * before * after


def polynomial_facts(
    powers: tuple[int, ...], x_std: float, noise_std: float, n: int, seed: int
) -> dict:
    if not any(p > 0 for p in powers):
        raise ParamError("polynomial.powers", "at least one power must be positive")
    check_data_size("polynomial", n, 2)
    d = len(powers)  # it holds powers, w0, max(p - 1, 0), the data's 2 x 2 moments and 3 of
    # them again as scalars besides the data
    true = normal_crossing_rlct(powers)
    held = 3 * d + 4 + 3
    return network_facts(d, n, n_test(n), (1, 1), held=held, true_llc=true, closed_form=True)


def make_polynomial(
    powers: tuple[int, ...], x_std: float, noise_std: float, n: int, seed: int
) -> Polynomial:
    polynomial_facts(powers, x_std, noise_std, n, seed)
    data = regression(
        lambda x: torch.zeros_like(x),
        normal_inputs(x_std, 1),
        noise_std,
        n,
        torch_generator(seed),
    )
    return Polynomial(powers, data)


class TanhNet(Network):
    """f(x) = sum_h b_h tanh(a_h x), x ~ U[-1, 1], y = f_{w0}(x) + N(0, 1) with w0 = 0."""

    def __init__(self, hidden: int, dataset: Dataset):
        super().__init__("tanh", {"a": (hidden,), "b": (hidden,)}, dataset)
        self.w0 = torch.zeros(self.dim, dtype=torch.float64)
        self.true_llc = tanh_llc(hidden)

    def forward(self, params: dict[str, Tensor], x: Tensor) -> Tensor:
        t = torch.tanh(x * params["a"][:, None, :])  # [C, B, H]
        return (t * params["b"][:, None, :]).sum(-1, keepdim=True)


def tanh_facts(hidden: int, n: int, seed: int) -> dict:
    check_data_size("tanh", n, 2)
    d, true = 2 * hidden, tanh_llc(hidden)
    return network_facts(d, n, n_test(n), (1, hidden, 1), held=d, true_llc=true)


def make_tanh(hidden: int, n: int, seed: int) -> TanhNet:
    tanh_facts(hidden, n, seed)
    data = regression(
        lambda x: torch.zeros_like(x),
        uniform_inputs(-1, 1, 1),
        1.0,
        n,
        torch_generator(seed),
    )
    return TanhNet(hidden, data)
