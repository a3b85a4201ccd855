"""Network targets: batching against a per-chain loop, forward passes against plain single-chain
implementations written here (and torch.nn), autograd against central finite differences,
seeded reproducibility of every dataset, and the DLN task generator (Hitchcock & Hoogland, App. D.1)
against closed-form statistics.

Statistical checks use fixed seeds and a 4-standard-error band computed from the Monte Carlo
error of the statistic (a false alarm has probability ~6e-5 per check for a correct generator;
with fixed seeds the outcome is deterministic anyway)."""

import copy
import functools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import landscapes
from landscapes import dln
from landscapes.data import DATASETS
from landscapes.truths import dln_llc

ACTIVATION_CHOICES = landscapes.REGISTRY["mlp"].param("activation").choices

NETWORKS = {  # test key -> (registry name, parameters); small sizes keep the file fast
    "dln": ("dln", {"widths": (3, 4, 2), "n": 300, "seed": 1}),
    "dln-tiny": ("dln", {"size_class": "tiny", "n": 200, "seed": 2}),
    "rrr": ("rrr", {"inputs": 4, "hidden": 3, "outputs": 2, "rank": 1, "n": 300, "seed": 3}),
    "polynomial": ("polynomial", {"powers": (1, 2, 0), "n": 300, "seed": 4}),
    "tanh": ("tanh", {"hidden": 3, "n": 300, "seed": 5}),
    **{
        f"mlp-{ds}": ("mlp", {"dataset": ds, "hidden_sizes": (5, 4), "n": 200, "seed": 6})
        for ds in DATASETS
    },
    **{
        f"mlp-moons-{act}": (
            "mlp",
            {"dataset": "moons", "hidden_sizes": (5,), "activation": act, "n": 200, "seed": 7},
        )
        for act in ACTIVATION_CHOICES
    },
    **{f"slp-{ds}": ("slp", {"dataset": ds, "n": 200, "seed": 8}) for ds in DATASETS},
    "ntk-fcn": ("ntk-fcn", {"width": 5, "depth": 2, "n": 40, "seed": 10}),
    "ntk-fcn-digits": ("ntk-fcn", {"width": 6, "data": "digits", "n": 50, "seed": 11}),
    # positions are phi: the loss is L(T(phi)), T reading every training point
    "ntk-fcn-reprior": ("ntk-fcn", {"width": 5, "n": 12, "parametrisation": "reprior"}),
    # a horseshoe's scales follow the layers in the flat vector; the loss reads the layers alone
    "mlp-digits-horseshoe": (
        "mlp",
        {"dataset": "digits", "hidden_sizes": (5,), "n": 200, "seed": 9, "prior": "horseshoe"},
    ),
    # a user's torch module (tests/model_factories.py): every test here carries over to it
    **{
        f"model-{name}": ("model", {"factory": f"tests/model_factories.py:{name}"})
        for name in ("small_classifier", "small_regression", "callable_loss", "batchnorm_dropout")
    },
}

ACTIVATION_MODULES = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "gelu": nn.GELU}


def build(key: str, dtype: str = "float64", **override):
    name, params = NETWORKS[key]
    return landscapes.make(name, device="cpu", dtype=dtype, **{**params, **override})


@functools.cache
def cached(key: str):
    return build(key)


