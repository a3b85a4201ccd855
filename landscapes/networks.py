"""Networks as pure functions of the flat parameter vector, batched over chains.

``forward(params, x)`` maps named parameter tensors with a leading chain axis ([C, ...]) and inputs
``x`` to outputs ``[C, B, out]`` with explicit batched matmuls, so all C chains run in one call on
any device. ``x`` is shared ([B, in]: the full data, a probe's batch) or each chain's own ([C, B,
in]: a sampler's minibatches, drawn independently per chain). Layers compute W h on activations laid
out [C, width, B] (features first), so that autograd's weight gradient, dh h_prev^T, comes out as
[C, out, in], the layout of W in the flat position: with h W^T it came out transposed and was copied
element by element into place (the digits MLP, 8 chains: a step 80 -> 71 us compiled). The inputs
are turned with ``torch.transpose``: ``x.T`` on the full data, a constant of a compiled chunk, fails
dynamo's scan ("Expected FakeTensor") in torch 2.13.

Losses follow the local-sampling benchmark's L_n: regression uses the squared error SUMMED over
outputs and AVERAGED over samples, with no 1/(2 sigma^2) factor (the LLC does not depend on that
scale, but step sizes do: with noise variance sigma^2 the Gaussian log-likelihood is
n L_n / (2 sigma^2), so nbeta here plays the role of n beta / (2 sigma^2)). Classification uses
the mean cross-entropy. The default nbeta is n / log n, the LLC convention (beta = 1 / log n).
"""

from __future__ import annotations

import copy
import itertools
import math
from abc import abstractmethod
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from . import data as datasets
from .base import DATA_CHUNK, Batch, ParamError, Target, rows
from .truths import dln_llc, normal_crossing_rlct, rrr_llc, tanh_llc

MAX_DATA_ELEMENTS = 200_000_000  # inputs + outputs held in memory, about 1.6 GB in float64
MAX_PARAMS = 400_000_000  # d: the 100M class's largest draw, 40 layers of 3000 x 3000, is 3.6e8
TRUTH_LAYERS = 1_000_000  # a random-rank DLN's true LLC needs its layers: drawn up to this d


class Network(Target):
    """A model on a dataset. Subclasses define ``layout`` and ``forward``."""

    def __init__(self, name: str, layout: dict[str, tuple[int, ...]], dataset: datasets.Dataset):
        self.name, self.layout = name, layout
        self.dim = sum(math.prod(s) for s in layout.values())
        self.task, self.classes = dataset.task, dataset.classes
        self.x, self.y = dataset.x, dataset.y
        self.x_test, self.y_test = dataset.x_test, dataset.y_test
        self.x_val, self.y_val = dataset.x_val, dataset.y_val  # empty where the data has none
        self.n = dataset.n
        self.nbeta = self.n / math.log(self.n) if self.n > 1 else 1.0

    @abstractmethod
    def forward(self, params: dict[str, Tensor], x: Tensor) -> Tensor:
        """Outputs [C, B, out] from named parameters [C, ...] and inputs [B, in] or [C, B, in]."""

    def predict(self, w: Tensor, x: Tensor) -> Tensor:
        """Outputs [C, B, out] for inputs [B, in] at sampling coordinates ``w``."""
        return self.apply(self.original(self.check_position(w)), x)

    def apply(self, theta: Tensor, x: Tensor) -> Tensor:
        """Outputs [C, B, out] for inputs [B, in] at the model's own parameters ``theta``
        (``original``'s coordinates, what runs record)."""
        return self.forward(self.unflatten(theta), x.to(theta))

    def _loss(self, w: Tensor, batch: Batch) -> Tensor:
        x, y = (self.x, self.y) if batch is None else batch
        return self.criterion(self.forward(self.unflatten(w), x), y)

    def criterion(self, out: Tensor, y: Tensor) -> Tensor:
        return self.per_sample(out, y).mean(-1)

    # Regression's loss a point: "sum" of the squared errors over outputs (the benchmark's
    # L_n), or their "mean" (F.mse_loss, devinterp's): the registry's loss_convention.
    loss_convention: str = "sum"

    def per_sample(self, out: Tensor, y: Tensor) -> Tensor:
        """[C, B]: each point's loss (cross-entropy, or the squared error over outputs, summed
        or averaged as ``loss_convention`` says)."""
        if self.task == "classification":
            picked = out.gather(-1, y.expand(out.shape[0], -1)[..., None]).squeeze(-1)
            return torch.logsumexp(out, -1) - picked
        squared = (out - y) ** 2
        return squared.mean(-1) if self.loss_convention == "mean" else squared.sum(-1)

    def loss_doc(self) -> str | None:
        """The loss in words (run summaries and the app say it): None for classification."""
        if self.task == "classification":
            return None
        if self.loss_convention == "mean":
            return "squared error averaged over outputs and samples (F.mse_loss)"
        return "squared error summed over outputs, averaged over samples"

    def sample_losses(self, w: Tensor, chunk: int = 8192) -> Tensor:
        """[C, n]: each training point's loss at ``w`` (``loss`` is their mean), ``chunk``
        points per forward pass."""
        params = self.unflatten(self.check_position(w))
        with torch.no_grad():
            parts = [
                self.per_sample(self.forward(params, self.x[s : s + chunk]), self.y[s : s + chunk])
                for s in range(0, self.n, chunk)
            ]
        return torch.cat(parts, 1)

    def test_loss(self, w: Tensor) -> Tensor:
        return self.criterion(self.predict(w, self.x_test), self.y_test)

    def batch(self, index: Tensor) -> Batch:
        return rows(self.x, index), rows(self.y, index)

    def first(self, n: int) -> Network:
        """The same network on its first ``n`` training points (test data unchanged): an n-scan
        on one dataset is nested, so its points differ in n and not in their noise draws."""
        if not 1 <= n <= self.n:
            raise ParamError(f"{self.name}.n", f"first(n) needs n in [1, {self.n}], got {n}")
        t = copy.copy(self)
        t.x, t.y, t.n = self.x[:n], self.y[:n], n
        t._data_changed()
        return t

    def _data_changed(self) -> None:
        """Recompute what the network keeps of its training data (``first``)."""
        self.nbeta = self.n / math.log(self.n) if self.n > 1 else 1.0


