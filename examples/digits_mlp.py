"""A user's model, as Basin's ``model`` target takes it: an MLP on sklearn's bundled 8x8 digits.

``make()`` is the factory (``--target model --target-param factory=examples.digits_mlp:make``):
it returns ``(module, (inputs, targets), loss)``. Only torch and scikit-learn; nothing of Basin.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn

HIDDEN = 128  # 64 x 128 + 128 + 128 x 10 + 10 = 9,610 parameters
TRAIN = 1437  # the first 80% of a fixed shuffle of the 1,797 images


class DigitsMLP(nn.Module):
    def __init__(self, hidden: int = HIDDEN):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(64, hidden), nn.Linear(hidden, 10)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers[1](torch.relu(self.layers[0](x)))


def data(split: str = "train") -> tuple[torch.Tensor, torch.Tensor]:
    """Pixels scaled to [0, 1] (float32) and class labels (int64)."""
    digits = load_digits()
    order = np.random.default_rng(0).permutation(len(digits.target))
    keep = order[:TRAIN] if split == "train" else order[TRAIN:]
    x = torch.tensor(digits.data[keep] / 16.0, dtype=torch.float32)
    return x, torch.tensor(digits.target[keep], dtype=torch.int64)


def model(seed: int = 0) -> DigitsMLP:
    """The module at torch's default initialisation from ``seed`` (the global RNG is left as
    it was)."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return DigitsMLP()


def make():
    return model(), data(), "cross_entropy"