def positions(target, chains: int = 4, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    scale = 0.5 if target.name in ("dln", "rrr", "mlp", "slp") else 1.0
    return scale * torch.randn(chains, target.dim, generator=g, dtype=torch.float64)


def minibatch(target):
    return target.sample_batch(torch.Generator().manual_seed(1), 16)


# ---------------------------------------------------------------------------------------------
# Plain single-chain implementations (w: Tensor[d]), independent of target.forward/criterion.


def split(target, w: torch.Tensor) -> list[torch.Tensor]:
    """The flat vector cut into the layout's tensors, in layout order."""
    parts, i = [], 0
    for shape in target.layout.values():
        size = math.prod(shape)
        parts.append(w[i : i + size].reshape(shape))
        i += size
    assert i == w.numel() == target.dim
    return parts


def linear_product(target, w: torch.Tensor) -> torch.Tensor:
    """W_M ... W_1 for a deep linear network (rrr: B A)."""
    mats = split(target, w)
    product = torch.eye(mats[0].shape[1], dtype=w.dtype)
    for m in mats:
        product = m @ product
    return product


def sequential(target, w: torch.Tensor) -> nn.Sequential:
    """torch.nn.Sequential of Linear layers whose parameters are loaded in layout order."""
    params = target.params
    outputs = target.classes if target.task == "classification" else target.y.shape[1]
    sizes = [target.x.shape[1], *params.get("hidden_sizes", ()), outputs]
    act = ACTIVATION_MODULES[params.get("activation", "relu")]
    modules = []
    for l in range(len(sizes) - 1):
        modules.append(nn.Linear(sizes[l], sizes[l + 1]))
        if l + 2 < len(sizes):
            modules.append(act())
    model = nn.Sequential(*modules).double()
    # the layers' tensors: a horseshoe's scales ("prior.<tensor>") are no part of the model
    parts = zip(target.layout, split(target, w), strict=True)
    flat = iter(p for k, p in parts if not k.startswith("prior."))
    with torch.no_grad():
        for module in model:
            if isinstance(module, nn.Linear):
                module.weight.copy_(next(flat))
                module.bias.copy_(next(flat))
    assert next(flat, None) is None
    return model


def reference_loss(target, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> float:
    name = target.name
    if name in ("dln", "rrr"):
        y_hat = x @ linear_product(target, w).T
        return float(((y - y_hat) ** 2).sum(1).mean())
    if name == "polynomial":
        coef = 1.0
        for wi, p in zip(w.tolist(), target.params["powers"], strict=True):
            coef *= wi**p
        return float(((y[:, 0] - coef * x[:, 0]) ** 2).mean())
    if name == "tanh":
        a, b = split(target, w)
        y_hat = sum(b[h] * torch.tanh(a[h] * x[:, 0]) for h in range(a.numel()))
        return float(((y[:, 0] - y_hat) ** 2).mean())
    if name == "ntk-fcn":
        y_hat = ntk_reference(target, w, x)
        return float(((y - y_hat) ** 2).sum(1).mean())
    if name == "model":  # the user's module itself, in eval mode, with w's weights
        net = copy.deepcopy(target.module).eval()
        torch.nn.utils.vector_to_parameters(w, net.parameters())
        with torch.no_grad():
            out = net(x)
        if callable(target.loss_fn):
            return float(target.loss_fn(out, y))
        if target.loss_fn == "mse":
            return float(F.mse_loss(out, y))
        return float(F.cross_entropy(out, y))
    assert name in ("mlp", "slp")
    with torch.no_grad():
        out = sequential(target, w)(x)
    if target.task == "classification":
        return float(F.cross_entropy(out, y))
    return float(((out - y) ** 2).sum(1).mean())


def ntk_reference(target, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """f(x) of the NTK-parametrised FCN, point by point in numpy; under repriorisation at
    theta = T(w), the readout L^-T (sqrt(lambda) w_o + L^-1 Psi^T Y) from G = Psi^T Psi + lambda
    I = L L^T (the test networks have d_L + 1 <= n, where Basin factors G too)."""
    gelu = np.vectorize(lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))))
    params, at = {}, 0
    for key, shape in target.layout.items():
        size = math.prod(shape)
        params[key] = w[at : at + size].numpy().reshape(shape)
        at += size

    def features(points: np.ndarray) -> np.ndarray:
        rows = []
        for point in points:
            h = point
            for l in range(target.depth):
                weight, bias = params[f"layers.{l}.weight"], params[f"layers.{l}.bias"]
                h = gelu(math.sqrt(2) * weight @ h / math.sqrt(len(h)) + 0.1 * bias)
            rows.append(np.append(h / math.sqrt(len(h)), 0.1))
        return np.array(rows)

    readout = np.vstack([params["readout.weight"].T, params["readout.bias"][None]])
    if target.parametrisation == "reprior":
        psi, lam = features(target.x.numpy()), target.lam
        chol = np.linalg.cholesky(psi.T @ psi + lam * np.eye(psi.shape[1]))
        z = np.linalg.solve(chol, psi.T @ target.y.numpy())
        readout = np.linalg.solve(chol.T, math.sqrt(lam) * readout + z)
    return torch.from_numpy(features(x.numpy()) @ readout)


# ---------------------------------------------------------------------------------------------
# Coverage, batching, forward and gradients.


