"""Repriorisation of wide Bayesian networks (Hron et al. 2022): the map's exact properties, the
reprior-lmc kernel against exact laws, the TFP-style ESS, and the paper's two studies (ESS by
width, KL from prior draws) at the small scale of docs/methods/wide-networks.md.

Independent values: autograd's Jacobian, numpy's linear algebra (the Gaussian posterior of a
linear readout, Eq. 2; the GP marginal likelihood of Eq. 5), an AR(1)'s closed-form ESS, a
plain loop of TFP's formula, and the numbers of docs/methods/wide-networks.md."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

import landscapes
from landscapes.data import Dataset
from landscapes.ntk import NTKFCN
from runs.loop import execute
from runs.spec import SpecError, parse_spec
from runs.store import Store
from runs.worker import torch_threads
from samplers.diagnostics import ess_per_step
from studies import reprior
from studies.wide import kl_table


def ntk(**params) -> NTKFCN:
    base = {"width": 6, "depth": 1, "n": 5, "inputs": 2, "parametrisation": "reprior"}
    return landscapes.make("ntk-fcn", dtype="float64", device="cpu", **{**base, **params})


def draw(target, chains: int = 3, seed: int = 0) -> torch.Tensor:
    return torch.randn(
        chains, target.dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64
    )


def linear_posterior(psi: np.ndarray, y: np.ndarray, s2: float) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 2 in numpy: the readout's posterior N(mu, Sigma) for features ``psi`` under the
    N(0, I) prior, Sigma = (I + Psi^T Psi / s2)^-1 and mu = Sigma Psi^T y / s2."""
    cov = np.linalg.inv(np.eye(psi.shape[1]) + psi.T @ psi / s2)
    return cov @ psi.T @ y / s2, cov


# Both ways the map is computed: D = width + 1 <= n factors G (feature space); D > n factors the
# n x n matrix of the thin QR (data space). Multi-output: the digits, k = 10.
MAPS = {
    "feature-space": {"width": 3, "n": 8},
    "data-space": {"width": 9, "n": 5},
    "deep": {"width": 7, "depth": 2, "n": 4},
    "digits": {"width": 8, "n": 5, "data": "digits"},
}


@pytest.mark.parametrize("case", sorted(MAPS))
def test_log_det_equals_autograd_jacobian(case):
    target = ntk(**MAPS[case])
    phi = draw(target, 2)
    _, logdet, _ = target.transform(phi)
    for c in range(2):
        jac = torch.autograd.functional.jacobian(lambda p: target.transform(p[None])[0][0], phi[c])
        sign, expected = torch.linalg.slogdet(jac)
        assert sign > 0 and abs(float(logdet[c] - expected)) < 1e-8


@pytest.mark.parametrize("case", sorted(MAPS))
def test_inverse_and_identity_limit(case):
    target = ntk(**MAPS[case])
    phi = draw(target)
    theta = target.original(phi)
    assert float((target.from_original(theta) - phi).abs().max()) < 1e-10
    assert torch.equal(
        theta[:, : target.dim - target.n_readout], phi[:, : target.dim - target.n_readout]
    )
    wide_open = ntk(**MAPS[case], lam=1e10)  # lambda -> infinity: T -> identity
    assert float((wide_open.original(phi) - phi).abs().max()) < 1e-6


