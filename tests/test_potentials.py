"""Potentials: energies against torch.distributions, analytic gradients against autograd,
batching against a per-chain loop, and exact samplers against closed-form moments and the
normalised density integrated over a grid (which checks the sampler and the density at once)."""

import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats
from torch import distributions as D

import landscapes
from landscapes.base import Target

POTENTIALS = {  # test key -> (registry name, parameters)
    "gaussian": ("gaussian", {"dim": 3, "scales": (0.5, 1.0, 2.0), "rotate": True, "seed": 3}),
    "gaussian-conditioned": ("gaussian", {"dim": 4, "condition": 100.0, "rotate": True}),
    "banana": ("banana", {}),
    "donut": ("donut", {}),
    "mixture": ("mixture", {}),
    "squiggle": ("squiggle", {}),
    "funnel": ("funnel", {"dim": 5}),
    "funnel-2d": ("funnel", {"dim": 2}),
    "softplus-funnel": ("softplus-funnel", {}),
    "softplus-funnel-4d": ("softplus-funnel", {"dim": 4}),
    "normal-crossing": ("normal-crossing", {"k": (1, 2, 0), "n": 100}),
    "normal-crossing-sum": ("normal-crossing", {"k": (1, 3), "form": "sum", "n": 50}),
    "harmonic": ("harmonic", {"dim": 2, "a": 4.0}),
    "custom": ("custom", {"formula": "(1 - x)**2 / 10 + (y - x**2)**2 + softplus(x * y) / pi"}),
}


def build(key: str, dtype: str = "float64") -> Target:
    name, params = POTENTIALS[key]
    return landscapes.make(name, device="cpu", dtype=dtype, **params)


def positions(target: Target, chains: int = 7, seed: int = 0, scale: float = 1.5):
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(chains, target.dim, generator=g, dtype=target.dtype)


