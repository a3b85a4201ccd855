"""Truth oracles against the tables of docs/methods (local-sampling.md, vi.md) and each other."""

import itertools
import json
import math
import random

import pytest
import torch
from clitest import jobs

import landscapes
from landscapes.truths import (
    dln_llc,
    normal_crossing_llc_at,
    normal_crossing_rlct,
    rrr_llc,
    tanh_llc,
)
from runs.store import Store

# docs/methods/local-sampling.md's table: H (H0..HM), r, d, lambda, m (None: not given).
DLN_TABLE = [
    ([1, 1, 1], 0, 2, 0.5, 2),
    ([1, 1, 1], 1, 2, 0.5, 1),
    ([2, 1, 2], 0, 4, 1.0, 2),
    ([3, 2], 1, 6, 3.0, 1),
    ([5, 3, 5], 0, 30, 6.5, 2),
    ([5, 3, 5], 2, 30, 9.5, 2),
    ([5, 1, 5], 1, 10, 4.5, 1),
    ([2, 2, 2, 2], 1, 12, 2.0, 3),
    ([4, 4, 4, 4], 2, 48, 7.5, 3),
    ([3, 4, 5, 6], 2, 62, 8.0, 1),
    ([8, 3, 2, 7], 2, 44, 13.0, 1),
    ([7, 4, 3, 3], 0, None, 4.0, None),  # 4.5 with the paper's typo ("max" in condition 3)
    ([10, 20, 20, 10], 5, 800, 50.0, 1),
    ([10, 10, 10, 10, 10], 0, 400, 31.5, 5),
    ([10, 10, 10, 10, 10], 10, 400, 50.0, 1),
    ([20, 5, 30, 25, 10], 3, 1250, 47.5, 1),
    ([50, 60, 70], 10, 7200, 1437.5, 1),
    ([100, 120, 80, 110], 30, 30400, 4233.5, 3),
]


def n_params(widths):
    return sum(a * b for a, b in itertools.pairwise(widths))


@pytest.mark.parametrize(("widths", "rank", "d", "lam", "m"), DLN_TABLE)
def test_dln_llc_reference_table(widths, rank, d, lam, m):
    got_lam, got_m = dln_llc(widths, rank)
    assert got_lam == lam
    if m is not None:
        assert got_m == m
    if d is not None:
        assert n_params(widths) == d


def test_dln_with_two_layers_agrees_with_reduced_rank_regression_for_all_small_sizes():
    count = 0
    for m_in, h, n_out in itertools.product(range(1, 9), repeat=3):
        for r in range(min(m_in, h, n_out) + 1):
            assert dln_llc([m_in, h, n_out], r) == rrr_llc(m_in, h, n_out, r), (m_in, h, n_out, r)
            count += 1
    assert count == 1808  # local-sampling.md's count of (sizes, rank) pairs


def test_dln_llc_is_at_most_half_the_parameter_count():
    rng = random.Random(0)
    for _ in range(3000):
        widths = [rng.randint(1, 12) for _ in range(rng.randint(2, 7))]
        r = rng.randint(0, min(widths))
        lam, m = dln_llc(widths, r)
        assert 0 < lam <= n_params(widths) / 2
        assert m >= 1


def test_one_layer_is_regular():
    for h0, h1 in itertools.product(range(1, 7), repeat=2):
        assert dln_llc([h0, h1], min(h0, h1)) == (h0 * h1 / 2, 1)


def test_rrr_paper_table():
    # The VI paper's Table 1(b): M = H + 3, N = H, r = H gives 324 (H = 24) and 560 (H = 32).
    assert rrr_llc(27, 24, 24, 24) == (324.0, 1)
    assert rrr_llc(35, 32, 32, 32) == (560.0, 1)
    assert rrr_llc(1, 1, 1, 0) == (0.5, 2)  # K ~ (ab)^2


# Aoyagi & Watanabe (2006), as the VI paper uses it: (H, lambda, m);
# lambda = (H + i^2 + i) / (4i + 2).
TANH_TABLE = [
    (1, 0.5, 2),
    (2, 2 / 3, 1),
    (3, 5 / 6, 1),
    (4, 1.0, 2),
    (5, 1.1, 1),
    (9, 1.5, 2),
    (16, 2.0, 2),
    (576, 12.0, 2),
    (1024, 16.0, 2),
]