@pytest.mark.parametrize("case", sorted(MAPS))
def test_readout_conditional_is_exactly_standard_normal(case):
    """U(phi_<=L, phi_o) - |phi_o|^2 / 2 does not depend on phi_o (lambda = sigma^2, temperature
    1), and equals |phi_<=L|^2 / 2 - log N(Y; 0, K + sigma^2 I) up to a constant (Eq. 5): the
    GP marginal likelihood with the empirical NNGP kernel K = Psi Psi^T, in numpy."""
    target = ntk(**MAPS[case])
    k = target.n_readout
    phi = draw(target, 4).repeat(3, 1)
    phi[4:, -k:] = draw(target, 8, seed=1)[:, -k:]  # other readouts, same hidden layers
    _, _, u, _ = target.energy_terms(phi, None, target.nbeta, loss_grad=False)
    rest = (u - 0.5 * (phi[:, -k:] ** 2).sum(-1)).reshape(3, 4)
    assert float((rest - rest[0]).abs().max()) < 1e-9 * float(rest.abs().max())
    psi = target.embed(phi[:4]).numpy()  # the hidden layers are the same in theta and phi
    y, s2 = target.y.numpy(), target.sigma**2
    closed = []
    for c in range(4):
        cov = psi[c] @ psi[c].T + s2 * np.eye(target.n)
        _, logdet = np.linalg.slogdet(cov)
        log_z = -0.5 * (np.sum(y * np.linalg.solve(cov, y)) + y.shape[1] * logdet)
        hidden = phi[c, : target.dim - k].numpy()
        closed.append(0.5 * hidden @ hidden - log_z)
    diff = rest[0].numpy() - np.array(closed)
    assert np.ptp(diff) < 1e-8 * np.abs(closed).max()


