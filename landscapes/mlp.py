"""Multilayer perceptrons on a dataset (moons, digits, ...), with an optional Gaussian or
horseshoe prior (Yu et al. Sec. 4.3), and their loss on a plane of a landscape surface."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from .base import DATA_CHUNK, ParamError
from .data import (
    DATASETS,
    DIGITS_TRAIN,
    Dataset,
    n_test,
)
from .networks import (
    Network,
    check_data_size,
    check_dim,
    network_facts,
)

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
PRIOR_WEIGHT_SCALE = 1.41  # sigma_w = 1.41 / sqrt(fan_in) (Yu et al.'s code; docs/methods/sgrld.md)
PRIOR_BIAS_STD = 1.0  # sigma_b
HORSESHOE_START = math.log(math.e - 1)  # softplus^-1(1): every scale starts at lambda = 1
LOG_2PI = math.log(2 * math.pi)


class MLP(Network):
    """Fully connected network; parameters named like torch.nn.Sequential of Linear layers.

    With a ``prior`` (Yu et al. Sec. 4.3) the target is a Bayesian posterior at
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
        dataset: Dataset,
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
        """torch.nn.Linear's default: weights and biases ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)); with
        a prior, He's (as Yu et al.'s code; docs/methods/sgrld.md): weights ~ N(0, 2 / fan_in),
        biases 0 and a horseshoe's scales at lambda = 1."""
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
    build, default_n, _ = DATASETS[dataset]
    if dataset == "digits" and n is not None and n > DIGITS_TRAIN:
        raise ParamError(
            f"{name}.n", f"must be in [1, {DIGITS_TRAIN}] for the digits dataset, got {n}"
        )
    one = build(1, seed)
    labels = one.task == "classification"
    n = n or default_n or DIGITS_TRAIN
    check_data_size(name, n, one.inputs + (1 if labels else one.outputs))
    sizes = (one.inputs, *hidden_sizes, one.outputs)
    dim = sum((a + 1) * b for a, b in itertools.pairwise(sizes))
    if prior == "horseshoe":
        dim += 2 * (len(sizes) - 1)  # a scale per weight and per bias
    check_dim(name, "hidden_sizes", dim)
    tests = len(one.y_test) if dataset == "digits" else n_test(n)  # digits: fixed 360
    val = DIGITS_TRAIN - n if dataset == "digits" else 0  # the rest of the 1437
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
    build, _, _ = DATASETS[dataset]
    data = build(n, seed)
    return MLP(name, hidden_sizes, activation, data, prior)