def test_every_network_target_dataset_and_activation_is_covered():
    names = {k for k, spec in landscapes.REGISTRY.items() if spec.kind == "network"}
    assert names == {name for name, _ in NETWORKS.values()}
    for kind in ("mlp", "slp"):
        assert {p["dataset"] for n, p in NETWORKS.values() if n == kind} == set(DATASETS)
    assert {p.get("activation") for n, p in NETWORKS.values() if n == "mlp"} >= set(
        ACTIVATION_CHOICES
    )


@pytest.mark.parametrize("key", sorted(NETWORKS))
@pytest.mark.parametrize("batched", ["full", "minibatch", "per-chain"])
def test_batched_equals_per_chain_loop(key, batched):
    """All chains at once equal one chain at a time: on the full data, on a shared minibatch,
    and on a minibatch per chain (what samplers draw), chain c then seeing only its own."""
    target = cached(key)
    w = positions(target)
    index = torch.randint(target.n, (4, 16), generator=torch.Generator().manual_seed(2))
    batch = {"full": None, "minibatch": minibatch(target), "per-chain": target.batch(index)}
    loss, grad = target.loss(w, batch[batched]), target.grad(w, batch[batched])
    assert loss.shape == (4,) and grad.shape == (4, target.dim)
    for c in range(w.shape[0]):
        own = target.batch(index[c]) if batched == "per-chain" else batch[batched]
        torch.testing.assert_close(
            loss[c : c + 1], target.loss(w[c : c + 1], own), rtol=1e-10, atol=1e-12
        )
        torch.testing.assert_close(
            grad[c : c + 1], target.grad(w[c : c + 1], own), rtol=1e-10, atol=1e-12
        )


@pytest.mark.parametrize("key", ["dln", "mlp-digits", "mlp-moons", "slp-two-clusters"])
def test_minibatch_is_pairs_of_training_points(key):
    target = cached(key)
    x, y = minibatch(target)
    assert x.shape == (16, target.x.shape[1]) and y.shape == (16, *target.y.shape[1:])
    again = minibatch(target)
    assert torch.equal(x, again[0]) and torch.equal(y, again[1])  # a function of the generator
    for xb, yb in zip(x, y, strict=True):
        rows = (target.x == xb).all(1).nonzero()[:, 0]
        assert len(rows) >= 1 and any(torch.equal(target.y[i], yb) for i in rows)


@pytest.mark.parametrize("key", sorted(NETWORKS))
def test_forward_equals_plain_implementation(key):
    target = cached(key)
    w = positions(target)
    x, y = minibatch(target)
    cases = [
        (target.loss(w), target.x, target.y),
        (target.test_loss(w), target.x_test, target.y_test),
        (target.loss(w, (x, y)), x, y),
    ]
    if not len(target.x_test):  # a user's model brings training data only
        del cases[1]
    for values, xs, ys in cases:
        assert values.shape == (w.shape[0],)
        expected = [reference_loss(target, w[c], xs, ys) for c in range(w.shape[0])]
        torch.testing.assert_close(
            values, torch.tensor(expected, dtype=torch.float64), rtol=1e-10, atol=1e-12
        )


@pytest.mark.parametrize("key", sorted(NETWORKS))
def test_gradient_equals_central_finite_differences(key):
    target = cached(key)
    w = positions(target, chains=2, seed=11)
    grad = target.grad(w)
    g = torch.Generator().manual_seed(12)
    coords = range(target.dim) if target.dim <= 40 else torch.randperm(target.dim, generator=g)[:12]
    h = 1e-6
    for c in range(w.shape[0]):
        scale = 1.0 + abs(float(target.loss(w[c : c + 1])))
        for i in coords:
            e = torch.zeros_like(w[c : c + 1])
            e[0, int(i)] = h
            fd = float(target.loss(w[c : c + 1] + e) - target.loss(w[c : c + 1] - e)) / (2 * h)
            # Central differences: truncation ~h^2 |L'''| ~1e-12 scale, round-off ~eps |L| / h
            # ~2e-10 |L|; 1e-6 (relative to 1 + |L|) leaves ample room for both.
            assert abs(float(grad[c, int(i)]) - fd) <= 1e-6 * scale + 1e-6 * abs(fd), (c, int(i))


# ---------------------------------------------------------------------------------------------
# Reproducibility.

SEEDED = [
    "dln",
    "dln-tiny",
    "rrr",
    "polynomial",
    "tanh",
    "mlp-digits",
    "mlp-moons",
    "mlp-two-clusters",
    "slp-two-clusters",
]


