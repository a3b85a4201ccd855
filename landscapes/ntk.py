"""A wide Bayesian network in the NTK parametrisation, and its repriorisation (Hron et al. 2022).

Every entry of the flat vector has the prior N(0, 1) at any width; the sigma multipliers live in
the forward pass: h1 = sigma_w W1 x / sqrt(d0) + sigma_b b1, h(l+1) = sigma_w W(l+1) phi(h_l) /
sqrt(d_l) + sigma_b b(l+1), phi = GELU, and a linear readout f = Psi theta_o, where the scaled
top-layer features are Psi = [sigma_w,out phi(h_L) / sqrt(d_L), sigma_b,out 1] (n x (d_L + 1))
and theta_o = (W_out^T; b_out) is (d_L + 1) x k. The likelihood is y | x ~ N(f(x), sigma^2 I).

``parametrisation="reprior"`` samples phi instead of theta, with theta = T(phi) (Hron et al.,
Eq. 3, in the Cholesky form of their Sec. 3.2): the hidden layers are the identity, and with
G = Psi^T Psi + lambda I = L L^T,

    theta_o = L^-T (sqrt(lambda) phi_o + L^-1 Psi^T Y),   log|det dT/dphi| = k sum_i (log lambda / 2
    - log L_ii),

so for lambda = sigma^2 the readout's conditional posterior in phi is exactly N(0, I) whatever
the hidden layers: a wide network's posterior in phi is close to its prior. The position a
kernel moves is phi; ``original`` gives theta, which is what runs record. Everything runs in the
target's dtype (float64: Hron et al. 2022, Sec. 4.1.3, saw float32 shift acceptances by 2-5
points).
"""

from __future__ import annotations

import copy
import itertools
import math

import torch
import torch.nn.functional as F
from torch import Tensor

from .base import Batch, ParamError
from .data import DIGITS_TRAIN, Dataset, digits, torch_generator
from .networks import Network, check_data_size, check_dim, network_facts

SIGMA_W, SIGMA_B = math.sqrt(2.0), 0.1  # hidden layers (Hron et al.'s code defaults)
SIGMA_W_OUT, SIGMA_B_OUT = 1.0, 0.1  # the readout: roughly unit prior output variance
PARAMETRISATIONS = ("standard", "reprior")
DATA = ("synthetic", "digits")
SYNTHETIC_TEST = 64  # fixed test points of the synthetic data (the f-ESS projects f(X_test))
ROWS_ELEMENTS = 1 << 22  # Psi entries held at once when mapping many positions