def check_data_size(name: str, n: int, width: int, what: str = "(inputs + outputs)") -> None:
    """``n`` points of ``width`` numbers each (``what`` says which) must fit MAX_DATA_ELEMENTS."""
    if n * width > MAX_DATA_ELEMENTS:
        raise ParamError(
            f"{name}.n",
            f"n x {what} = {n * width:.3g} exceeds "
            f"{MAX_DATA_ELEMENTS:.0e} numbers in memory; choose n <= "
            f"{MAX_DATA_ELEMENTS // width}",
        )


def check_dim(name: str, field: str, dim: int) -> None:
    if dim > MAX_PARAMS:
        raise ParamError(
            f"{name}.{field}",
            f"give d = {dim:.3g} parameters, over the {MAX_PARAMS:.0e} allowed "
            f"(d in [1, {MAX_PARAMS:.0e}]); choose smaller or fewer layers",
        )


def network_facts(
    dim: int,
    n: int,
    n_test: int,
    widths: Sequence[int],
    *,
    labels: bool = False,
    held: int = 0,
    truth: bool = True,
    true_llc: tuple[float, int] | None = None,
    closed_form: bool = False,
    n_val: int = 0,
    nbeta: float | None = None,
) -> dict:
    """A network's facts (``landscapes.registry.facts`` says what each is) from its sizes:
    ``widths`` from input to output, ``labels`` for class indices as targets (int64, one a
    point), ``held`` the floats it keeps besides its data (w0, moments), ``truth`` whether it
    knows its true parameter w0, ``closed_form`` whether its full-data loss comes from the
    data's moments (no pass over the points), ``n_val`` its validation points, ``nbeta`` its
    default n beta where not the LLC's n / log n (a Bayesian posterior's n).

    Two facts besides those ``registry.facts`` lists: ``classes`` (the number of classes of a
    classification network, None for regression) and ``n_test`` (its test points)."""
    points, inputs = n + n_val + n_test, widths[0]
    if nbeta is None:
        nbeta = n / math.log(n) if n > 1 else 1.0
    return {
        "dim": dim,
        "n": n,
        "widths": tuple(widths),
        "nbeta": nbeta,
        "truth": truth,
        "true_llc": None if true_llc is None else true_llc[0],
        "multiplicity": None if true_llc is None else true_llc[1],
        "floats": points * (inputs + (0 if labels else widths[-1])) + held,
        "other_bytes": points * 8 if labels else 0,
        "closed_form": closed_form,
        "classes": widths[-1] if labels else None,
        "n_test": n_test,
    }