def same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and bool(torch.equal(a, b))


@pytest.mark.parametrize("key", SEEDED)
def test_dataset_is_a_function_of_its_seed(key):
    seed = NETWORKS[key][1]["seed"]
    first, again, other = build(key), build(key), build(key, seed=seed + 10)
    for attr in ("x", "y", "x_test", "y_test", "w0"):
        assert same(getattr(first, attr), getattr(again, attr)), attr
    for attr in ("x", "y", "x_test", "y_test"):
        assert not same(getattr(first, attr), getattr(other, attr)), attr
    if key in ("dln", "dln-tiny", "rrr"):  # the truth itself is drawn from the seed
        assert not same(first.w0, other.w0)


@pytest.mark.parametrize("name", ["dln", "rrr"])
def test_neighbouring_seeds_use_independent_streams(name):
    # Regression test: task s once drew its data from torch_generator(s + 1), the generator task
    # s + 1 draws its truth from; with >= 16 entries torch's randn is a deterministic function of
    # the same uniforms, so task s+1's first layer was a transform of task s's training inputs.
    if name == "dln":
        params = {"widths": (16, 16), "rank": 16}
    else:
        params = {"inputs": 8, "hidden": 8, "outputs": 4}
    a = landscapes.make(name, device="cpu", dtype="float64", n=64, seed=0, **params)
    b = landscapes.make(name, device="cpu", dtype="float64", n=64, seed=1, **params)
    first_layer = b.w0[:16] / b.w0[:16].std()
    if name == "dln":  # U[-10, 10] inputs -> the Box-Muller normals torch derives from them
        u = (a.x.reshape(-1)[:16] + 10) / 20
        r, theta = torch.sqrt(-2 * torch.log1p(-u[:8])), 2 * math.pi * u[8:]
        inputs = torch.cat([r * torch.cos(theta), r * torch.sin(theta)])
    else:
        inputs = a.x.reshape(-1)[:16]
    assert not torch.allclose(first_layer, inputs / inputs.std(), rtol=1e-8, atol=1e-8)


# ---------------------------------------------------------------------------------------------
# The DLN generator (App. D.1).


@pytest.mark.parametrize("widths", [(200, 300), (200, 300, 50)])
def test_xavier_variance(widths):
    layers = dln.xavier_layers(widths, torch.Generator().manual_seed(0))
    assert len(layers) == len(widths) - 1
    for l, weight in enumerate(layers):
        assert weight.shape == (widths[l + 1], widths[l]) and weight.dtype == torch.float64
        n = weight.numel()
        var = 2.0 / (widths[l] + widths[l + 1])
        # Gaussian entries: SE of the mean is sqrt(var / N); the sample variance is var * chi2_N
        # / N, relative SE sqrt(2 / N) (about 0.6% for 60000 entries, 1.2% for 15000).
        assert abs(float(weight.mean())) < 4 * math.sqrt(var / n)
        assert abs(float(weight.var()) / var - 1) < 4 * math.sqrt(2 / n)


def test_reduce_rank_zeroes_rows_or_columns():
    orientations = set()
    for seed in range(6):
        g = torch.Generator().manual_seed(seed)
        weight = torch.randn(6, 8, generator=g, dtype=torch.float64)
        original = weight.clone()
        for keep in range(7):
            out = dln.reduce_rank(weight, keep, g)
            assert torch.equal(weight, original)  # the input is not modified
            zero_rows = int((out == 0).all(1).sum())
            zero_cols = int((out == 0).all(0).sum())
            if keep > 0:
                assert (zero_rows, zero_cols) in ((6 - keep, 0), (0, 8 - keep))
            kept = out != 0
            assert torch.equal(out[kept], original[kept])
            assert int(torch.linalg.matrix_rank(out)) == keep
            if 0 < keep < 6:
                orientations.add(zero_rows > 0)
    # The orientation is a fair coin; over 30 reductions both occur (P(not) = 2^-29).
    assert orientations == {True, False}