def test_energy_is_the_pullback_of_the_standard_posterior():
    """U_phi(phi) = U_theta(T(phi)) - log|det dT/dphi|, U_theta from the standard target."""
    reprior = ntk(width=9, n=5, lam=0.3)  # any lambda: the pullback holds for every bijection
    standard = ntk(width=9, n=5, lam=0.3, parametrisation="standard")
    phi = draw(reprior)
    theta, logdet, _ = reprior.transform(phi)
    nbeta = reprior.nbeta
    u_phi = reprior.energy_terms(phi, None, nbeta)[2]
    u_theta = standard.energy_terms(theta, None, nbeta)[2]
    torch.testing.assert_close(u_phi, u_theta - logdet, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("case", ["feature-space", "data-space"])
def test_fixed_features_readout_has_the_exact_gaussian_posterior(case):
    """phi_<=L fixed, phi_o ~ N(0, I): theta_o ~ N(mu, Sigma) with Sigma = (I + Psi^T Psi /
    sigma^2)^-1 and mu = Sigma Psi^T y / sigma^2 (Eq. 2, numpy), within 5 Monte Carlo SEs."""
    target = ntk(**MAPS[case])
    draws, k = 20_000, target.n_readout
    phi = draw(target, 1).repeat(draws, 1)
    phi[:, -k:] = draw(target, draws, seed=2)[:, -k:]
    theta_o = target.original(phi)[:, -k:].numpy()  # readout weights, then the bias (k = 1)
    psi = target.embed(phi[:1])[0].numpy()
    s2 = target.sigma**2
    mean, cov = linear_posterior(psi, target.y.numpy()[:, 0], s2)
    sd = np.sqrt(np.diag(cov))
    assert np.all(np.abs(theta_o.mean(0) - mean) < 5 * sd / math.sqrt(draws))
    sample = np.cov(theta_o.T)
    se = np.sqrt((np.outer(sd**2, sd**2) + cov**2) / draws)
    assert np.all(np.abs(sample - cov) < 5 * se)


def test_multi_output_equals_one_map_per_output():
    """k outputs share Sigma: column j of the joint map is the single-output map of y_j, and
    the log-dets add."""
    joint = ntk(**MAPS["digits"])
    phi = draw(joint, 2)
    theta, logdet, _ = joint.transform(phi)
    hidden = joint.dim - joint.n_readout
    d_l = joint.features_dim - 1
    weight = theta[:, hidden : joint.dim - 10].reshape(2, 10, d_l)
    phi_weight = phi[:, hidden : joint.dim - 10].reshape(2, 10, d_l)
    total = torch.zeros(2, dtype=torch.float64)
    for j in (0, 3, 9):
        data = Dataset(
            joint.x, joint.y[:, j : j + 1], joint.x_test, joint.y_test[:, j : j + 1], "regression"
        )
        single = NTKFCN(8, 1, data, joint.sigma, "reprior").to(dtype=torch.float64)
        mine = torch.cat([phi[:, :hidden], phi_weight[:, j], phi[:, joint.dim - 10 + j, None]], 1)
        one, one_logdet, _ = single.transform(mine)
        torch.testing.assert_close(one[:, hidden:-1], weight[:, j], rtol=0, atol=1e-12)
        torch.testing.assert_close(one[:, -1], theta[:, joint.dim - 10 + j], rtol=0, atol=1e-12)
        total = total + one_logdet
    torch.testing.assert_close(logdet, 10 * (total / 3), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# The kernel and the run: exact laws.


def run(spec: dict, home) -> tuple[dict, Store, str]:
    """The run in this process, one torch thread as a worker has (two made these small ops'
    steps up to 80 times slower here: the trap in docs/methods/wide-networks.md)."""
    store = Store(home)
    parsed = parse_spec(spec)
    run_id = store.create(parsed.model_dump(mode="json"))
    with torch_threads(1):
        return execute(parsed, store, run_id), store, run_id


def test_reprior_lmc_samples_a_gaussian_exactly(tmp_path):
    """On N(0, diag(s^2)) with MH on, every chain's time averages of w and w^2 after the
    warm-up match 0 and s^2 within 5 SEs over 512 independent chains; the warm-up brings the
    acceptance to its target."""
    scales = (0.5, 1.0, 2.0)
    spec = {
        "target": {"name": "gaussian", "params": {"dim": 3, "scales": scales}},
        "sampler": {"name": "reprior-lmc", "params": {"step_size": 0.1, "warmup": 300}},
        "chains": 512,
        "steps": 1500,
        "burn_in": 300,
        "dtype": "float64",
        "compile": "never",
    }
    summary, store, run_id = run(spec, tmp_path)
    x = store.read(run_id, since=300, names=["position"])["position"]  # [T, C, 3]
    var = np.square(scales)
    for power, exact in ((1, np.zeros(3)), (2, var)):
        per_chain = (x**power).mean(0)  # [C, 3]: chains are independent
        se = per_chain.std(0, ddof=1) / math.sqrt(per_chain.shape[0])
        assert np.all(np.abs(per_chain.mean(0) - exact) < 5 * se + 1e-3 * var), power
    assert abs(summary["scalars"]["accept_prob"] - 0.9) < 0.03


def test_repriorised_linear_regression_records_the_exact_posterior(tmp_path):
    """Depth 0 is Bayesian linear regression: in phi the posterior is exactly N(0, I), so
    reprior-lmc moves in a standard normal, and the run records theta ~ N(mu, Sigma) (Eq. 2,
    numpy), not phi."""
    params = {"width": 1, "depth": 0, "n": 20, "inputs": 3, "parametrisation": "reprior"}
    spec = {
        "target": {"name": "ntk-fcn", "params": params},
        "sampler": {"name": "reprior-lmc", "params": {"step_size": 0.5, "warmup": 200}},
        "chains": 128,
        "steps": 800,
        "burn_in": 200,
        "dtype": "float64",
        "compile": "never",
    }
    summary, store, run_id = run(spec, tmp_path)
    theta = store.read(run_id, since=200, names=["position"])["position"]  # [T, C, 4]
    target = landscapes.make("ntk-fcn", dtype="float64", **params)
    psi = target.embed(torch.zeros(1, target.dim, dtype=torch.float64))[0].numpy()
    s2 = target.sigma**2
    mean, cov = linear_posterior(psi, target.y.numpy()[:, 0], s2)
    per_chain = theta.mean(0)
    se = per_chain.std(0, ddof=1) / math.sqrt(per_chain.shape[0])
    assert np.all(np.abs(per_chain.mean(0) - mean) < 5 * se)
    centred = theta - mean
    second = np.einsum("tci,tcj->cij", centred, centred) / len(theta)  # per chain
    se2 = second.std(0, ddof=1) / math.sqrt(second.shape[0])
    assert np.all(np.abs(second.mean(0) - cov) < 5 * se2 + 1e-12)
    assert summary["scalars"]["step_size"] > 0.5  # a unit-scale posterior: large steps


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"observables": ["llc"]}, "observables"),
        ({"observables": ["thermo"]}, "observables"),
        (
            {"sampler": {"name": "sgld", "params": {"localization": 1.0}}},
            "sampler.params.localization",
        ),
        ({"sampler": {"name": "sgld", "params": {"batch_size": 4}}}, "sampler.params.batch_size"),
    ],
)
def test_reprior_is_refused_where_it_does_not_apply(change, field):
    spec = {
        "target": {"name": "ntk-fcn", "params": {"width": 4, "parametrisation": "reprior"}},
        "sampler": {"name": "reprior-lmc", "params": {}},
        **change,
    }
    with pytest.raises(SpecError) as info:
        parse_spec(spec)
    assert info.value.field == field and "reprior" in info.value.message
    parse_spec({**spec, "target": {"name": "ntk-fcn", "params": {"width": 4}}})  # standard: fine