@pytest.mark.parametrize(("hidden", "lam", "m"), TANH_TABLE)
def test_tanh_table(hidden, lam, m):
    got_lam, got_m = tanh_llc(hidden)
    assert got_lam == pytest.approx(lam, rel=1e-15)
    assert got_m == m
    assert got_lam <= hidden  # d / 2 = H


@pytest.mark.parametrize(
    ("k", "form", "lam", "m"),
    [
        ((1,), "product", 0.5, 1),
        ((2,), "product", 0.25, 1),
        ((1, 1), "product", 0.5, 2),
        ((1, 2), "product", 0.25, 1),
        ((2, 2), "product", 0.25, 2),
        ((1, 3), "product", 1 / 6, 1),
        ((1, 1), "sum", 1.0, 1),
        ((2, 1), "sum", 0.75, 1),
        ((2, 2), "sum", 0.5, 1),
        ((1, 0), "product", 0.5, 1),
    ],
)
def test_normal_crossing_examples(k, form, lam, m):
    # docs/methods/local-sampling.md and docs/methods/vi.md list these.
    assert normal_crossing_rlct(k, form=form) == (pytest.approx(lam), m)


def test_normal_crossing_with_prior_jacobian():
    # lambda_j = (h_j + 1) / (2 k_j): h = (1, 0), k = (1, 1) -> min(1, 1/2) = 1/2, m = 1
    assert normal_crossing_rlct((1, 1), h=(1, 0)) == (0.5, 1)
    assert normal_crossing_rlct((2, 1), h=(1, 0)) == (0.5, 2)


def test_targets_carry_their_truths():
    assert landscapes.make("tanh", hidden=9, n=50, device="cpu").true_llc == (1.5, 2)
    assert landscapes.make("polynomial", powers=(1, 3), n=50, device="cpu").true_llc[0] == (
        pytest.approx(1 / 6)
    )
    rrr = landscapes.make("rrr", inputs=5, hidden=3, outputs=4, rank=2, n=50, device="cpu")
    assert rrr.true_llc == rrr_llc(5, 3, 4, 2)
    nc = landscapes.make("normal-crossing", k=(1, 2), device="cpu")
    assert nc.true_llc == (0.25, 1)


# docs/methods/vi.md: t E_t[K] by quadrature, prior N(0, s^2 I), 4 printed digits.
FINITE_T = [
    ((1, 2), 1.0, [(1e2, 0.2057), (1e3, 0.2249), (1e4, 0.2358), (1e5, 0.2420), (1e6, 0.2455)]),
    ((1, 1), 1.0, [(1e2, 0.3542), (1e3, 0.3903), (1e4, 0.4123), (1e5, 0.4271), (1e6, 0.4375)]),
    ((1, 2), 0.3, [(1e3, 0.1158), (1e4, 0.1677)]),
]


@pytest.mark.parametrize(("k", "s", "table"), FINITE_T)
def test_finite_t_learning_coefficient_reference_values(k, s, table):
    for t, expected in table:
        assert normal_crossing_llc_at(k, t, s) == pytest.approx(expected, abs=6e-5), (k, s, t)


def test_finite_t_wbic_mapping():
    # n -> t = n / log n (docs/methods/vi.md): 0.2095 / 0.3614 at n = 1e3, 0.2353 / 0.4112 at 1e5
    for n, a, b in [(1e3, 0.2095, 0.3614), (1e4, 0.2254, 0.3912), (1e5, 0.2353, 0.4112)]:
        t = n / math.log(n)
        assert normal_crossing_llc_at((1, 2), t) == pytest.approx(a, abs=6e-5)
        assert normal_crossing_llc_at((1, 1), t) == pytest.approx(b, abs=6e-5)


@pytest.mark.parametrize("t", [1.0, 37.0, 1e4])
@pytest.mark.parametrize("s", [0.5, 1.0, 3.0])
def test_finite_t_closed_form_for_a_quadratic(t, s):
    # K = w^2 under N(0, s^2): p_t = N(0, 1 / (2t + 1/s^2)), so t E[K] = t / (2t + 1/s^2)
    exact = t / (2 * t + 1 / s**2)
    assert normal_crossing_llc_at((1,), t, s) == pytest.approx(exact, rel=1e-9)
    assert normal_crossing_llc_at((1, 1), t, s, form="sum") == pytest.approx(2 * exact, rel=1e-9)