class NTKFCN(Network):
    """Fully connected network in the NTK parametrisation with an N(0, 1) prior on every entry,
    sampled at temperature 1 (nbeta = n / (2 sigma^2): nbeta L is the Gaussian likelihood's
    sum of squared errors / (2 sigma^2)), in theta (``standard``) or phi (``reprior``)."""

    compilable = False  # the repriorised energy's small Cholesky ops gain nothing compiled

    def __init__(
        self,
        width: int,
        depth: int,
        dataset: Dataset,
        sigma: float,
        parametrisation: str = "standard",
        lam: float | None = None,
    ):
        sizes = [dataset.inputs, *[width] * depth]
        layout = {}
        for l in range(depth):
            layout[f"layers.{l}.weight"] = (sizes[l + 1], sizes[l])
            layout[f"layers.{l}.bias"] = (sizes[l + 1],)
        k = dataset.outputs
        layout["readout.weight"] = (k, sizes[-1])
        layout["readout.bias"] = (k,)
        super().__init__("ntk-fcn", layout, dataset)
        self.sizes, self.outputs, self.depth = tuple(sizes), k, depth
        self.sigma, self.parametrisation = sigma, parametrisation
        self.lam = sigma**2 if lam is None else lam
        self.features_dim = sizes[-1] + 1  # D = d_L + 1, the readout's rows with the bias
        self.n_readout = k * self.features_dim
        self.prior_std = 1.0  # the standard parametrisation: base Target's N(0, I) prior
        self.nbeta = self.n / (2 * sigma**2)

    def _data_changed(self) -> None:
        self.nbeta = self.n / (2 * self.sigma**2)  # temperature 1, as built

    # -- the network -----------------------------------------------------------------------
    def features(self, params: dict[str, Tensor], x: Tensor) -> Tensor:
        """Psi: [C, B, D], the scaled top-layer features with the bias column (``embed``)."""
        h = torch.transpose(x, -1, -2)  # [(C,) in, B]: features first, as networks.py does
        fan_in = self.sizes[0]
        for l in range(self.depth):
            weight, bias = params[f"layers.{l}.weight"], params[f"layers.{l}.bias"]
            h = SIGMA_W / math.sqrt(fan_in) * torch.matmul(weight, h) + SIGMA_B * bias[:, :, None]
            h, fan_in = F.gelu(h), self.sizes[l + 1]
        top = SIGMA_W_OUT / math.sqrt(fan_in) * h.transpose(-1, -2)  # [C, B, d_L]
        if top.shape[0] != weight_chains(params):  # inputs shared by every chain: broadcast
            top = top.expand(weight_chains(params), *top.shape[-2:])
        ones = top.new_full((*top.shape[:-1], 1), SIGMA_B_OUT)
        return torch.cat([top, ones], -1)

    def readout(self, params: dict[str, Tensor]) -> Tensor:
        """theta_o: [C, D, k], the readout's weights (transposed) over its bias."""
        return torch.cat(
            [params["readout.weight"].transpose(-1, -2), params["readout.bias"][:, None]], 1
        )

    def forward(self, params: dict[str, Tensor], x: Tensor) -> Tensor:
        return self.features(params, x) @ self.readout(params)

    def embed(self, theta: Tensor, x: Tensor | None = None) -> Tensor:
        """Psi at ``theta`` ([C, d], the model's own parameters) on ``x`` (default: the training
        inputs); ``apply(theta, x)`` is f = Psi theta_o."""
        x = self.x if x is None else x.to(theta)
        return self.features(self.unflatten(theta), x)

    # -- the repriorisation map (feature space, Cholesky form) ------------------------------
    def _split(self, w: Tensor) -> tuple[Tensor, Tensor]:
        """(hidden layers [C, d - kD], readout [C, D, k]) of a flat vector."""
        hidden = w[:, : self.dim - self.n_readout]
        k, d_l = self.outputs, self.features_dim - 1
        weight = w[:, self.dim - self.n_readout : self.dim - k].reshape(-1, k, d_l)
        bias = w[:, self.dim - k :]
        return hidden, torch.cat([weight.transpose(-1, -2), bias[:, None]], 1)

    def _join(self, hidden: Tensor, readout: Tensor) -> Tensor:
        weight = readout[:, :-1].transpose(-1, -2).reshape(len(readout), -1)
        return torch.cat([hidden, weight, readout[:, -1]], 1)

    def _hidden_features(self, hidden: Tensor) -> Tensor:
        """Psi [C, n, D] on the training inputs from the hidden layers alone."""
        zeros = hidden.new_zeros(len(hidden), self.n_readout)
        return self.features(self.unflatten(torch.cat([hidden, zeros], 1)), self.x)

    def _map(self, hidden: Tensor, phi_o: Tensor | None = None, theta_o: Tensor | None = None):
        """The readout map at the hidden layers ``hidden`` (the same in theta and phi), given
        phi_o (forward) or theta_o (inverse): (Psi, phi_o, theta_o, log|det dT/dphi|).

        T is theta_o = F^-T (sqrt(lambda) phi_o + F^-1 Psi^T Y) for a square root F F^T = G =
        Psi^T Psi + lambda I, and log|det| = k (D log(lambda) / 2 - log det F).
        D <= n: F = L, G's Cholesky factor, O(D^3). D > n (a wide layer on few points): with
        the thin QR Psi^T = Q R (Q: D x n) and M = R R^T + lambda I = L L^T (n x n), F = Q L
        Q^T + sqrt(lambda) (I - Q Q^T) squares to G too, since G acts as M on Q's columns and
        as lambda I beside them; then, with a = Q^T phi_o and c = L^-1 R Y, theta_o = phi_o +
        Q (L^-T (sqrt(lambda) a + c) - a): O(D n^2), and log det F = log
        det L + (D - n) log(lambda) / 2. Either F gives phi_o | phi_<=L ~ N(0, I) exactly for
        lambda = sigma^2: they differ by a rotation of phi_o (at width 128, n = 16 a gradient
        of U took 2.3 ms with G's factor, 1.5 ms with this one; the standard one 0.5)."""
        psi = self._hidden_features(hidden)
        psi_t, y, root, k = psi.transpose(-1, -2), self.y.to(psi), math.sqrt(self.lam), self.outputs
        if self.features_dim <= self.n:
            eye = torch.eye(self.features_dim, dtype=psi.dtype, device=psi.device)
            chol = torch.linalg.cholesky(psi_t @ psi + self.lam * eye)
            z = torch.linalg.solve_triangular(chol, psi_t @ y, upper=False)
            upper = chol.transpose(-1, -2)
            if theta_o is None:
                theta_o = torch.linalg.solve_triangular(upper, root * phi_o + z, upper=True)
            else:
                phi_o = (upper @ theta_o - z) / root
            logdet_f = torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
        else:
            q, r = torch.linalg.qr(psi_t)  # [C, D, n], [C, n, n]
            eye = torch.eye(self.n, dtype=psi.dtype, device=psi.device)
            chol = torch.linalg.cholesky(r @ r.transpose(-1, -2) + self.lam * eye)
            c = torch.linalg.solve_triangular(chol, r @ y, upper=False)
            upper = chol.transpose(-1, -2)
            if theta_o is None:
                a = q.transpose(-1, -2) @ phi_o
                inner = torch.linalg.solve_triangular(upper, root * a + c, upper=True)
                theta_o = phi_o + q @ (inner - a)
            else:  # Q^T theta_o = L^-T (sqrt(lambda) a + c): solve for a
                projected = q.transpose(-1, -2) @ theta_o
                a = (upper @ projected - c) / root
                phi_o = theta_o + q @ (a - projected)
            logdet_f = torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
            logdet_f = logdet_f + 0.5 * (self.features_dim - self.n) * math.log(self.lam)
        logdet = k * (0.5 * self.features_dim * math.log(self.lam) - logdet_f)
        return psi, phi_o, theta_o, logdet

    def transform(self, phi: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(theta = T(phi) [C, d], log|det dT/dphi| [C], Psi [C, n, D]) for ``phi`` [C, d]."""
        hidden, phi_o = self._split(phi)
        psi, _, theta_o, logdet = self._map(hidden, phi_o=phi_o)
        return self._join(hidden, theta_o), logdet, psi

    def inverse(self, theta: Tensor) -> Tensor:
        """phi = T^-1(theta): the hidden layers as they are, phi_o solved from theta_o."""
        hidden, theta_o = self._split(theta)
        return self._join(hidden, self._map(hidden, theta_o=theta_o)[1])

    @property
    def reprior(self) -> bool:
        return self.parametrisation == "reprior"

    @property
    def reparametrised(self) -> bool:
        return self.reprior

    def original(self, w: Tensor) -> Tensor:
        """theta at sampling coordinates ``w`` ([..., d]): T(w) under repriorisation, in pieces
        of rows so that Psi stays bounded."""
        if not self.reprior:
            return w
        flat = w.reshape(-1, self.dim)
        rows = max(1, ROWS_ELEMENTS // (self.n * self.features_dim))
        with torch.no_grad():
            parts = [self.transform(flat[s : s + rows])[0] for s in range(0, len(flat), rows)]
        return torch.cat(parts).reshape(w.shape) if parts else w

    def original_target(self) -> NTKFCN:
        if not self.reprior:
            return self
        standard = copy.copy(self)  # the same data and sizes, sampled in theta
        standard.parametrisation = "standard"
        return standard

    def from_original(self, theta: Tensor) -> Tensor:
        if not self.reprior:
            return theta
        with torch.no_grad():
            return self.inverse(theta.reshape(-1, self.dim)).reshape(theta.shape)

    # -- the energy's pieces in the sampled coordinates -------------------------------------
    def _reprior_terms(self, phi: Tensor, batch: Batch) -> tuple[Tensor, Tensor]:
        """(L(T(phi)), prior(phi) = |T(phi)|^2 / 2 - log|det dT/dphi|) [C] each."""
        theta, logdet, psi = self.transform(phi)
        if batch is None:  # the full data: f = Psi theta_o reuses the map's features
            out = psi @ self._split(theta)[1]
            loss = self.criterion(out, self.y)
        else:
            x, y = batch
            loss = self.criterion(self.forward(self.unflatten(theta), x), y)
        prior = 0.5 * (theta * theta).sum(-1) - logdet + 0.5 * self.dim * math.log(2 * math.pi)
        return loss, prior

    def _loss(self, w: Tensor, batch: Batch) -> Tensor:
        if self.reprior:
            return self._reprior_terms(w, batch)[0]
        return super()._loss(w, batch)

    def energy_terms(self, w: Tensor, batch: Batch, nbeta: float, loss_grad: bool = True):
        """Under repriorisation, one pass through the map for the loss and the prior, which
        share T(phi) and its factor: one backward pass for grad U, a second for grad L only
        when the kernel asks for it."""
        if not self.reprior:
            return super().energy_terms(w, batch, nbeta, loss_grad)
        w = self.check_position(w)
        with torch.enable_grad():
            x = w.detach().requires_grad_(True)
            loss, prior = self._reprior_terms(x, batch)
            value = nbeta * loss + prior
            (grad,) = torch.autograd.grad(value.sum(), x, retain_graph=loss_grad)
            grad_loss = torch.autograd.grad(loss.sum(), x)[0] if loss_grad else None
        return loss.detach(), grad_loss, value.detach(), grad

    def prior_energy(self, w: Tensor) -> Tensor:
        """-log q(theta) for theta ~ N(0, I), and in phi its pull-back: -log q(T(phi)) - log|det
        dT/dphi| (the normalising constant kept: U is -log p exactly up to the evidence)."""
        if not self.reprior:
            const = 0.5 * self.dim * math.log(2 * math.pi)
            return 0.5 * (w * w).sum(-1) + const
        return self._reprior_terms(w, None)[1]

    def prior_grad(self, w: Tensor) -> Tensor:
        if not self.reprior:
            return w.clone()
        with torch.enable_grad():
            x = w.detach().requires_grad_(True)
            return torch.autograd.grad(self._reprior_terms(x, None)[1].sum(), x)[0]

    # -- a start: the network's initialisation, phi_0 ~ N(0, I) in both parametrisations ----
    def initial(self, generator: torch.Generator, chains: int) -> Tensor:
        return torch.randn(
            chains, self.dim, generator=generator, device=generator.device, dtype=self.dtype
        )

    # -- the KL diagnostic from prior draws (docs/methods/wide-networks.md) ------------------
    def prior_kl(self, draws: int, generator: torch.Generator) -> dict[str, float]:
        """KL(q || p) of the posterior from the prior q, estimated from ``draws`` prior draws
        of the hidden layers, in phi (``reprior``: the Jensen gap log E_q[Z] - E_q[log Z] of the
        GP marginal likelihood Z = N(Y; 0, K + sigma^2 I) with the empirical NNGP kernel K =
        Psi Psi^T) and in theta (``standard``: that gap plus E_q[KL(N(0, I) || N(mu_j,
        Sigma))] summed over the k outputs). Valid for the theory map, lambda = sigma^2; every
        draw costs an n x n Cholesky factorisation, so any width is cheap."""
        s2, k, n = self.sigma**2, self.outputs, self.n
        hidden_dim = self.dim - self.n_readout
        ell, extra = [], []
        # draws at once: their hidden layers and their features both bounded
        rows = ROWS_ELEMENTS // max(n * max(n, self.features_dim), hidden_dim, 1)
        rows = max(1, rows)
        y = self.y.double()
        for s in range(0, draws, rows):
            m = min(rows, draws - s)
            hidden = torch.randn(m, hidden_dim, generator=generator, dtype=torch.float64)
            params = self.unflatten(
                torch.cat([hidden, hidden.new_zeros(m, self.n_readout)], 1).to(self.dtype)
            )
            psi = self.features(params, self.x).double()
            kernel = psi @ psi.transpose(-1, -2)  # [m, n, n]
            eye = torch.eye(n, dtype=torch.float64)
            chol = torch.linalg.cholesky(kernel + s2 * eye)
            alpha = torch.cholesky_solve(y.expand(m, -1, -1), chol)  # (K + s2 I)^-1 Y
            logdet = 2 * torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
            quad = (y * alpha).sum((-2, -1))
            ell.append(-0.5 * (quad + k * logdet + n * k * math.log(2 * math.pi)))
            # KL(N(0, I) || N(mu_j, Sigma)) per column, in data space: tr Sigma^-1 - D =
            # tr K / s2, mu^T Sigma^-1 mu = y^T K (K + s2 I)^-1 y / s2, log det Sigma^-1 =
            # log det(I + K / s2)
            trace = torch.diagonal(kernel, dim1=-2, dim2=-1).sum(-1)
            mu_term = (y * (kernel @ alpha)).sum((-2, -1)) / s2
            logdet_ratio = logdet - n * math.log(s2)
            extra.append(0.5 * (k * trace / s2 + mu_term - k * logdet_ratio))
        ell_all, extra_all = torch.cat(ell), torch.cat(extra)
        gap = float(torch.logsumexp(ell_all, 0) - math.log(draws) - ell_all.mean())
        return {
            "reprior": gap,
            "standard": gap + float(extra_all.mean()),
            "log_z_std": float(ell_all.std()),
            "draws": draws,
        }


def weight_chains(params: dict[str, Tensor]) -> int:
    return params["readout.bias"].shape[0]


def synthetic(n: int, inputs: int, noise: float, seed: int) -> Dataset:
    """y = sin(u^T x) + noise N(0, 1), x ~ N(0, I_inputs), u = 1 / sqrt(inputs) (so u^T x ~
    N(0, 1)): a smooth 1-D regression; SYNTHETIC_TEST test points from the same law. (With
    sin(2 u^T x) the KL from prior draws fell only 5x from width 8 to 512 at depth 1, 143 -> 27;
    with this one 108 -> 0.6, as the independent check's 289 -> 7.7 in
    docs/methods/wide-networks.md.)"""
    g = torch_generator(seed)
    x = torch.randn(n + SYNTHETIC_TEST, inputs, generator=g, dtype=torch.float64)
    mean = torch.sin(x.sum(1, keepdim=True) / math.sqrt(inputs))
    y = mean + noise * torch.randn(mean.shape, generator=g, dtype=torch.float64)
    return Dataset(x[:n], y[:n], x[n:], y[n:], "regression")


def digits_regression(n: int, seed: int) -> Dataset:
    """sklearn's digits as regression on one-hot labels - 0.1 (targets 0.9 / -0.1, 10 outputs),
    inputs standardised by the training images' global mean and standard deviation."""
    images = digits(n, seed)
    mean, std = float(images.x.mean()), float(images.x.std())

    def onehot(labels: Tensor) -> Tensor:
        return F.one_hot(labels, 10).double() - 0.1

    return Dataset(
        (images.x - mean) / std,
        onehot(images.y),
        (images.x_test - mean) / std,
        onehot(images.y_test),
        "regression",
    )


def _sizes(data: str, width: int, depth: int, inputs: int, n: int) -> tuple[int, int, int]:
    """(d0, k, n_test) of the data choice; refuses what does not fit."""
    if data == "digits":
        if not 1 <= n <= DIGITS_TRAIN:
            raise ParamError(
                "ntk-fcn.n", f"must be in [1, {DIGITS_TRAIN}] for the digits data, got {n}"
            )
        return 64, 10, 360
    return inputs, 1, SYNTHETIC_TEST


def ntk_facts(
    width: int,
    depth: int,
    n: int,
    parametrisation: str,
    data: str,
    inputs: int,
    sigma: float,
    lam: float | None,
    seed: int,
) -> dict:
    d0, k, tests = _sizes(data, width, depth, inputs, n)
    sizes = [d0, *[width] * depth, k]
    dim = sum((a + 1) * b for a, b in itertools.pairwise(sizes))
    check_dim("ntk-fcn", "width", dim)
    check_data_size("ntk-fcn", n, d0 + k)
    return network_facts(dim, n, tests, sizes, truth=False, nbeta=n / (2 * sigma**2), n_val=0)


def make_ntk_fcn(
    width: int,
    depth: int,
    n: int,
    parametrisation: str,
    data: str,
    inputs: int,
    sigma: float,
    lam: float | None,
    seed: int,
) -> NTKFCN:
    ntk_facts(width, depth, n, parametrisation, data, inputs, sigma, lam, seed)
    dataset = digits_regression(n, seed) if data == "digits" else synthetic(n, inputs, sigma, seed)
    return NTKFCN(width, depth, dataset, sigma, parametrisation, lam)
