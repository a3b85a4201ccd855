"""Factories of user models for the ``model`` target's tests (plain torch, as a user writes).

Each is named in tests as ``tests/model_factories.py:NAME``. Module weights come from a local
seed under ``torch.random.fork_rng`` so that building one leaves torch's global RNG alone."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import landscapes


def _seeded(build, seed: int = 0):
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return build()


class TwoLayer(nn.Module):
    """Named like Basin's built-in MLP (layers.0, layers.1), so their layouts match."""

    def __init__(self, inputs: int, hidden: int, outputs: int):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(inputs, hidden), nn.Linear(hidden, outputs)])

    def forward(self, x):
        return self.layers[1](torch.relu(self.layers[0](x)))


def digits_mlp():
    """The built-in ``mlp`` target's digits data (n = 200, hidden 32, seed 0) as a user's
    module: its loss and gradients must equal the built-in's at the same weights."""
    t = landscapes.make("mlp", hidden_sizes=(32,), n=200, seed=0, device="cpu", dtype="float64")
    return _seeded(lambda: TwoLayer(64, 32, 10)), (t.x, t.y), "cross_entropy"


def small_classifier():
    t = landscapes.make("mlp", dataset="moons", n=120, seed=3, device="cpu", dtype="float64")
    return _seeded(lambda: TwoLayer(2, 5, 2)), (t.x.float(), t.y), "cross_entropy"


def small_regression():
    """Two outputs, loss "mse" (F.mse_loss: the mean over samples and outputs)."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(150, 3, generator=g)
    y = torch.stack([x[:, 0] - x[:, 1], x[:, 2] ** 2], 1) + 0.1 * torch.randn(150, 2, generator=g)
    return _seeded(lambda: TwoLayer(3, 4, 2)), (x, y), "mse"


def huber(outputs, targets):
    return F.huber_loss(outputs, targets)


def callable_loss():
    module, data, _ = small_regression()
    return module, data, huber


class Normalised(nn.Module):
    """BatchNorm and Dropout: Basin evaluates it in eval mode, buffers held fixed."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 6)
        self.norm = nn.BatchNorm1d(6)
        self.drop = nn.Dropout(0.5)
        self.out = nn.Linear(6, 2)

    def forward(self, x):
        return self.out(self.drop(torch.relu(self.norm(self.fc(x)))))


def batchnorm_dropout():
    _, data, loss = small_regression()
    net = _seeded(Normalised)
    with torch.no_grad():  # running statistics a training run would have left
        net.norm.running_mean.copy_(torch.linspace(-0.5, 0.5, 6))
        net.norm.running_var.copy_(torch.linspace(0.5, 2.0, 6))
    return net, data, loss


# ---------------------------------------------------------------------------------------------
# devinterp's reduced-rank-regression accuracy test (timaeus-research/devinterp,
# tests/slt/rrr_test.py::test_accuracy_rrr), as a user would rebuild it in plain torch.


class ReducedRankRegressor(nn.Module):
    """devinterp.test_utils.ReducedRankRegressor: m -> h -> n, two Linear layers, no bias."""

    def __init__(self, m: int, h: int, n: int):
        super().__init__()
        self.fc1 = nn.Linear(m, h, bias=False)
        self.fc2 = nn.Linear(h, n, bias=False)

    def forward(self, x):
        return self.fc2(self.fc1(x))


def rrr_devinterp(m: int, h: int, n: int, steps: int = 5000, loss="mse"):
    """devinterp's data and w0, float32: torch.manual_seed(42); x = randn(1000, m);
    y = randn(1000, n); the model built next (after x and y are drawn, as the test does), then
    Adam lr 0.01 for ``steps`` full-batch steps on F.mse_loss (0: the untrained module, for a
    checkpoint to set w0). Under fork_rng: torch's global RNG is left alone.
    Returns (module, (x, y), loss)."""
    with torch.random.fork_rng():
        torch.manual_seed(42)
        x = torch.randn(1000, m)
        y = torch.randn(1000, n)
        model = ReducedRankRegressor(m, h, n)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(steps):
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    return model, (x, y), loss


def summed_squares(outputs, targets):
    """Basin's summed convention as a user's loss: squared error summed over outputs, averaged
    over the batch (= the number of outputs x F.mse_loss)."""
    return ((outputs - targets) ** 2).sum(-1).mean()


def rrr_devinterp_4_3_8():
    return rrr_devinterp(4, 3, 8)


def rrr_devinterp_8_3_4():
    return rrr_devinterp(8, 3, 4)


def rrr_devinterp_3_8_4():
    return rrr_devinterp(3, 8, 4)


def rrr_devinterp_5_3_5():
    return rrr_devinterp(5, 3, 5)


def rrr_devinterp_4_3_8_untrained():
    """(4, 3, 8) untrained, loss "mse": w0 from a checkpoint of ``rrr_devinterp(4, 3, 8)``."""
    return rrr_devinterp(4, 3, 8, steps=0)


def rrr_devinterp_4_3_8_summed_untrained():
    """As ``rrr_devinterp_4_3_8_untrained`` with the loss summed over the 8 outputs."""
    return rrr_devinterp(4, 3, 8, steps=0, loss=summed_squares)