@pytest.mark.parametrize("key", sorted(POTENTIALS))
def test_analytic_gradient_equals_autograd(key):
    target = build(key)
    w = positions(target)
    _, reference = target._autograd(w, None)
    torch.testing.assert_close(target.grad(w), reference, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("key", sorted(POTENTIALS))
def test_batched_equals_per_chain_loop(key):
    target = build(key)
    w = positions(target)
    loss, grad = target.loss_and_grad(w)
    for c in range(w.shape[0]):
        lc, gc = target.loss_and_grad(w[c : c + 1])
        torch.testing.assert_close(loss[c : c + 1], lc, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(grad[c : c + 1], gc, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("key", sorted(POTENTIALS))
def test_float32_matches_float64(key):
    t64, t32 = build(key, "float64"), build(key, "float32")
    w = positions(t64, scale=1.0)
    l32, g32 = t32.loss_and_grad(w.float())
    assert l32.dtype == g32.dtype == torch.float32
    l64, g64 = t64.loss_and_grad(w)
    torch.testing.assert_close(l32.double(), l64, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(g32.double(), g64, rtol=1e-3, atol=1e-3)


# --- energies against torch.distributions (an independent reference implementation) ----------


def reference_log_prob(key: str, target: Target, w: torch.Tensor) -> torch.Tensor:
    if key.startswith("gaussian") or key == "harmonic":
        return D.MultivariateNormal(torch.zeros(target.dim, dtype=w.dtype), target.cov).log_prob(w)
    if key == "banana":
        a, b = 2.0, 0.2
        y = torch.stack([w[:, 0] / a, a * w[:, 1] + a * b * (w[:, 0] ** 2 + a * a)], -1)
        cov = torch.tensor([[1.0, 0.5], [0.5, 1.0]], dtype=w.dtype)
        return D.MultivariateNormal(torch.tensor([0.0, 4.0], dtype=w.dtype), cov).log_prob(y)
    if key == "squiggle":
        y = torch.stack([w[:, 0], w[:, 1] + torch.sin(5 * w[:, 0])], -1)
        cov = torch.tensor([[2.0, 0.25], [0.25, 0.5]], dtype=w.dtype)
        return D.MultivariateNormal(torch.zeros(2, dtype=w.dtype), cov).log_prob(y)
    if key == "mixture":
        means = torch.tensor([[-1.5, -1.5], [1.5, 1.5], [-2.0, 2.0]], dtype=w.dtype)
        sds = torch.tensor([0.8, 0.8, 0.5], dtype=w.dtype).sqrt()
        comp = D.Independent(D.Normal(means, sds[:, None].expand(3, 2)), 1)
        mix = D.Categorical(torch.ones(3, dtype=w.dtype))
        return D.MixtureSameFamily(mix, comp).log_prob(w)
    if key.startswith("funnel"):
        v = w[:, -1]
        x = D.Normal(0.0, torch.exp(v / 2)[:, None]).log_prob(w[:, :-1]).sum(-1)
        return D.Normal(0.0, torch.tensor(3.0, dtype=w.dtype)).log_prob(v) + x
    if key.startswith("softplus-funnel"):
        v = w[:, -1]
        sd = torch.nn.functional.softplus(v).sqrt()[:, None]
        x = D.Normal(2.0, sd).log_prob(w[:, :-1]).sum(-1)
        return D.Normal(0.0, torch.tensor(80.0, dtype=w.dtype).sqrt()).log_prob(v) + x
    raise KeyError(key)


NORMALISED = [k for k in POTENTIALS if not k.startswith(("normal-crossing", "custom", "donut"))]


@pytest.mark.parametrize("key", NORMALISED)
def test_energy_plus_log_z_is_minus_log_density(key):
    target = build(key)
    w = positions(target)
    got = -(target.loss(w) + target.log_z)
    torch.testing.assert_close(got, reference_log_prob(key, target, w), rtol=1e-10, atol=1e-10)


def test_softplus_funnel_deep_in_the_neck_is_finite_and_exact():
    # float64 softplus is representable down to v = -700; compare where the naive form is exact.
    target = build("softplus-funnel")
    w = torch.tensor([[2.0, -30.0], [2.5, -60.0], [1.0, -200.0]], dtype=torch.float64)
    w[:, 0] = 2.0 + torch.tensor([1e-8, 1e-14, 1e-44], dtype=torch.float64)
    got = -(target.loss(w) + target.log_z)
    torch.testing.assert_close(
        got, reference_log_prob("softplus-funnel", target, w), rtol=1e-9, atol=1e-9
    )
    w32 = build("softplus-funnel", "float32")
    # float32 overflows at e^88.7, so v = -80 is about as deep as float32 can represent
    deep = torch.tensor([[2.0, -80.0], [2.0 + 2.4e-7, -60.0]], dtype=torch.float32)
    assert torch.isfinite(w32.loss(deep)).all() and torch.isfinite(w32.grad(deep)).all()


def test_donut_log_z_equals_radial_quadrature():
    target = build("donut")
    radial, _ = integrate.quad(
        lambda r: r * math.exp(-((r - 2.6) ** 2) / 0.033), 0, 10, points=[2.6], epsabs=1e-14
    )
    assert target.log_z == pytest.approx(math.log(2 * math.pi * radial), rel=1e-10)


def test_normal_crossing_energy_is_n_times_monomial():
    t = build("normal-crossing")
    w = positions(t)
    expected = 100 * w[:, 0] ** 2 * w[:, 1] ** 4
    torch.testing.assert_close(t.loss(w), expected)
    ts = build("normal-crossing-sum")
    w2 = positions(ts)
    torch.testing.assert_close(ts.loss(w2), 50 * (w2[:, 0] ** 2 + w2[:, 1] ** 6))
    # the prior is kept out of the loss and exposed for the kernels
    torch.testing.assert_close(t.prior_energy(w), 0.5 * (w * w).sum(-1))
    # gradient at points with zero coordinates, where dividing by w_j would fail
    z = torch.tensor([[0.0, 1.5, 0.3], [2.0, 0.0, 0.0]], dtype=torch.float64)
    expected = torch.tensor([[0.0, 0.0, 0.0], [100 * 4 * 0.0, 0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(t.grad(z), expected)


def test_custom_formula_matches_hand_written_energy():
    t = build("custom")
    w = positions(t)
    x, y = w[:, 0], w[:, 1]
    expected = (1 - x) ** 2 / 10 + (y - x**2) ** 2 + torch.log1p(torch.exp(x * y)) / math.pi
    torch.testing.assert_close(t.loss(w), expected)
    t3 = landscapes.make(
        "custom",
        device="cpu",
        dtype="float64",
        formula="exp(-w0) + w2**2 * cos(w1) - abs(w0) + sqrt(1 + w1**2)",
    )
    assert t3.dim == 3
    w3 = positions(t3)
    a, b, c = w3.T
    torch.testing.assert_close(
        t3.loss(w3), torch.exp(-a) + c**2 * torch.cos(b) - a.abs() + torch.sqrt(1 + b**2)
    )
    const = landscapes.make("custom", device="cpu", dtype="float64", formula="2 * pi", dim=2)
    torch.testing.assert_close(const.loss(w), torch.full((7,), 2 * math.pi, dtype=torch.float64))
    # flat: a zero gradient (autograd refused the constant, failing the run at its first step)
    torch.testing.assert_close(const.loss_and_grad(w)[1], torch.zeros_like(w))


def test_a_formula_s_numbers_on_either_side_of_an_operator_keep_their_values_and_gradients():
    """Numbers beside a variable go to torch as Python floats (its faster scalar paths): every
    operator with a number on the left or on the right, and a negative one, against the same
    expression written out in torch, value and gradient."""
    formula = "2 ** w0 + w0 ** -2 + 1 / (1 + w1**2) - 0.5 * w1 + w0 / 4 - pi + (w0 - 3) * w1"
    t = landscapes.make("custom", device="cpu", dtype="float64", formula=formula)
    w = positions(t).clone().requires_grad_(True)
    a, b = w[:, 0], w[:, 1]
    written = 2**a + a**-2 + 1 / (1 + b**2) - 0.5 * b + a / 4 - math.pi + (a - 3) * b
    (grad,) = torch.autograd.grad(written.sum(), w)
    loss, got = t.loss_and_grad(w.detach())
    torch.testing.assert_close(loss, written.detach(), rtol=1e-14, atol=0)
    torch.testing.assert_close(got, grad, rtol=1e-14, atol=0)


# --- exact samplers -------------------------------------------------------------------------

N_DRAWS = 400_000


def draws(target: Target, n: int = N_DRAWS, seed: int = 11) -> torch.Tensor:
    return target.exact_sample(torch.Generator().manual_seed(seed), n)


def assert_mean(samples: torch.Tensor, expected: float, label: str) -> None:
    """|mean - expected| < 5 standard errors (a false alarm ~ 6e-7 per check)."""
    se = samples.std().item() / math.sqrt(samples.numel())
    assert abs(samples.mean().item() - expected) < 5 * se, (label, samples.mean().item(), expected)


@pytest.mark.parametrize("key", ["gaussian", "gaussian-conditioned", "harmonic", "mixture"])
def test_exact_sampler_mean_and_covariance(key):
    target = build(key)
    x = draws(target)
    d = target.dim
    if key == "mixture":  # closed form, written out independently of the target
        means = torch.tensor([[-1.5, -1.5], [1.5, 1.5], [-2.0, 2.0]], dtype=torch.float64)
        var = torch.tensor([0.8, 0.8, 0.5], dtype=torch.float64)
        mean = means.mean(0)
        cov = torch.diag(torch.full((2,), var.mean().item(), dtype=torch.float64))
        cov = cov + (means - mean).T @ (means - mean) / 3
    elif key == "harmonic":
        mean, cov = torch.zeros(d, dtype=torch.float64), torch.eye(d, dtype=torch.float64) / 8
    else:
        mean, cov = torch.zeros(d, dtype=torch.float64), target.cov
        if key == "gaussian":  # the rotation preserves the eigenvalues 0.25, 1, 4
            eig = torch.linalg.eigvalsh(cov)
            torch.testing.assert_close(eig, torch.tensor([0.25, 1.0, 4.0], dtype=torch.float64))
        else:
            eig = torch.linalg.eigvalsh(cov)
            assert (eig.max() / eig.min()).item() == pytest.approx(100.0)
    for i in range(d):
        assert_mean(x[:, i], mean[i].item(), f"mean {i}")
        for j in range(i, d):
            prod = (x[:, i] - mean[i]) * (x[:, j] - mean[j])
            assert_mean(prod, cov[i, j].item(), f"cov {i},{j}")


def test_neal_funnel_moments():
    x = draws(build("funnel"))
    v, xs = x[:, -1], x[:, :-1]
    assert_mean(v, 0.0, "E v")
    assert_mean(v**2, 9.0, "E v^2")
    assert_mean(xs[:, 0], 0.0, "E x")
    # log x^2 = v + log chi2_1: mean -(gamma + log 2), variance 9 + pi^2 / 2 (finite, unlike x^2)
    logx2 = torch.log(xs**2)
    assert_mean(logx2, -(np.euler_gamma + math.log(2)), "E log x^2")
    centred = (logx2 + np.euler_gamma + math.log(2)) ** 2
    assert_mean(centred, 9 + math.pi**2 / 2, "Var log x^2")
    # x / e^(v/2) is exactly N(0, 1) and independent of v
    z = xs / torch.exp(v / 2)[:, None]
    assert_mean(z**2, 1.0, "E z^2")
    assert_mean(z[:, 0] * v, 0.0, "E z v")


def test_softplus_funnel_moments():
    x = draws(build("softplus-funnel"))
    v, x1 = x[:, 1], x[:, 0]
    assert_mean(v**2, 80.0, "Var v")
    assert_mean(x1, 2.0, "E x")
    # Var x = E softplus(v), by quadrature; the SGRLD reference gives 3.6406 (sd 1.908).
    sp = integrate.quad(
        lambda t: np.logaddexp(0, t) * stats.norm.pdf(t, 0, math.sqrt(80)), -200, 200
    )[0]
    assert sp == pytest.approx(3.6406, abs=1e-4)
    assert_mean((x1 - 2) ** 2, sp, "Var x")


def test_softplus_funnel_x_marginal_and_cdf_against_exact_draws():
    """p(x) has a cusp at mu = 2 (6% of the mass within 1e-3 of it), so it is integrated on
    x = 2 +- e^u: mass 1, variance E softplus(v) = 3.6406 (docs/methods/sgrld.md), and its CDF,
    which must agree with the integrated density, passes KS against exact draws."""
    target = build("softplus-funnel")
    u = torch.linspace(-60, math.log(70), 20_001, dtype=torch.float64)
    logpdf = target.marginals[0]
    sides = [torch.exp(logpdf(2 + s * torch.exp(u)) + u) for s in (1, -1)]  # p(x) dx/du
    assert sum(torch.trapezoid(f, u).item() for f in sides) == pytest.approx(1.0, abs=1e-6)
    var = sum(torch.trapezoid(f * torch.exp(2 * u), u).item() for f in sides)
    assert var == pytest.approx(3.6406, abs=2e-4)
    right = torch.cumulative_trapezoid(sides[0], u)  # P(2 < x <= 2 + e^u)
    np.testing.assert_allclose(target.x_cdf(2 + torch.exp(u[1:])), 0.5 + right, atol=1e-6)
    near = torch.exp(torch.linspace(-30, 0, 2001, dtype=torch.float64))  # the cusp, resolved
    far = torch.linspace(-40, 44, 4001, dtype=torch.float64)
    grid = torch.cat([far, 2 + near, 2 - near]).sort().values
    cdf = target.x_cdf(grid).numpy()
    x = draws(target, 200_000)[:, 0].numpy()
    assert stats.kstest(x, lambda t: np.interp(t, grid.numpy(), cdf)).pvalue > 1e-3
    wide = build("softplus-funnel-4d")  # every x_i has that law
    assert set(wide.marginals) == {0, 1, 2, 3}
    assert torch.equal(wide.marginals[2](grid[:5]), logpdf(grid[:5]))


def test_banana_moments():
    # x0 = a y0, so E x0 = 0, Var x0 = a^2; E x1 = (E y1 - a b (E x0^2 + a^2)) / a = 0.4.
    x = draws(build("banana"))
    assert_mean(x[:, 0], 0.0, "E x0")
    assert_mean(x[:, 0] ** 2, 4.0, "E x0^2")
    assert_mean(x[:, 1], 0.4, "E x1")


HIST = {  # key -> grid (xlo, xhi, ylo, yhi); chosen so the grid resolves the density
    "gaussian-2d": (-4, 4, -4, 4),
    "banana": (-6, 6, -10, 3),
    "donut": (-3.5, 3.5, -3.5, 3.5),
    "mixture": (-5, 4, -4, 5),
    "squiggle": (-4, 4, -3.5, 3.5),
    "funnel-2d": (-10, 10, -2, 8),
    "softplus-funnel": (-6, 10, -3, 25),
}


@pytest.mark.parametrize("key", sorted(HIST))
def test_histogram_of_exact_draws_matches_normalised_density(key):
    """Chi-square test of binned exact draws against the density integrated over each bin
    (16 x 16 midpoint rule), with the mass outside the grid as one more bin."""
    if key == "gaussian-2d":
        target = landscapes.make(
            "gaussian", device="cpu", dtype="float64", dim=2, scales=(0.7, 1.3), rotate=True, seed=5
        )
    else:
        target = build(key)
    xlo, xhi, ylo, yhi = HIST[key]
    bins, sub = 24, 16
    n = 200_000
    x = draws(target, n)
    counts, _, _ = np.histogram2d(
        x[:, 0].numpy(), x[:, 1].numpy(), bins=bins, range=[[xlo, xhi], [ylo, yhi]]
    )
    fx = np.linspace(xlo, xhi, bins * sub + 1)
    fy = np.linspace(ylo, yhi, bins * sub + 1)
    mx, my = (fx[1:] + fx[:-1]) / 2, (fy[1:] + fy[:-1]) / 2
    gx, gy = np.meshgrid(mx, my, indexing="ij")
    w = torch.tensor(np.stack([gx.ravel(), gy.ravel()], -1))
    dens = torch.exp(-target.loss(w) - target.log_z).numpy().reshape(len(mx), len(my))
    cell = (fx[1] - fx[0]) * (fy[1] - fy[0])
    prob = dens.reshape(bins, sub, bins, sub).sum((1, 3)) * cell
    expected = np.append(n * prob.ravel(), n * (1 - prob.sum()))
    observed = np.append(counts.ravel(), n - counts.sum())
    keep = expected > 20
    pooled_o = observed[~keep].sum()
    pooled_e = expected[~keep].sum()
    o = np.append(observed[keep], pooled_o)
    e = np.append(expected[keep], pooled_e)
    chi2 = ((o - e) ** 2 / e).sum()
    p = stats.chi2.sf(chi2, len(o) - 1)
    assert p > 1e-4, (key, chi2, len(o) - 1, p)


@pytest.mark.parametrize(
    ("key", "index"),
    [
        ("funnel", 4),
        ("softplus-funnel", 1),
        ("gaussian", 0),
        ("gaussian", 2),
        ("mixture", 1),
    ],
)
def test_marginal_log_density_integrates_to_one_and_matches_draws(key, index):
    target = build(key)
    logpdf = target.marginals[index]
    grid = torch.linspace(-60, 60, 240_001, dtype=torch.float64)
    dens = torch.exp(logpdf(grid))
    assert torch.trapezoid(dens, grid).item() == pytest.approx(1.0, abs=1e-6)
    x = draws(target, 200_000)[:, index].numpy()
    cdf = torch.cumulative_trapezoid(dens, grid).numpy()
    ks = stats.kstest(x, lambda t: np.interp(t, grid[1:].numpy(), cdf))
    assert ks.pvalue > 1e-3, ks
