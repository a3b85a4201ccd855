"""TATi's thermodynamic checks and its integrator-order study (docs/methods/tati.md;
Heber et al. 2020, Figs. 2-4), through the "thermo" observable and the "order" sweep, against values
derived here: equipartition, the virial theorem, and each integrator's exact invariant
covariance on a quadratic loss (the discrete Lyapunov equation of its linear recursion).

The slopes are fitted where the Monte Carlo can see them on a CI budget, the harmonic
oscillator. On the two clusters (gamma = 10, as Fig. 4) GLA1's first-order regime starts only
below h = 2^-9, where its error is ~5e-3 of <virial> (it changes sign near 2^-7.5) and the slow
mode's IAT is ~500 steps: ~10^10 chain-steps to fit. There each cell is checked against its
exact error at the largest stable step instead.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from scipy import linalg

import landscapes
from runs.loop import execute
from runs.spec import parse_spec
from runs.store import Store
from studies import order

SCHEMES = {"gla1": "BAO", "gla2": "BOBA", "baoab": "BAOAB"}


def exact_errors(scheme: str, hessian: np.ndarray, h: float, gamma: float, beta: float):
    """Relative errors of <w . grad U> and <K> under the integrator's invariant law, for
    U = w^T H w / 2 (TATi units: p ~ N(0, 1/beta), mass 1): compose the letters' linear maps on
    z = (w, p) with the noise each O injects and solve S = M S M^T + N N^T."""
    d, temp = len(hessian), 1 / beta
    eye, zero = np.eye(d), np.zeros((d, d))
    m, noise = np.eye(2 * d), np.zeros((2 * d, 0))
    for letter in scheme:
        dt = h / scheme.count(letter)
        extra = np.zeros((2 * d, 0))
        if letter == "A":
            step = np.block([[eye, dt * eye], [zero, eye]])
        elif letter == "B":
            step = np.block([[eye, zero], [-dt * hessian, eye]])
        else:
            a = math.exp(-gamma * dt)
            step = np.block([[eye, zero], [zero, a * eye]])
            extra = np.vstack([zero, math.sqrt(temp * (1 - a * a)) * eye])
        m, noise = step @ m, np.hstack([step @ noise, extra])
    s = linalg.solve_discrete_lyapunov(m, noise @ noise.T)
    virial, kinetic = np.trace(hessian @ s[:d, :d]), np.trace(s[d:, d:]) / 2
    return virial / (d * temp) - 1, kinetic / (d * temp / 2) - 1


def sgld_error(hessian: np.ndarray, h: float, beta: float) -> float:
    """TATi's SGLD w - h H w + sqrt(2 h / beta) xi: its exact <w . grad U> error."""
    d = len(hessian)
    m = np.eye(d) - h * hessian
    s = linalg.solve_discrete_lyapunov(m, 2 * h / beta * np.eye(d))
    return np.trace(hessian @ s) * beta / d - 1


def hessian_of(target_name: str, params: dict) -> np.ndarray:
    """U's Hessian in TATi's units (the total loss: a network's n times Basin's mean loss)."""
    target = landscapes.make(target_name, dtype="float64", **params)
    total = target.n or 1
    w = torch.zeros(target.dim, dtype=torch.float64)
    return torch.autograd.functional.hessian(lambda v: total * target.loss(v[None])[0], w).numpy()


def run_cell(job: tuple) -> dict:
    """One cell of an order sweep, run in-process into a store of its own: its thermo summary."""
    home, data = job
    spec = parse_spec(data)
    store = Store(home)
    run_id = store.create(spec.model_dump(mode="json"))
    return execute(spec, store, run_id)["observables"]["thermo"]


def run_study(tmp_path, observable: str, cells: list[tuple[str, float]], **settings) -> dict:
    """The order sweep's cells (sampler, h), run here in turn; (sampler, h) -> thermo summary."""
    jobs, keys = [], []
    for i, (sampler, h) in enumerate(cells):
        _, (cell,) = order.specs(
            samplers=(sampler,), step_sizes=(h,), observable=observable, **settings
        )
        jobs.append((str(tmp_path / f"cell{i}"), cell[1].model_dump(mode="json")))
        keys.append((sampler, h))
    done = [run_cell(job) for job in jobs]
    return dict(zip(keys, done, strict=True))


