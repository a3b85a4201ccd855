"""Seeded datasets with a train/test split. Every dataset is a pure function of its arguments.

Generated data (DLN, RRR, tanh, polynomial, two clusters, moons) draws the training and the test
set from the same law; the test set has max(1, n // 4) points and there is no validation set. The
digits are sklearn's bundled 8x8 images (no network access needed), scaled to [0, 1] and split
80/20 with the seed; with fewer than the 1437 training images, the images between the n used and
the split are the validation set (Yu et al. App. A.5: a train/val/test split).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from .base import ParamError


@dataclass
class Dataset:
    """Inputs ``x: [n, in]``; targets ``y``: [n, out] floats (regression) or [n] class indices.
    ``x_val, y_val``: a validation set, disjoint from both (empty, [0, in] and [0, ...], when
    the dataset has none)."""

    x: Tensor
    y: Tensor
    x_test: Tensor
    y_test: Tensor
    task: str  # "regression" or "classification"
    classes: int | None = None
    x_val: Tensor = field(default=None)  # type: ignore[assignment]  # None: empty (post_init)
    y_val: Tensor = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.x_val is None:
            self.x_val = self.x.new_zeros(0, *self.x.shape[1:])
        if self.y_val is None:
            self.y_val = self.y.new_zeros(0, *self.y.shape[1:])

    @property
    def n(self) -> int:
        return self.x.shape[0]

    @property
    def inputs(self) -> int:
        return self.x.shape[1]

    @property
    def outputs(self) -> int:
        return self.classes if self.task == "classification" else self.y.shape[1]


def n_test(n: int) -> int:
    return max(1, n // 4)


def torch_generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed))


def regression(
    truth: Callable[[Tensor], Tensor],
    draw_x: Callable[[torch.Generator, int], Tensor],
    noise_std: float,
    n: int,
    g: torch.Generator,
) -> Dataset:
    """y = truth(x) + noise_std * N(0, I), x from ``draw_x``; float64 on the CPU.

    ``g`` continues the stream the truth was drawn from, so that problems with neighbouring
    seeds never share random numbers."""
    x = draw_x(g, n + n_test(n))
    mean = truth(x)
    y = mean + noise_std * torch.randn(mean.shape, generator=g, dtype=torch.float64)
    return Dataset(x[:n], y[:n], x[n:], y[n:], "regression")


def uniform_inputs(low: float, high: float, dim: int) -> Callable[[torch.Generator, int], Tensor]:
    return lambda g, m: low + (high - low) * torch.rand(m, dim, generator=g, dtype=torch.float64)


def normal_inputs(std: float, dim: int) -> Callable[[torch.Generator, int], Tensor]:
    return lambda g, m: std * torch.randn(m, dim, generator=g, dtype=torch.float64)


def two_clusters(n: int, seed: int, noise: float = 0.1) -> Dataset:
    """TATi's two clusters: centres (2, 2) labelled +1 and (-2, -2) labelled -1, with isotropic
    Gaussian noise of standard deviation ``noise`` x 2 (the paper's "0.1 relative noise")."""
    g = torch_generator(seed)
    m = n + n_test(n)
    labels = torch.where(torch.rand(m, generator=g, dtype=torch.float64) < 0.5, 1.0, -1.0)
    x = labels[:, None] * 2.0 + 2.0 * noise * torch.randn(m, 2, generator=g, dtype=torch.float64)
    y = labels[:, None]
    return Dataset(x[:n], y[:n], x[n:], y[n:], "regression")


def moons(n: int, seed: int, noise: float = 0.1) -> Dataset:
    from sklearn.datasets import make_moons

    x, y = make_moons(n_samples=n + n_test(n), noise=noise, random_state=seed)
    x, y = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(y, dtype=torch.long)
    return Dataset(x[:n], y[:n], x[n:], y[n:], "classification", classes=2)


DIGITS_TRAIN = 1437  # 80% of sklearn's 1797 bundled 8x8 digit images


def digits(n: int | None, seed: int) -> Dataset:
    """sklearn's bundled digits (offline), pixels / 16, shuffled with ``seed``: the first ``n``
    images (at most 1437) train, the rest of the first 1437 validate (none when n = 1437) and
    the last 360 test, so the test set does not depend on ``n``."""
    from sklearn.datasets import load_digits

    if n is not None and not 1 <= n <= DIGITS_TRAIN:
        raise ParamError("n", f"must be in [1, {DIGITS_TRAIN}] for the digits dataset, got {n}")
    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(seed).permutation(len(y))
    x = torch.as_tensor(x[order] / 16.0, dtype=torch.float64)
    y = torch.as_tensor(y[order], dtype=torch.long)
    train = DIGITS_TRAIN if n is None else n
    return Dataset(
        x[:train],
        y[:train],
        x[DIGITS_TRAIN:],
        y[DIGITS_TRAIN:],
        "classification",
        classes=10,
        x_val=x[train:DIGITS_TRAIN],
        y_val=y[train:DIGITS_TRAIN],
    )


# Datasets a user can put an MLP/SLP on: name -> (builder(n, seed), default n, doc).
DATASETS: dict[str, tuple[Callable[[int | None, int], Dataset], int | None, str]] = {
    "digits": (digits, None, "sklearn's 8x8 digits, 10 classes (n = all 1437 training images)"),
    "moons": (lambda n, s: moons(n or 500, s), 500, "two interleaved half-moons, 2 classes"),
    "two-clusters": (
        lambda n, s: two_clusters(n or 500, s),
        500,
        "TATi's two Gaussian clusters, labels +-1, squared-error loss",
    ),
}