def test_tiny_size_class_depths_and_widths():
    g = torch.Generator().manual_seed(0)
    depths, all_widths = [], []
    for _ in range(300):
        widths, layers = dln.dln_truth(None, None, "tiny", g)
        depths.append(len(widths) - 1)
        all_widths += widths
        assert [tuple(t.shape) for t in layers] == [
            (widths[l + 1], widths[l]) for l in range(len(widths) - 1)
        ]
    # Inclusive ranges, and every value is drawn: P(a depth never appears in 300 draws)
    # = (2/3)^300 and P(a width never appears in ~1000 draws) = (7/8)^1000, both negligible.
    assert set(depths) == {2, 3, 4}
    assert set(all_widths) == set(range(3, 11))
    # Uniform depth: each count is Binomial(300, 1/3), SE sqrt(300 * 2/9) ~ 8.2.
    for m in (2, 3, 4):
        assert abs(depths.count(m) - 100) < 4 * math.sqrt(300 * 2 / 9)
    for seed in range(3):
        target = landscapes.make("dln", device="cpu", dtype="float64", n=10, seed=seed)
        assert 2 <= len(target.widths) - 1 <= 4 and all(3 <= h <= 10 for h in target.widths)

        assert list(target.layout.values()) == [
            (target.widths[l + 1], target.widths[l]) for l in range(len(target.widths) - 1)
        ]


def test_small_size_class_ranges():
    # small: M in [2, 5], H in [5, 20] (docs/methods/local-sampling.md), inclusive, all drawn.
    g = torch.Generator().manual_seed(1)
    draws = [dln.dln_truth(None, None, "small", g)[0] for _ in range(400)]
    assert {len(w) - 1 for w in draws} == {2, 3, 4, 5}
    assert {h for w in draws for h in w} == set(range(5, 21))


def test_rank_reduction_happens_with_probability_one_half():
    g = torch.Generator().manual_seed(1)
    p_sum = p_var = deficient = 0.0
    ratio_sum = ratio_mean = ratio_var = 0.0
    layers_seen = 0
    while layers_seen < 3000:
        _, layers = dln.dln_truth(None, None, "tiny", g)
        for weight in layers:
            m = min(weight.shape)
            rank = int(torch.linalg.matrix_rank(weight))
            # Rank implied by construction: zeroed rows or columns, otherwise full rank.
            nonzero_rows = int((weight != 0).any(1).sum())
            nonzero_cols = int((weight != 0).any(0).sum())
            assert rank == min(nonzero_rows, nonzero_cols)
            # Given the widths, a layer is reduced w.p. 1/2 to r ~ U{0..m}, which is below m
            # w.p. m / (m + 1): P(deficient) = m / (2 (m + 1)), independently across layers.
            p = m / (2 * (m + 1))
            p_sum, p_var = p_sum + p, p_var + p * (1 - p)
            deficient += rank < m
            # rank / m is 1 w.p. 1/2, else r / m with E = 1/2 and E[(r/m)^2] = (2m+1) / (6m):
            # mean 3/4 for every m, variance 1/2 + (2m+1)/(12m) - 9/16.
            ratio_sum += rank / m
            ratio_mean += 0.75
            ratio_var += 0.5 + (2 * m + 1) / (12 * m) - 0.5625
            layers_seen += 1
    # A sum of independent Bernoullis: 4 standard errors (about 0.03 in the fraction of 3000).
    assert abs(deficient - p_sum) < 4 * math.sqrt(p_var)
    assert abs(ratio_sum - ratio_mean) < 4 * math.sqrt(ratio_var)


@pytest.mark.parametrize(
    ("widths", "rank"),
    [((5, 4, 6, 3), r) for r in range(4)] + [((3, 4, 2), 2), ((7, 3), 1), ((4, 6, 6, 5, 4), 3)],
)
def test_given_rank_is_the_rank_of_the_product(widths, rank):
    target = landscapes.make("dln", device="cpu", dtype="float64", widths=widths, rank=rank, n=10)
    product = linear_product(target, target.w0)
    assert product.shape == (widths[-1], widths[0])
    assert int(torch.linalg.matrix_rank(product)) == rank
    assert target.rank == rank
    assert target.true_llc == dln_llc(widths, rank)


@pytest.mark.parametrize("seed", range(8))
def test_drawn_task_rank_and_llc(seed):
    target = landscapes.make("dln", device="cpu", dtype="float64", n=10, seed=seed)
    rank = int(torch.linalg.matrix_rank(linear_product(target, target.w0)))
    assert target.rank == rank
    assert target.true_llc == dln_llc(target.widths, rank)