# ---------------------------------------------------------------------------------------------
# Deep linear networks and reduced-rank regression.


class DeepLinear(Network):
    """f(x) = W_M ... W_1 x, W_l of shape H_l x H_{l-1}, no biases."""

    def __init__(
        self,
        name: str,
        widths: Sequence[int],
        truth: list[Tensor],
        dataset: datasets.Dataset,
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
# (reference 000, section 7: d ~ 130 (tiny) and ~ 560 (small) on average).
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
    widths = list(widths) if given else draw_widths(size_class, datasets.torch_generator(seed))
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
        layers = dln_truth(widths, None, size_class, datasets.torch_generator(seed))[1]
        rank = product_rank(layers)
    true = None if rank is None else dln_llc(drawn, rank)
    return network_facts(dim, n, datasets.n_test(n), drawn, held=dim, true_llc=true)


def make_dln(
    widths: tuple[int, ...] | None, rank: int | None, size_class: str, n: int, seed: int
) -> DeepLinear:
    """Seed-000 DLN: X ~ U[-10, 10]^H0, Y = W0 X + N(0, 1/4 I)."""
    dln_widths(widths, rank, size_class, n, seed)  # every size checked before any allocation
    g = datasets.torch_generator(seed)
    widths, layers = dln_truth(widths, rank, size_class, g)
    data = datasets.regression(
        product_map(layers), datasets.uniform_inputs(-10, 10, widths[0]), 0.5, n, g
    )
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
    return network_facts(dim, n, datasets.n_test(n), sizes, held=dim, true_llc=true)


def make_rrr(inputs: int, hidden: int, outputs: int, rank: int, n: int, seed: int) -> DeepLinear:
    """y = B A x + N(0, I), x ~ N(0, I); A0, B0 Xavier-normal with A0 keeping ``rank`` rows."""
    rrr_facts(inputs, hidden, outputs, rank, n, seed)  # every size checked before allocating
    g = datasets.torch_generator(seed)
    layers = xavier_layers([inputs, hidden, outputs], g)
    layers[0][rank:] = 0.0
    data = datasets.regression(product_map(layers), datasets.normal_inputs(1.0, inputs), 1.0, n, g)
    target = DeepLinear("rrr", (inputs, hidden, outputs), layers, data, names=("A", "B"))
    target.true_llc = rrr_llc(inputs, hidden, outputs, rank)
    return target


# ---------------------------------------------------------------------------------------------
# One-dimensional singular models.


class Polynomial(Network):
    """y_hat = x * prod_i w_i^(p_i); truth w0 = 0 (so y is pure noise), a normal crossing."""

    def __init__(self, powers: Sequence[int], dataset: datasets.Dataset):
        super().__init__("polynomial", {"w": (len(powers),)}, dataset)
        self.powers = torch.tensor(powers, dtype=torch.float64)
        self.w0 = torch.zeros(self.dim, dtype=torch.float64)
        self.true_llc = normal_crossing_rlct(powers)
        self.full_moments = self._moments((self.x, self.y))

    def _data_changed(self) -> None:
        super()._data_changed()
        self.full_moments = self._moments((self.x, self.y))

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
        m = self.full_moments if batch is None else self._moments(batch)
        terms = w**self.powers  # [C, d]
        coef = terms.prod(-1)
        xx, xy, yy = m[..., 0, 0], m[..., 0, 1], m[..., 1, 1]  # [] or [C]: per chain
        return (xx, xy), terms, coef, coef * (coef * xx - 2 * xy) + yy

    def _loss(self, w: Tensor, batch: Batch) -> Tensor:
        return self._quadratic(w, batch)[3]

    def _loss_and_grad(self, w: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
        m, terms, coef, loss = self._quadratic(w, batch)
        # d coef / d w_j = p_j w_j^(p_j - 1) prod_{k != j} w_k^p_k: the product of the other
        # terms by exclusive cumulative products from each side (no division: w_j may be 0)
        ones = torch.ones_like(coef)[:, None]
        before = torch.cat([ones, terms[:, :-1]], 1).cumprod(1)
        after = torch.cat([terms[:, 1:], ones], 1).flip(1).cumprod(1).flip(1)
        slope = torch.where(self.powers > 0, self.powers * w ** (self.powers - 1).clamp(min=0), 0)
        xx, xy = m
        return loss, (2 * (coef * xx - xy))[:, None] * slope * before * after


def polynomial_facts(
    powers: tuple[int, ...], x_std: float, noise_std: float, n: int, seed: int
) -> dict:
    if not any(p > 0 for p in powers):
        raise ParamError("polynomial.powers", "at least one power must be positive")
    check_data_size("polynomial", n, 2)
    d = len(powers)  # it holds powers, w0 and the data's 2 x 2 moments besides the data
    true = normal_crossing_rlct(powers)
    return network_facts(
        d, n, datasets.n_test(n), (1, 1), held=2 * d + 4, true_llc=true, closed_form=True
    )


def make_polynomial(
    powers: tuple[int, ...], x_std: float, noise_std: float, n: int, seed: int
) -> Polynomial:
    polynomial_facts(powers, x_std, noise_std, n, seed)
    data = datasets.regression(
        lambda x: torch.zeros_like(x),
        datasets.normal_inputs(x_std, 1),
        noise_std,
        n,
        datasets.torch_generator(seed),
    )
    return Polynomial(powers, data)


class TanhNet(Network):
    """f(x) = sum_h b_h tanh(a_h x), x ~ U[-1, 1], y = f_{w0}(x) + N(0, 1) with w0 = 0."""

    def __init__(self, hidden: int, dataset: datasets.Dataset):
        super().__init__("tanh", {"a": (hidden,), "b": (hidden,)}, dataset)
        self.w0 = torch.zeros(self.dim, dtype=torch.float64)
        self.true_llc = tanh_llc(hidden)

    def forward(self, params: dict[str, Tensor], x: Tensor) -> Tensor:
        t = torch.tanh(x * params["a"][:, None, :])  # [C, B, H]
        return (t * params["b"][:, None, :]).sum(-1, keepdim=True)


def tanh_facts(hidden: int, n: int, seed: int) -> dict:
    check_data_size("tanh", n, 2)
    d, true = 2 * hidden, tanh_llc(hidden)
    return network_facts(d, n, datasets.n_test(n), (1, hidden, 1), held=d, true_llc=true)


def make_tanh(hidden: int, n: int, seed: int) -> TanhNet:
    tanh_facts(hidden, n, seed)
    data = datasets.regression(
        lambda x: torch.zeros_like(x),
        datasets.uniform_inputs(-1, 1, 1),
        1.0,
        n,
        datasets.torch_generator(seed),
    )
    return TanhNet(hidden, data)


# ---------------------------------------------------------------------------------------------
# Multilayer perceptrons on a dataset.

ACTIVATIONS = {"relu": torch.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "gelu": F.gelu}
ACTIVATIONS_INPLACE = {
    "relu": torch.relu_,
    "tanh": torch.tanh_,
    "sigmoid": torch.sigmoid_,
    "gelu": lambda h: h.copy_(F.gelu(h)),
}


def equal_runs(values: list[float], most: int) -> list[tuple[int, int]]:
    """[start, end) spans of consecutive equal ``values`` (a grid's rows), each cut into the
    fewest equal parts of at most ``most`` (a row of 41 in parts of 33 is 21 + 20, not 33 + 8)."""
    runs, start = [], 0
    for i in range(1, len(values) + 1):
        if i == len(values) or values[i] != values[start]:
            parts = -(-(i - start) // most)
            edges = [start + (i - start) * k // parts for k in range(parts + 1)]
            runs += itertools.pairwise(edges)
            start = i
    return runs


PRIORS = ("none", "gaussian", "horseshoe")
PRIOR_WEIGHT_SCALE = 1.41  # sigma_w = 1.41 / sqrt(fan_in) (reference 001 section 2.2 [code])
PRIOR_BIAS_STD = 1.0  # sigma_b
HORSESHOE_START = math.log(math.e - 1)  # softplus^-1(1): every scale starts at lambda = 1
LOG_2PI = math.log(2 * math.pi)


class MLP(Network):
    """Fully connected network; parameters named like torch.nn.Sequential of Linear layers.

    With a ``prior`` (reference 001 section 2.2) the target is a Bayesian posterior at
    temperature 1: nbeta = n, so U = n L + prior_energy = -log p(X, theta) (the energy includes
    the prior's normalising constants, so it is that log density exactly). ``gaussian``: each
    tensor t ~ N(0, sigma_t^2), sigma_t = 1.41 / sqrt(fan_in) for weights and 1 for biases.
    ``horseshoe``: theta_t | lambda_t ~ N(0, (sigma_t lambda_t)^2), lambda_t ~ HalfCauchy(0, 1),
    one scale per tensor, lambda_t = softplus(p_t); the p_t are sampled with theta, as entries
    "prior.<tensor>" of shape (1,) after every layer tensor (the layers lead the flat vector:
    ``forward`` and ``plane_loss`` read those alone), and their energy carries the softplus's
    Jacobian: -log p(p_t) = log(pi / 2) + log(1 + lambda_t^2) - log sigmoid(p_t)."""

    def __init__(
        self,
        name: str,
        hidden_sizes: Sequence[int],
        activation: str,
        dataset: datasets.Dataset,
        prior: str = "none",
    ):
        sizes = [dataset.inputs, *hidden_sizes, dataset.outputs]
        layout = {}
        for l in range(len(sizes) - 1):
            layout[f"layers.{l}.weight"] = (sizes[l + 1], sizes[l])
            layout[f"layers.{l}.bias"] = (sizes[l + 1],)
        self.layer_names = tuple(layout)
        self.layer_sizes = tuple(math.prod(shape) for shape in layout.values())
        self.layers_dim = sum(self.layer_sizes)
        # sigma_t of each layer tensor: weights' fan_in is their shape's last axis
        self.prior_stds = tuple(
            PRIOR_WEIGHT_SCALE / math.sqrt(shape[1]) if len(shape) == 2 else PRIOR_BIAS_STD
            for shape in layout.values()
        )
        if prior == "horseshoe":
            layout.update({f"prior.{key}": (1,) for key in self.layer_names})
        super().__init__(name, layout, dataset)
        self.sizes, self.activation, self.prior = tuple(sizes), activation, prior
        if prior != "none":
            self.nbeta = float(self.n)  # temperature 1: n x the mean loss is -log p(y | x, w)
        # -log of the Gaussians' normalising constants (and the half-Cauchy's, 2 / pi each)
        self._log_norm = sum(
            m * (math.log(std) + 0.5 * LOG_2PI)
            for m, std in zip(self.layer_sizes, self.prior_stds, strict=True)
        )
        if prior == "horseshoe":
            self._log_norm += len(self.layer_names) * math.log(math.pi / 2)

    def _data_changed(self) -> None:
        super()._data_changed()
        if self.prior != "none":
            self.nbeta = float(self.n)

    @property
    def has_prior(self) -> bool:
        return self.prior != "none"

    def prior_energy(self, w: Tensor) -> Tensor:
        """Tensor[C]: -log p(theta) (gaussian) or -log p(theta, p) (horseshoe), exactly."""
        if self.prior == "none":
            return w.new_zeros(w.shape[0])
        pieces = w[:, : self.layers_dim].split(self.layer_sizes, 1)
        energy = w.new_full((w.shape[0],), self._log_norm)
        if self.prior == "gaussian":
            for piece, std in zip(pieces, self.prior_stds, strict=True):
                energy = energy + 0.5 * (piece * piece).sum(-1) / std**2
            return energy
        p = w[:, self.layers_dim :]  # [C, T]
        lam = F.softplus(p)
        log_lam = torch.log(lam)
        for t, (piece, std, m) in enumerate(
            zip(pieces, self.prior_stds, self.layer_sizes, strict=True)
        ):
            var = std**2 * lam[:, t] ** 2
            energy = energy + 0.5 * (piece * piece).sum(-1) / var + m * log_lam[:, t]
        # -log sigmoid(p) = softplus(-p) (F.logsigmoid takes ~0.6 ms on a CPU, softplus ~2 us)
        return energy + (torch.log1p(lam * lam) + F.softplus(-p)).sum(-1)

    def prior_grad(self, w: Tensor) -> Tensor:
        """Tensor[C, d]: the gradient of ``prior_energy``, analytic."""
        if self.prior == "none":
            return torch.zeros_like(w)
        pieces = w[:, : self.layers_dim].split(self.layer_sizes, 1)
        if self.prior == "gaussian":
            stds = self.prior_stds
            return torch.cat([q / std**2 for q, std in zip(pieces, stds, strict=True)], 1)
        p = w[:, self.layers_dim :]
        lam = F.softplus(p)
        grads, dlam = [], []
        for t, (piece, std, m) in enumerate(
            zip(pieces, self.prior_stds, self.layer_sizes, strict=True)
        ):
            precision = 1.0 / (std**2 * lam[:, t] ** 2)  # [C]
            grads.append(piece * precision[:, None])
            # d/dlambda of S / (2 sigma^2 lambda^2) + m log lambda
            dlam.append((m - (piece * piece).sum(-1) * precision) / lam[:, t])
        dlam_total = torch.stack(dlam, 1) + 2 * lam / (1 + lam * lam)  # + d log(1 + lambda^2)
        # dlambda/dp = sigmoid(p); d(-log sigmoid(p))/dp = -sigmoid(-p)
        grads.append(torch.sigmoid(p) * dlam_total - torch.sigmoid(-p))
        return torch.cat(grads, 1)

    def forward(self, params: dict[str, Tensor], x: Tensor) -> Tensor:
        act = ACTIVATIONS[self.activation]
        tensors = [params[key] for key in self.layer_names]  # not a horseshoe's scales
        h = torch.transpose(x, -1, -2)  # features first (module doc)
        for l in range(0, len(tensors), 2):
            h = torch.matmul(tensors[l], h) + tensors[l + 1][:, :, None]
            if l + 2 < len(tensors):
                h = act(h)
        return h.transpose(-1, -2)

    def plane_loss(
        self, theta: Tensor, vectors: Tensor, a: Tensor, b: Tensor, chunk: int
    ) -> Tensor:
        """The first layer is linear in its own parameters (W x + c), so on the plane its
        pre-activations are pre(theta) + a pre(v0) + b pre(v1): three passes over the data serve
        every grid point, where a forward pass per point repeats the first layer's
        multiply-adds (87% of the digits MLP's). Points that share ``a`` (a grid's row) also
        share pre(theta) + a pre(v0), so a row, in parts of at most ``chunk`` points, is one
        broadcast multiply-add, then one batched matmul per later layer along the data,
        activations laid out [points, width, data]. They live in buffers reused by every part:
        fresh multi-MB tensors cost page faults that took longer than the arithmetic."""
        act = ACTIVATIONS_INPLACE[self.activation]
        first = self.unflatten(torch.stack([theta, vectors[0], vectors[1]]))
        weight0, bias0 = first["layers.0.weight"], first["layers.0.bias"]  # [3, ...] each
        head = (self.sizes[0] + 1) * self.sizes[1]  # the first layer leads the flat vector
        stop = self.layers_dim  # a horseshoe's scales follow the layers: no part of the loss
        shapes = list(self.layout.values())[2 : len(self.layer_names)]
        sizes = [math.prod(shape) for shape in shapes]
        ab = torch.stack([a, b], 1)
        coords = a.tolist()  # one host read; each row's a is a scalar
        rows = equal_runs(coords, chunk)
        most = max((end - start for start, end in rows), default=0)
        total = theta.new_zeros(a.shape[0])
        for d in range(0, self.n, DATA_CHUNK):
            x, y = self.x[d : d + DATA_CHUNK], self.y[d : d + DATA_CHUNK]
            pre = torch.baddbmm(bias0[:, :, None], weight0, x.T.expand(3, -1, -1))  # [3, H, B]
            row = torch.empty_like(pre[0])
            buffers = [pre.new_empty(most, width, x.shape[0]) for width in self.sizes[1:]]
            if self.task == "classification":
                logp = torch.empty_like(buffers[-1])
                # mv(log p [P, classes * data], onehot) = sum_j log p(y_j | x_j)
                onehot = F.one_hot(y.reshape(-1), self.sizes[-1]).T.reshape(-1).to(pre.dtype)
            for start, end in rows:
                m = end - start
                # the later layers' parameters at these points, [m, ...] each
                later = torch.addmm(theta[head:stop], ab[start:end], vectors[:, head:stop])
                tail = [
                    part.reshape(m, *shape)
                    for part, shape in zip(later.split(sizes, 1), shapes, strict=True)
                ]
                torch.add(pre[0], pre[1], alpha=coords[start], out=row)
                h = torch.addcmul(row, b[start:end, None, None], pre[2], out=buffers[0][:m])
                for l, out in zip(range(0, len(tail), 2), buffers[1:], strict=True):
                    h = torch.baddbmm(tail[l + 1][:, :, None], tail[l], act(h), out=out[:m])
                if self.task == "classification":
                    torch.log_softmax(h, 1, out=logp[:m])
                    total[start:end] -= torch.mv(logp[:m].view(m, -1), onehot)
                else:
                    total[start:end] += ((h - y.T) ** 2).sum((1, 2))
        if self.task == "regression" and self.loss_convention == "mean":
            total = total / self.sizes[-1]
        return total / self.n

    def initial(self, generator: torch.Generator, chains: int) -> Tensor:
        """torch.nn.Linear's default: weights and biases ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in));
        with a prior, He's (reference 001): weights ~ N(0, 2 / fan_in), biases 0 and a
        horseshoe's scales at lambda = 1."""
        if self.prior != "none":
            return self._he_initial(generator, chains)
        parts = []
        for fan_in, fan_out in zip(self.sizes[:-1], self.sizes[1:], strict=True):
            u = torch.rand(
                chains,
                (fan_in + 1) * fan_out,
                generator=generator,
                device=generator.device,
                dtype=self.dtype,
            )
            parts.append((2 * u - 1) / math.sqrt(fan_in))
        return torch.cat(parts, -1)

    def _he_initial(self, generator: torch.Generator, chains: int) -> Tensor:
        like = {"device": generator.device, "dtype": self.dtype}
        parts = []
        for fan_in, fan_out in zip(self.sizes[:-1], self.sizes[1:], strict=True):
            weight = torch.randn(chains, fan_out * fan_in, generator=generator, **like)
            parts += [weight * math.sqrt(2.0 / fan_in), torch.zeros(chains, fan_out, **like)]
        scales = self.dim - self.layers_dim
        if scales:
            parts.append(torch.full((chains, scales), HORSESHOE_START, **like))
        return torch.cat(parts, -1)


def mlp_facts(
    dataset: str,
    hidden_sizes: tuple[int, ...],
    activation: str,
    n: int | None,
    seed: int,
    name: str = "mlp",
    prior: str = "none",
) -> dict:
    """Facts of an MLP; its dataset's shapes from a one-point draw of it."""
    build, default_n, _ = datasets.DATASETS[dataset]
    if dataset == "digits" and n is not None and n > datasets.DIGITS_TRAIN:
        raise ParamError(
            f"{name}.n", f"must be in [1, {datasets.DIGITS_TRAIN}] for the digits dataset, got {n}"
        )
    one = build(1, seed)
    labels = one.task == "classification"
    n = n or default_n or datasets.DIGITS_TRAIN
    check_data_size(name, n, one.inputs + (1 if labels else one.outputs))
    sizes = (one.inputs, *hidden_sizes, one.outputs)
    dim = sum((a + 1) * b for a, b in itertools.pairwise(sizes))
    if prior == "horseshoe":
        dim += 2 * (len(sizes) - 1)  # a scale per weight and per bias
    check_dim(name, "hidden_sizes", dim)
    tests = len(one.y_test) if dataset == "digits" else datasets.n_test(n)  # digits: fixed 360
    val = datasets.DIGITS_TRAIN - n if dataset == "digits" else 0  # the rest of the 1437
    nbeta = None if prior == "none" else float(n)
    return network_facts(dim, n, tests, sizes, labels=labels, truth=False, n_val=val, nbeta=nbeta)


def make_mlp(
    dataset: str,
    hidden_sizes: tuple[int, ...],
    activation: str,
    n: int | None,
    seed: int,
    name: str = "mlp",
    prior: str = "none",
) -> MLP:
    mlp_facts(dataset, hidden_sizes, activation, n, seed, name, prior)
    build, _, _ = datasets.DATASETS[dataset]
    data = build(n, seed)
    return MLP(name, hidden_sizes, activation, data, prior)