# ---------------------------------------------------------------------------------------------
# ESS with TFP's truncation.


def tfp_loop(x: np.ndarray) -> float:
    """TFP's effective_sample_size / N written out: unbiased auto-covariances, weights (N - k)
    / N, summed until the first negative autocorrelation."""
    n, x = len(x), x - x.mean()
    total = 0.0
    for k in range(n):
        rho = (x[: n - k] @ x[k:] / (n - k)) / (x @ x / n)
        if rho < 0:
            break
        total += (n - k) / n * rho
    return 1.0 / (2 * total - 1)


def test_ess_per_step_is_tfps_formula_and_the_ar1_value():
    rng = np.random.default_rng(0)
    short = rng.standard_normal((3, 200)).cumsum(1) * 0.1 + rng.standard_normal((3, 200))
    np.testing.assert_allclose(ess_per_step(short), [tfp_loop(s) for s in short], rtol=1e-10)
    for rho in (0.5, 0.9):  # AR(1): ESS / N -> (1 - rho) / (1 + rho)
        e = rng.standard_normal((64, 20_000))
        x = np.empty_like(e)
        x[:, 0] = e[:, 0] / math.sqrt(1 - rho**2)
        for t in range(1, e.shape[1]):
            x[:, t] = rho * x[:, t - 1] + e[:, t]
        per = ess_per_step(x)
        exact = (1 - rho) / (1 + rho)
        # the truncation at the first negative lag biases it down by a few percent
        assert abs(per.mean() - exact) < 0.06 * exact


# ---------------------------------------------------------------------------------------------
# The paper's studies at a small scale (docs/methods/wide-networks.md).


def ess_cell(spec_json: str) -> dict:
    import tempfile

    with tempfile.TemporaryDirectory() as home:
        summary, _, _ = run(parse_spec(spec_json).model_dump(mode="json"), home)
    return {
        "f": summary["observables"]["ess"]["f"]["mean"],
        "theta": summary["observables"]["ess"]["theta"]["mean"],
        "step": summary["scalars"]["step_size"],
        "acceptance": summary["acceptance"],
    }


