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
import math
from abc import abstractmethod
from collections.abc import Sequence

import torch
from torch import Tensor

from .base import Batch, ParamError, Target, rows
from .data import Dataset

MAX_DATA_ELEMENTS = 200_000_000  # inputs + outputs held in memory, about 1.6 GB in float64
MAX_PARAMS = 400_000_000  # d: the 100M class's largest draw, 40 layers of 3000 x 3000, is 3.6e8
TRUTH_LAYERS = 1_000_000  # a random-rank DLN's true LLC needs its layers: drawn up to this d


class Network(Target):
    """A model on a dataset. Subclasses define ``layout`` and ``forward``."""

    # per-chain gradients by torch.func, which torch.export cannot trace inside a scan
    exportable = False

    def __init__(self, name: str, layout: dict[str, tuple[int, ...]], dataset: Dataset):
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