def test_finite_t_tends_to_the_rlct_from_below():
    values = [normal_crossing_llc_at((1, 3), t) for t in (1e3, 1e5, 1e7, 1e9)]
    assert values == sorted(values) and values[-1] < 1 / 6 < values[-1] + 0.01
    nc = landscapes.make("normal-crossing", k=(1, 2), n=10_000, device="cpu")
    assert nc.llc_at() == pytest.approx(0.2358, abs=6e-5)


# -- a potential's known minimum: where an LLC with --w0 truth starts (issue 60, item 13) ------

# target, its parameters as flags, its energy's global minimum (the density's mode). The banana
# and the squiggle are N(T(x); mu, Sigma) with |det J_T| = 1, so their mode is T^-1(mu): the
# banana's x0 = a mu0 = 0, x1 = mu1 / a - b (x0^2 + a^2) = 4 / 2 - 0.2 * 4 = 1.2.
MINIMA = [
    ("gaussian", ["dim=3", "scales=2"], [0.0, 0.0, 0.0]),
    ("harmonic", ["dim=2"], [0.0, 0.0]),
    ("banana", [], [0.0, 1.2]),
    ("squiggle", [], [0.0, 0.0]),
]


def test_the_potentials_with_a_minimum_are_these_and_it_is_their_lowest_energy():
    have = []
    for name, spec in landscapes.REGISTRY.items():
        if spec.kind == "network" or name == "custom":
            continue
        target = landscapes.make(name, dtype="float64")
        if target.minimum is None:
            continue
        have.append(name)
        point = target.minimum[None]
        assert torch.allclose(target.grad(point), torch.zeros_like(point), atol=1e-12), name
        draws = target.exact_sample(torch.Generator().manual_seed(1), 4000)
        assert float(target.loss(point)[0]) <= float(target.loss(draws).min()), name
    assert sorted(have) == [m[0] for m in sorted(MINIMA)]


def llc_run(home, name: str, params: list[str], *more: str):
    argv = ["run", "--target", name, *(x for p in params for x in ("--target-param", p))]
    argv += ["--sampler", "mala", "--param", "step_size=0.05", "--observe", "llc"]
    return jobs(home, *argv, "--compile", "never", "--json", *more)


@pytest.mark.parametrize(("name", "params", "minimum"), MINIMA)
def test_a_potential_with_a_known_minimum_starts_an_llc_there(tmp_path, name, params, minimum):
    target = landscapes.make(name, dtype="float64", **dict(p.split("=") for p in params))
    point = torch.tensor([minimum], dtype=torch.float64)
    assert torch.allclose(target.grad(point), torch.zeros_like(point), atol=1e-12)
    draws = target.exact_sample(torch.Generator().manual_seed(0), 4000)
    assert float(target.loss(point)[0]) <= float(target.loss(draws).min())  # the lowest energy
    out = llc_run(tmp_path, name, params, "--w0", "truth", "--chains", "4", "--steps", "20")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["observables"]["llc"]["w0"] == "truth"
    assert summary["loss"]["init"] == pytest.approx(float(target.loss(point)[0]), abs=1e-6)
    w0 = Store(tmp_path).get_array(summary["run_id"], "w0")
    assert w0.tolist() == pytest.approx(minimum, abs=1e-6)


def test_the_temperature_check_from_the_gaussians_mode_gives_half_its_dimension(tmp_path):
    """E[nbeta (L - L(w0))] at nbeta = 1 on N(0, I_d) from its mode is d / 2; w0 "auto" resolves
    to the mode now that the Gaussian has one."""
    out = llc_run(tmp_path, "gaussian", ["dim=4"], "--chains", "32", "--steps", "600")
    assert out.returncode == 0, out.stderr
    llc = json.loads(out.stdout)["observables"]["llc"]
    assert llc["w0"] == "truth" and llc["baseline_loss"] == 0.0
    assert llc["mean"] == pytest.approx(2.0, abs=max(0.12, 4 * llc["se"]))


@pytest.mark.parametrize("name", ["funnel", "softplus-funnel", "donut", "mixture"])
def test_a_potential_without_a_usable_minimum_refuses_w0_truth_in_one_line(tmp_path, name):
    """The funnels' modes lie at the neck's tip (v = -40.5 for Neal's at d = 10), where x's
    curvature is e^40.5: MALA rejects every move there and SGLD throws v to 7e9; the donut's
    minimum is a ring, the mixture's mode has no closed form."""
    out = llc_run(tmp_path, name, [], "--w0", "truth", "--steps", "10")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        f"error: llc.w0: {name} has no known truth; use 'init' ({name} has no data)"
    ]