@pytest.mark.slow
def test_ess_study_repriorisation_mixes_faster_and_more_so_when_wider():
    """n = 16, widths 8 and 128, 1000 warm-up + 3000 steps, thinning 1, MH on, 2 chains (the
    check's 2 seeds) from the same start in both parametrisations. The independent check measured
    f-ESS ratios 3.8 / 2.7 at width 8 and 16 / 22 at 128, steps .023 -> .065 and .025 -> .28."""
    _, cells = reprior.specs(widths=(8, 128), device="cpu")
    results = [ess_cell(spec.model_dump_json()) for _, spec in cells]
    got = {(c["width"], c["parametrisation"]): r for (c, _), r in zip(cells, results, strict=True)}
    ratio = {w: got[w, "reprior"]["f"] / got[w, "standard"]["f"] for w in (8, 128)}
    assert ratio[8] > 1.5 and ratio[128] > 5 and ratio[128] > ratio[8], ratio
    assert got[128, "reprior"]["step"] > 2 * got[8, "reprior"]["step"]
    standard = got[128, "standard"]["step"] / got[8, "standard"]["step"]
    assert 1 / 1.5 < standard < 1.5
    for r in got.values():
        assert 0.8 <= r["acceptance"] <= 0.97, got


def test_kl_from_prior_draws_vanishes_with_width_only_under_repriorisation():
    """n = 32, depth 1, 1000 prior draws, fixed seed: KL(q || p_phi) strictly decreases over
    widths 8, 32, 128, 512 and ends below 10% of its width-8 value (the check: 289 -> 7.7),
    while KL(q || p_theta) stays flat (Prop. 2.3; the check's plateau ~3000)."""
    rows = kl_table((8, 32, 128, 512), depth=1, n=32, draws=1000)
    phi = [r["reprior"] for r in rows]
    theta = [r["standard"] for r in rows]
    assert all(a > b for a, b in itertools.pairwise(phi)), phi
    assert phi[-1] < 0.1 * phi[0], phi
    assert min(theta) > 0.5 * theta[0] and max(theta) < 1.5 * theta[0], theta
    assert all(t > 10 * p for t, p in zip(theta, phi, strict=True))


def test_kl_of_fixed_features_is_zero_in_phi_and_the_gaussian_kl_in_theta():
    """Depth 0: the features are fixed, so Z is one number (KL in phi = 0) and KL(q || p_theta)
    is KL(N(0, I) || N(mu, Sigma)) in closed form (numpy, feature space)."""
    target = ntk(width=1, depth=0, n=12, inputs=3, parametrisation="standard")
    kl = target.prior_kl(50, torch.Generator().manual_seed(0))
    assert abs(kl["reprior"]) < 1e-9
    psi = target.embed(torch.zeros(1, target.dim, dtype=torch.float64))[0].numpy()
    s2, y = target.sigma**2, target.y.numpy()[:, 0]
    mu, cov = linear_posterior(psi, y, s2)
    precision = np.linalg.inv(cov)
    exact = 0.5 * (np.trace(precision) - 4 + mu @ precision @ mu - np.linalg.slogdet(precision)[1])
    assert abs(kl["standard"] - exact) < 1e-9 * exact


def test_study_flags_name_the_cells_outside_the_band_and_the_widths_without_a_gain():
    def cell(width, parametrisation, acceptance, status="completed"):
        return {"width": width, "parametrisation": parametrisation, "status": status,
                "acceptance": acceptance}  # fmt: skip

    cells = [cell(8, "standard", 0.79), cell(8, "reprior", 0.9), cell(32, "standard", 0.99),
             cell(32, "reprior", 0.5, status="running")]  # fmt: skip
    ratios = [{"width": 8, "f": 0.9, "theta": 1.2}, {"width": 32, "f": 0.5, "theta": 0.5}]
    flags = reprior.flags(cells, ratios, mh=True)
    assert [(f["level"], f["where"]) for f in flags] == [
        ("fail", "width 8, standard"),  # 0.79 < 0.8
        ("fail", "width 32, standard"),  # 0.99 > 0.97; the running cell is not judged yet
        ("warn", "width 8"),  # f x0.9; width 32's pair has not finished
    ]
    skipped = reprior.flags([cell(8, "reprior", 0.975)], [], mh=False)
    assert skipped[0]["level"] == "fail" and "0.98" in skipped[0]["message"]
    assert reprior.flags([cell(8, "reprior", 0.985)], [], mh=False) == []
