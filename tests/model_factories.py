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