# ---------------------------------------------------------------------------------------------
# Equipartition and the virial theorem (Heber et al. 2020, App. A).


def thermo_of(tmp_path, target: dict, params: dict, chains: int, steps: int, burn_in: int = 0):
    """A BAOAB run with the "thermo" observable, executed here: its thermo summary."""
    spec = parse_spec(
        {
            "target": target,
            "sampler": {"name": "baoab", "params": params},
            "chains": chains,
            "steps": steps,
            "burn_in": burn_in,
            "thin": steps,
            "dtype": "float64",
            "compile": "never",
            "observables": ["thermo"],
        }
    )
    store = Store(tmp_path)
    return execute(spec, store, store.create(spec.model_dump(mode="json")))["observables"]["thermo"]


def test_o_step_keeps_the_momentum_at_its_temperature(tmp_path):
    # grad U ~ 1e-12 w: the B and A steps move nothing that matters, the O step is exact
    target = {"name": "gaussian", "params": {"dim": 3, "scales": [1e6]}}
    temperature = 0.4
    thermo = thermo_of(tmp_path, target, {"step_size": 0.3, "temperature": temperature}, 512, 400)
    kinetic = thermo["kinetic"]
    # K = T chi2_3 / 2 per step; a chain's time average over 400 steps at friction 1 and step
    # 0.3 (momentum correlation exp(-0.3) a step, tau = 6.8 for p^2): SE from the chains
    assert kinetic["exact"] == pytest.approx(3 * temperature / 2)
    assert abs(kinetic["error"]) < 4 * kinetic["error_se"]
    assert kinetic["error_se"] < 0.01  # the check has teeth: a 4% bias would fail


def test_virial_theorem_on_a_confining_non_gaussian_potential(tmp_path):
    # the banana: <w . grad U> = d T by integration by parts; BAOAB's bias at h = 0.05 is O(h^2)
    banana = {"name": "banana", "params": {}}
    thermo = thermo_of(tmp_path, banana, {"step_size": 0.05}, 1024, 3000, burn_in=1000)
    virial = thermo["virial"]
    assert virial["exact"] == 2.0
    assert abs(virial["error"]) < 4 * virial["error_se"] + 0.01, virial
    assert virial["error_se"] < 0.02


def test_fit_order_recovers_a_power_law_and_ignores_the_noise_floor():
    h = np.array([0.25, 0.125, 0.0625, 0.03125])
    fit = order.fit_order(h, 0.3 * h**2, np.full(4, 1e-6))
    assert fit["slope"] == pytest.approx(2.0, abs=1e-9)
    assert fit["points"] == 4
    # an error within 2 SE of zero says nothing about the order: left out
    fit = order.fit_order(h, [0.3 * 0.25, 0.3 * 0.125, 1e-7, -1e-7], [1e-4] * 4)
    assert fit["points"] == 2 and fit["slope"] == pytest.approx(1.0)
    assert order.fit_order(h, [1e-7] * 4, [1e-4] * 4) is None


def test_order_specs_map_tati_units_and_refuse_what_has_no_answer():
    _, cells = order.specs(
        target="slp", target_params={"dataset": "two-clusters"}, step_sizes=(0.01,), beta=10.0
    )
    params = {c["sampler"]: s.sampler.params for c, s in cells}
    assert params["gla1"]["temperature"] == pytest.approx(0.1)
    assert params["gla1"]["nbeta"] == 500  # TATi's L sums the 500 points' losses
    assert params["sgld"]["step_size"] == pytest.approx(0.002)  # 2 h / beta
    assert params["sgld"]["nbeta"] == 5000  # beta n
    with pytest.raises(Exception, match="sgld has no momentum"):
        order.specs(observable="kinetic")
    with pytest.raises(Exception, match="samplers"):
        order.specs(samplers=("hmc",))
    with pytest.raises(Exception, match="beta"):
        order.specs(beta=0.0)


# ---------------------------------------------------------------------------------------------
# The orders, from simulations, against the exact errors.

HARMONIC = {"target": "harmonic", "target_params": {"a": 1.0}, "beta": 10.0, "friction": 1.0}