def test_dln_inputs_and_noise():
    n = 20_000
    target = landscapes.make("dln", device="cpu", dtype="float64", widths=(3, 4, 2), n=n, seed=5)
    x = torch.cat([target.x, target.x_test])
    y = torch.cat([target.y, target.y_test])
    assert target.x.shape == (n, 3) and target.x_test.shape == (n // 4, 3)
    assert x.min() >= -10 and x.max() <= 10
    # 75000 uniform draws fill the range: P(min > -9.99) = (1 - 5e-4)^75000 ~ e^-37.
    assert x.min() < -9.99 and x.max() > 9.99
    count = x.numel()
    # U[-10, 10]: mean 0, variance 100/3; Var(X^2) = E X^4 - (E X^2)^2 = 2000 - 10000/9.
    assert abs(float(x.mean())) < 4 * math.sqrt(100 / 3 / count)
    assert abs(float(x.var()) - 100 / 3) < 4 * math.sqrt((2000 - 10000 / 9) / count)
    residual = y - x @ linear_product(target, target.w0).T
    count = residual.numel()
    # Gaussian noise with sd 1/2: mean SE 0.5 / sqrt(N); the variance 1/4 has relative SE
    # sqrt(2 / N); the residual is uncorrelated with each input (correlation SE 1 / sqrt(rows)).
    assert abs(float(residual.mean())) < 4 * 0.5 / math.sqrt(count)
    assert abs(float(residual.var()) / 0.25 - 1) < 4 * math.sqrt(2 / count)
    corr = torch.corrcoef(torch.cat([x, residual], 1).T)[:3, 3:]
    assert corr.abs().max() < 4 / math.sqrt(x.shape[0])
    # At the truth, L_n = mean of the sum over 2 outputs of noise^2: E = 2/4, sd = 0.5 / sqrt(n).
    loss = float(target.loss(target.w0[None]))
    assert abs(loss - 0.5) < 4 * 0.5 / math.sqrt(n)


# ---------------------------------------------------------------------------------------------
# Criteria, dtypes and the test loss.


def test_classification_criterion_is_mean_cross_entropy():
    target = cached("mlp-moons")
    g = torch.Generator().manual_seed(3)
    out = 3 * torch.randn(5, 40, 2, generator=g, dtype=torch.float64)
    y = torch.randint(2, (40,), generator=g)
    expected = torch.stack([F.cross_entropy(out[c], y) for c in range(5)])
    torch.testing.assert_close(target.criterion(out, y), expected, rtol=1e-12, atol=1e-12)
    digits = cached("mlp-digits")
    out = 3 * torch.randn(3, 50, 10, generator=g, dtype=torch.float64)
    y = torch.randint(10, (50,), generator=g)
    expected = torch.stack([F.cross_entropy(out[c], y) for c in range(3)])
    torch.testing.assert_close(digits.criterion(out, y), expected, rtol=1e-12, atol=1e-12)


def test_regression_criterion_sums_outputs_and_averages_samples():
    target = cached("rrr")
    assert target.y.shape[1] == 2
    g = torch.Generator().manual_seed(4)
    out = torch.randn(3, 30, 2, generator=g, dtype=torch.float64)
    y = torch.randn(30, 2, generator=g, dtype=torch.float64)
    # mse_loss averages over outputs too, so the summed-over-outputs loss is outputs x mse.
    expected = torch.stack([2 * F.mse_loss(out[c], y) for c in range(3)])
    torch.testing.assert_close(target.criterion(out, y), expected, rtol=1e-12, atol=1e-12)
    w = positions(target)
    pred = target.predict(w, target.x)
    expected = torch.stack([2 * F.mse_loss(pred[c], target.y) for c in range(w.shape[0])])
    torch.testing.assert_close(target.loss(w), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("key", ["mlp-digits", "rrr"])
def test_each_points_loss_is_its_cross_entropy_or_squared_error(key):
    target = cached(key)
    w = positions(target, chains=3)
    pred = target.predict(w, target.x)  # [C, n, out]
    if target.task == "classification":
        y = target.y.reshape(-1)
        want = torch.stack([F.cross_entropy(p, y, reduction="none") for p in pred])
    else:
        want = ((pred - target.y) ** 2).sum(-1)
    got = target.sample_losses(w, chunk=77)  # chunks that do not divide n
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got.mean(1), target.loss(w), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("key", sorted(NETWORKS))
def test_float32_matches_float64(key):
    t64, t32 = cached(key), build(key, dtype="float32")
    w = positions(t64)
    w32 = w.float()
    loss32, grad32 = t32.loss_and_grad(w32)
    test32 = t32.test_loss(w32)
    assert loss32.dtype == grad32.dtype == test32.dtype == torch.float32
    assert grad32.shape == (4, t32.dim) and test32.shape == (4,)
    # Single precision: ~1e-7 relative rounding, accumulated over a few hundred terms.
    torch.testing.assert_close(loss32.double(), t64.loss(w), rtol=1e-4, atol=1e-6)
    if len(t64.x_test):  # a user's model brings no test set
        torch.testing.assert_close(test32.double(), t64.test_loss(w), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("key", sorted(NETWORKS))
def test_test_loss_shape(key):
    target = cached(key)
    if not len(target.x_test):
        pytest.skip("a user's model brings training data only: no test set")
    for chains in (1, 3):
        values = target.test_loss(positions(target, chains=chains))
        assert values.shape == (chains,) and values.dtype == torch.float64
        assert torch.isfinite(values).all()


# ---------------------------------------------------------------------------------------------
# Bayesian priors on the MLP (Yu et al. Sec. 4.3) and the digits' validation split.

PRIOR_PARAMS = {"dataset": "digits", "hidden_sizes": (6, 5), "n": 300, "seed": 3}


def prior_target(prior: str):
    return landscapes.make("mlp", device="cpu", dtype="float64", prior=prior, **PRIOR_PARAMS)


def random_prior_point(target, chains: int = 3, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return 0.4 * torch.randn(chains, target.dim, generator=g, dtype=torch.float64)


def layer_sigmas(target) -> list[float]:
    """sigma_w = 1.41 / sqrt(fan_in) (fan_in: a weight's columns), sigma_b = 1: from the
    layout's shapes, as Yu et al.'s code scales them."""
    return [1.41 / math.sqrt(s[1]) if len(s) == 2 else 1.0 for s in target.layout.values()]


def direct_log_prior(target, w: torch.Tensor) -> torch.Tensor:
    """log p(theta) (gaussian) or log p(theta, p) (horseshoe) of each chain, from
    torch.distributions: N(0, sigma^2 lambda^2) per tensor, lambda = softplus(p) ~
    HalfCauchy(0, 1), and the change of variables' log dlambda/dp = log sigmoid(p)."""
    layers = [k for k in target.layout if not k.startswith("prior.")]
    out = []
    for c in range(w.shape[0]):
        parts = dict(zip(target.layout, split(target, w[c]), strict=True))
        total = torch.zeros((), dtype=torch.float64)
        for name, sigma in zip(layers, layer_sigmas(target), strict=False):
            scale = torch.tensor(sigma, dtype=torch.float64)
            if target.prior == "horseshoe":
                p = parts[f"prior.{name}"][0]
                lam = F.softplus(p)
                scale = scale * lam
                one = torch.tensor(1.0, dtype=torch.float64)  # a float scale casts lam to float32
                total = total + torch.distributions.HalfCauchy(one).log_prob(lam)
                total = total + torch.log(torch.sigmoid(p))
            total = total + torch.distributions.Normal(0.0, scale).log_prob(parts[name]).sum()
        out.append(total)
    return torch.stack(out)


@pytest.mark.parametrize("prior", ["gaussian", "horseshoe"])
def test_prior_energy_is_minus_the_log_prior_and_its_gradient_is_autograds(prior):
    target = prior_target(prior)
    assert target.has_prior and target.nbeta == target.n  # temperature 1: U = -log p(X, theta)
    w = random_prior_point(target)
    if prior == "horseshoe":  # the scales' entries lead to lambda in about (0.2, 2)
        w[:, target.layers_dim :] = torch.randn(3, target.dim - target.layers_dim).double()
    energy = target.prior_energy(w)
    torch.testing.assert_close(energy, -direct_log_prior(target, w), rtol=1e-12, atol=1e-10)
    x = w.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(target.prior_energy(x).sum(), x)
    torch.testing.assert_close(target.prior_grad(w), auto, rtol=1e-10, atol=1e-10)
    # the loss (the likelihood's part) never reads a horseshoe's scales
    grad = target.grad(w)
    assert torch.equal(grad[:, target.layers_dim :], torch.zeros_like(grad[:, target.layers_dim :]))


def test_horseshoe_scales_follow_every_layer_tensor():
    target = prior_target("horseshoe")
    names = list(target.layout)
    layers = [k for k in names if not k.startswith("prior.")]
    assert names == layers + [f"prior.{k}" for k in layers]  # weights AND biases, at the end
    assert all(target.layout[f"prior.{k}"] == (1,) for k in layers)
    assert target.dim == prior_target("gaussian").dim + len(layers)
    # the first layer still leads the flat vector: the plane's loss equals a pass per point
    g = torch.Generator().manual_seed(4)
    theta = random_prior_point(target, 1)[0]
    vectors = torch.randn(2, target.dim, generator=g, dtype=torch.float64) * 0.1
    a = torch.tensor([-1.0, 0.0, 1.0], dtype=torch.float64)
    b = torch.tensor([0.5, 0.0, -0.5], dtype=torch.float64)
    points = theta + a[:, None] * vectors[0] + b[:, None] * vectors[1]
    torch.testing.assert_close(target.plane_loss(theta, vectors, a, b, 2), target.full_loss(points))


@pytest.mark.parametrize("prior", ["gaussian", "horseshoe"])
def test_he_initialisation_moments(prior):
    target = landscapes.make(
        "mlp", device="cpu", dtype="float64", prior=prior, dataset="digits", hidden_sizes=(32,)
    )
    w = target.initial(torch.Generator().manual_seed(5), 200)
    start = 0
    for name, shape in target.layout.items():
        x = w[:, start : start + math.prod(shape)].reshape(-1)  # the tensor's entries, all chains
        start += math.prod(shape)
        if name.startswith("prior."):  # lambda = softplus(p) = 1
            torch.testing.assert_close(F.softplus(x), torch.ones_like(x), rtol=1e-15, atol=0)
        elif len(shape) == 1:
            assert torch.equal(x, torch.zeros_like(x))  # biases 0
        else:  # N(0, 2 / fan_in): mean and variance within 4 standard errors
            var, m = 2.0 / shape[1], x.numel()
            assert abs(float(x.mean())) < 4 * math.sqrt(var / m), name
            assert abs(float(x.var()) - var) < 4 * var * math.sqrt(2 / (m - 1)), name


def test_no_prior_is_todays_target():
    target = prior_target("none")
    assert not target.has_prior and target.nbeta == pytest.approx(300 / math.log(300))
    w = random_prior_point(target)
    assert torch.equal(target.prior_energy(w), torch.zeros(3, dtype=torch.float64))
    assert torch.equal(target.prior_grad(w), torch.zeros_like(w))
    # torch.nn.Linear's default start, U(-1/sqrt(fan_in), 1/sqrt(fan_in)), layer by layer
    g = torch.Generator().manual_seed(6)
    start = target.initial(g, 2)
    g.manual_seed(6)
    parts = []
    for fan_in, fan_out in ((64, 6), (6, 5), (5, 10)):
        u = torch.rand(2, (fan_in + 1) * fan_out, generator=g, dtype=torch.float64)
        parts.append((2 * u - 1) / math.sqrt(fan_in))
    assert torch.equal(start, torch.cat(parts, 1))


def sorted_rows(a: np.ndarray) -> np.ndarray:
    return a[np.lexsort(a.T[::-1])]


def test_digits_validation_split_partitions_the_images():
    from sklearn.datasets import load_digits

    target = landscapes.make("mlp", device="cpu", dtype="float64", dataset="digits", n=1077)
    assert (len(target.y), len(target.y_val), len(target.y_test)) == (1077, 360, 360)
    sets = [(target.x, target.y), (target.x_val, target.y_val), (target.x_test, target.y_test)]
    rows = torch.cat([torch.cat([x, y[:, None].double()], 1) for x, y in sets]).numpy()
    x, y = load_digits(return_X_y=True)
    every = torch.cat([torch.as_tensor(x / 16.0), torch.as_tensor(y)[:, None].double()], 1)
    # the three sets together are the 1797 images, each once: equal as sorted multisets of rows
    np.testing.assert_array_equal(sorted_rows(rows), sorted_rows(every.numpy()))
    whole = landscapes.make("mlp", device="cpu", dtype="float64", dataset="digits")
    assert len(whole.y_val) == 0 and whole.x_val.shape == (0, 64)  # today's split, unchanged
    assert torch.equal(whole.x_test, target.x_test)  # the test set does not depend on n
    assert torch.equal(whole.x[:1077], target.x) and torch.equal(whole.x[1077:], target.x_val)
