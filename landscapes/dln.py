"""Deep linear networks (the DLNs of Hitchcock & Hoogland's local-sampling benchmark) and
reduced-rank regression: f(x) = W_M ... W_1 x, whose true LLC is Aoyagi's formula."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from .base import DATA_CHUNK, ParamError
from .data import Dataset, n_test, normal_inputs, regression, torch_generator, uniform_inputs
from .networks import (
    TRUTH_LAYERS,
    Network,
    check_data_size,
    check_dim,
    network_facts,
)
from .truths import dln_llc, rrr_llc


class DeepLinear(Network):
    """f(x) = W_M ... W_1 x, W_l of shape H_l x H_{l-1}, no biases."""

    def __init__(
        self,
        name: str,
        widths: Sequence[int],
        truth: list[Tensor],
        dataset: Dataset,
        names: Sequence[str] | None = None,
    ):
        names = names or [f"W{l}" for l in range(1, len(widths))]
        layout = {k: (widths[l + 1], widths[l]) for l, k in enumerate(names)}
        super().__init__(name, layout, dataset)
        self.widths = tuple(widths)
        self.w0 = torch.cat([t.reshape(-1) for t in truth])
        self._set_moments(dataset.x, dataset.y)
        self.rank = product_rank(truth)
        self.true_llc = dln_llc(self.widths, self.rank)

    def _set_moments(self, x: Tensor, y: Tensor) -> None:
        x, y = x.double(), y.double()  # a tuple: ``to`` leaves it in float64
        self.moments = (x.T @ x / self.n, x.T @ y / self.n, (y * y).sum() / self.n)

    def _data_changed(self) -> None:
        super()._data_changed()
        self._set_moments(self.x, self.y)

    def forward(self, params: dict[str, Tensor], x: Tensor) -> Tensor:
        h = torch.transpose(x, -1, -2)  # features first (module doc)
        for weight in params.values():
            h = torch.matmul(weight, h)
        return h.transpose(-1, -2)

    def full_loss(self, w: Tensor, chunk: int = DATA_CHUNK) -> Tensor:
        """The loss is quadratic in the end-to-end map P = W_M ... W_1: with the data's second
        moments, L = tr(P Sxx P^T) - 2 tr(P Sxy) + E|y|^2, so a point costs a chain of small
        matrix products instead of a pass over the n data points (the default DLN: 100,000
        points x 158 parameters a point). The moments are taken once, from the float64 data
        before any cast, and the formula runs in float64: at float32 the three terms'
        cancellation near a minimum would cost digits the forward pass keeps."""
        sxx, sxy, syy = (m.to(w.device) for m in self.moments)
        layers = list(self.unflatten(self.check_position(w).double()).values())
        if self.widths[-1] <= self.widths[0]:  # start the chain from its narrower end
            p = layers[-1]
            for weight in reversed(layers[:-1]):
                p = p @ weight
        else:
            p = layers[0]
            for weight in layers[1:]:
                p = weight @ p
        loss = ((p @ sxx) * p).sum((1, 2)) - 2 * (p * sxy.T).sum((1, 2)) + syy
        if self.loss_convention == "mean":
            loss = loss / self.widths[-1]
        return loss.to(w.dtype)


def product_rank(layers: list[Tensor]) -> int:
    """Numerical rank of W_M ... W_1, computed in float64."""
    product = layers[0].double()
    for weight in layers[1:]:
        product = weight.double() @ product
    return int(torch.linalg.matrix_rank(product))


def xavier_layers(widths: Sequence[int], g: torch.Generator) -> list[Tensor]:
    """W_l entries ~ N(0, 2 / (H_l + H_{l-1})) (Xavier-normal)."""
    return [
        math.sqrt(2.0 / (widths[l] + widths[l + 1]))
        * torch.randn(widths[l + 1], widths[l], generator=g, dtype=torch.float64)
        for l in range(len(widths) - 1)
    ]


def reduce_rank(weight: Tensor, keep: int, g: torch.Generator) -> Tensor:
    """Zero all but ``keep`` randomly chosen rows (or, by a coin flip, columns): rank <= keep."""
    columns = bool(torch.rand(1, generator=g) < 0.5)
    mat = weight.T if columns else weight
    drop = torch.randperm(mat.shape[0], generator=g)[keep:]
    mat = mat.clone()
    mat[drop] = 0.0
    return mat.T if columns else mat


# Table 1 of the benchmark (M_min, M_max, H_min, H_max), plus two small classes for CPUs
# (docs/methods/local-sampling.md: d ~ 130 (tiny) and ~ 560 (small) on average).
SIZE_CLASSES = {
    "tiny": (2, 4, 3, 10),
    "small": (2, 5, 5, 20),
    "100K": (2, 10, 50, 500),
    "1M": (2, 20, 100, 1000),
    "10M": (2, 20, 500, 2000),
    "100M": (2, 40, 500, 3000),
}


def draw_widths(size_class: str, g: torch.Generator) -> list[int]:
    """H_0..H_M of a ``size_class`` task: the first draws of ``g`` (App. D.1; ``dln_truth``)."""
    m_lo, m_hi, h_lo, h_hi = SIZE_CLASSES[size_class]
    depth = int(torch.randint(m_lo, m_hi + 1, (1,), generator=g))
    return [int(h) for h in torch.randint(h_lo, h_hi + 1, (depth + 1,), generator=g)]


def dln_truth(
    widths: Sequence[int] | None, rank: int | None, size_class: str, g: torch.Generator
) -> tuple[list[int], list[Tensor]]:
    """The benchmark's task generator (App. D.1).

    Widths from ``size_class`` when not given (M ~ U{M_min..M_max}, H_l ~ U{H_min..H_max} for
    l = 0..M). Layers are Xavier-normal. With ``rank`` given, the first layer keeps ``rank`` rows,
    so the product has exactly that rank; otherwise each layer, with probability 1/2, is reduced
    to a rank r_l ~ U{0..min(H_l, H_{l-1})} by zeroing rows or columns.
    """
    widths = draw_widths(size_class, g) if widths is None else list(widths)
    check_rank(rank, widths)
    layers = xavier_layers(widths, g)
    if rank is not None:
        layers[0][rank:] = 0.0
    else:
        for l, weight in enumerate(layers):
            if bool(torch.rand(1, generator=g) < 0.5):
                keep = int(torch.randint(0, min(weight.shape) + 1, (1,), generator=g))
                layers[l] = reduce_rank(weight, keep, g)
    return widths, layers


def product_map(layers: list[Tensor]) -> Callable[[Tensor], Tensor]:
    def truth(x: Tensor) -> Tensor:
        for weight in layers:
            x = x @ weight.T
        return x

    return truth


def check_rank(rank: int | None, widths: Sequence[int]) -> None:
    if rank is not None and rank > min(widths):
        raise ParamError(
            "dln.rank", f"must be in [0, {min(widths)}] (the smallest width), got {rank}"
        )


def layer_params(widths: Sequence[int]) -> int:
    """d of a DLN: sum over layers of H_l x H_{l-1}."""
    return sum(a * b for a, b in itertools.pairwise(widths))


def dln_widths(
    widths: tuple[int, ...] | None, rank: int | None, size_class: str, n: int, seed: int
) -> list[int]:
    """The DLN's widths H_0..H_M, given or drawn from ``seed`` as ``make_dln`` draws them (no
    layer is made), once every size it would reach is checked: d, and n points of data whose
    generation holds n x the widest layer at once."""
    if widths is not None and len(widths) < 2:
        raise ParamError("dln.widths", f"needs at least 2 entries (H0, H1), got {list(widths)}")
    given = widths is not None
    widths = list(widths) if given else draw_widths(size_class, torch_generator(seed))
    check_dim("dln", "widths" if given else "size_class", layer_params(widths))
    check_rank(rank, widths)
    width = max(widths[0] + widths[-1], *widths)
    check_data_size("dln", n, width, "max(H0 + HM, widest layer)")
    return widths


def dln_facts(
    widths: tuple[int, ...] | None, rank: int | None, size_class: str, n: int, seed: int
) -> dict:
    """Facts of a DLN; the true LLC of random rank reductions needs the drawn layers, made only
    up to TRUTH_LAYERS parameters (None above)."""
    drawn = dln_widths(widths, rank, size_class, n, seed)
    dim = layer_params(drawn)
    if rank is None and dim <= TRUTH_LAYERS:
        layers = dln_truth(widths, None, size_class, torch_generator(seed))[1]
        rank = product_rank(layers)
    true = None if rank is None else dln_llc(drawn, rank)
    return network_facts(dim, n, n_test(n), drawn, held=dim, true_llc=true)


def make_dln(
    widths: tuple[int, ...] | None, rank: int | None, size_class: str, n: int, seed: int
) -> DeepLinear:
    """A seeded DLN (Hitchcock & Hoogland App. D.1): X ~ U[-10, 10]^H0, Y = W0 X + N(0, 1/4 I)."""
    dln_widths(widths, rank, size_class, n, seed)  # every size checked before any allocation
    g = torch_generator(seed)
    widths, layers = dln_truth(widths, rank, size_class, g)
    data = regression(product_map(layers), uniform_inputs(-10, 10, widths[0]), 0.5, n, g)
    return DeepLinear("dln", widths, layers, data)


def rrr_facts(inputs: int, hidden: int, outputs: int, rank: int, n: int, seed: int) -> dict:
    if rank > min(inputs, hidden, outputs):
        raise ParamError(
            "rrr.rank",
            f"must be in [0, {min(inputs, hidden, outputs)}] "
            f"(min of inputs, hidden, outputs), got {rank}",
        )
    # the truth's pass over the data holds n x hidden numbers besides the n x (inputs + outputs)
    check_data_size("rrr", n, max(inputs + outputs, hidden), "max(inputs + outputs, hidden)")
    dim, true = hidden * (inputs + outputs), rrr_llc(inputs, hidden, outputs, rank)
    sizes = (inputs, hidden, outputs)
    return network_facts(dim, n, n_test(n), sizes, held=dim, true_llc=true)


def make_rrr(inputs: int, hidden: int, outputs: int, rank: int, n: int, seed: int) -> DeepLinear:
    """y = B A x + N(0, I), x ~ N(0, I); A0, B0 Xavier-normal with A0 keeping ``rank`` rows."""
    rrr_facts(inputs, hidden, outputs, rank, n, seed)  # every size checked before allocating
    g = torch_generator(seed)
    layers = xavier_layers([inputs, hidden, outputs], g)
    layers[0][rank:] = 0.0
    data = regression(product_map(layers), normal_inputs(1.0, inputs), 1.0, n, g)
    target = DeepLinear("rrr", (inputs, hidden, outputs), layers, data, names=("A", "B"))
    target.true_llc = rrr_llc(inputs, hidden, outputs, rank)
    return target