@pytest.mark.slow
def test_integrator_orders_on_the_harmonic_oscillator(tmp_path):
    """L = theta^2 (omega^2 = 2), beta = 10, gamma = 1: GLA1's <virial> error is first order,
    GLA2's second, BAOAB's <K> second (<p^2> beta = 1 - h^2 omega^2 / 4) while its <virial>
    is exact, SGLD's first (in its own step); each cell within 4 SE (+1% of itself) of the
    Lyapunov value."""
    steps = {
        ("gla1", "virial"): (0.125, 0.0625, 0.03125),  # exact local slopes 0.85, 0.93
        ("gla2", "virial"): (0.5, 0.25, 0.125),
        ("baoab", "kinetic"): (0.5, 0.25),
        ("sgld", "virial"): (0.125, 0.0625, 0.03125),
    }
    hessian = hessian_of("harmonic", {"a": 1.0})
    for (sampler, observable), hs in steps.items():
        got = run_study(
            tmp_path / sampler,
            observable,
            [(sampler, h) for h in hs],
            chains=4096,
            steps=4000,
            **HARMONIC,
        )
        errors, ses = [], []
        for h in hs:
            value = got[(sampler, h)][observable]
            if sampler == "sgld":
                exact = sgld_error(hessian, h, 10.0)
            else:
                virial, kinetic = exact_errors(SCHEMES[sampler], hessian, h, 1.0, 10.0)
                exact = virial if observable == "virial" else kinetic
            if sampler == "baoab":  # the closed form of docs/methods/tati.md
                assert exact == pytest.approx(-(h**2) * 2 / 4, rel=1e-9)
            assert abs(value["error"] - exact) < 4 * value["error_se"] + 0.01 * abs(exact), (
                sampler,
                h,
                value,
                exact,
            )
            errors.append(value["error"])
            ses.append(value["error_se"])
        fit = order.fit_order(hs, errors, ses)
        assert fit is not None and fit["points"] == len(hs), (sampler, fit)
        assert abs(fit["slope"] - order.EXPECTED_ORDER[sampler]) < 0.4, (sampler, fit)


def test_two_clusters_cells_match_their_exact_errors(tmp_path):
    """TATi's two clusters (SLP, MSE: a quadratic loss in 3 parameters, Hessian eigenvalues 38
    to 7981), beta = 10, gamma = 10 as in Fig. 4, at the largest stable step, where each
    integrator's bias is large: GLA1 and GLA2 against their exact errors. This checks the
    network path and TATi's units (nbeta = n, temperature 1 / beta)."""
    settings = {
        "target": "slp",
        "target_params": {"dataset": "two-clusters"},
        "beta": 10.0,
        "friction": 10.0,
        "chains": 256,
        "steps": 1600,
    }
    cells = [("gla1", 2.0**-6), ("gla2", 2.0**-6)]
    got = run_study(tmp_path, "virial", cells, **settings)
    hessian = hessian_of("slp", {"dataset": "two-clusters"})
    for (sampler, h), thermo in got.items():
        value = thermo["virial"]
        exact = exact_errors(SCHEMES[sampler], hessian, h, 10.0, 10.0)[0]
        assert abs(exact) > 0.25 and value["error_se"] < 0.1 * abs(exact)  # a visible bias
        assert abs(value["error"] - exact) < 4 * value["error_se"] + 0.01 * abs(exact), (
            sampler,
            h,
            value,
            exact,
        )


def test_the_cli_runs_a_study_and_prints_each_cell_and_slope(tmp_path):
    from clitest import jobs as cli

    out = cli(
        tmp_path,
        *("sweep", "order", "--target", "harmonic", "--target-param", "a=1"),
        *("--samplers", "gla2", "--step-sizes", "0.5,0.25", "--chains", "256", "--steps", "600"),
        "--json",
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    hessian = hessian_of("harmonic", {"a": 1.0})
    for c in result["cells"]:  # GLA2's bias at h = 0.5, 0.25: 14% and 3.2%
        exact = exact_errors("BOBA", hessian, c["step_size"], 1.0, 10.0)[0]
        assert abs(c["error"] - exact) < 4 * c["error_se"] + 0.01 * exact
    (fit,) = result["fits"]
    assert fit["sampler"] == "gla2" and fit["points"] == 2 and abs(fit["slope"] - 2.1) < 0.4
    bad = cli(tmp_path, "sweep", "order", "--samplers", "hmc", "--step-sizes", "0.1")
    assert bad.returncode != 0 and "samplers" in bad.stderr
