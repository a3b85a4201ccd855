"""Posterior-predictive metrics (samplers.predictive; Yu et al. Sec. 4.1) and the run's
"predictive" observable: each metric against a direct numpy computation on a small network with
known weights, ECE on confidences whose bins are known by hand, the input curvature of a linear
softmax model against its exact input Hessian, the batched accumulator against the all-at-once
function, and the observable end to end through ``python -m jobs run``."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from clitest import jobs as cli

import landscapes
import samplers
from landscapes import ParamError
from runs.loop import execute
from runs.spec import SpecError, parse_spec
from runs.store import Store
from samplers import predictive


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    """One intra-op thread here and in the CLI's process: these runs are small, and on a
    shared 2-core machine two threads stalled at their barriers whenever another process held
    a core (the same 300-step run: 0.3 s with one thread, 0.3 to 22 s with two)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    yield
    torch.set_num_threads(threads)


def numpy_softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def numpy_mlp_logits(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """[S, N, 2] logits of the moons MLP 2-3-2 (ReLU), parameters in torch.nn.Sequential's order."""
    w0, b0 = w[:, :6].reshape(-1, 3, 2), w[:, 6:9]
    w1, b1 = w[:, 9:15].reshape(-1, 2, 3), w[:, 15:17]
    h = np.maximum(np.einsum("sij,nj->sni", w0, x) + b0[:, None], 0)
    return np.einsum("sij,snj->sni", w1, h) + b1[:, None]


def numpy_ece(confidence: np.ndarray, correct: np.ndarray, bins: int = 30) -> float:
    """sum_i P(i) |acc_i - conf_i| over the bins (i/bins, (i+1)/bins], written out."""
    total = 0.0
    for i in range(bins):
        inside = (confidence > i / bins) & (confidence <= (i + 1) / bins)
        if inside.any():
            share = inside.mean()
            total += share * abs(correct[inside].mean() - confidence[inside].mean())
    return total


def test_metrics_equal_a_direct_numpy_computation():
    target = landscapes.make(
        "mlp", device="cpu", dtype="float64", dataset="moons", hidden_sizes=(3,), n=40, seed=2
    )
    assert target.dim == 17 and len(target.y_test) == 10
    g = torch.Generator().manual_seed(1)
    draws = 2.0 * torch.randn(7, target.dim, generator=g, dtype=torch.float64)
    got = predictive.metrics(target, draws)

    x, y = target.x_test.numpy(), target.y_test.numpy()
    logits = numpy_mlp_logits(draws.numpy(), x)  # [S, N, 2]
    log_prob = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_prob, y[None, :, None], -1)[..., 0]  # [S, N]
    top = picked.max(0)
    ensemble = top + np.log(np.exp(picked - top).mean(0))  # log (1/S) sum_s p(y | x, theta_s)
    averaged = numpy_softmax(logits).mean(0)  # [N, 2]
    confidence, correct = averaged.max(-1), averaged.argmax(-1) == y
    assert got["draws"] == 7 and got["split"] == "test"
    assert got["log_p"] == pytest.approx(ensemble.mean(), rel=1e-12)
    assert got["mean_single_log_p"] == pytest.approx(picked.mean(), rel=1e-12)
    assert got["accuracy"] == pytest.approx(correct.mean(), abs=1e-15)
    assert got["confidence"] == pytest.approx(confidence.mean(), rel=1e-12)
    assert got["ece"] == pytest.approx(numpy_ece(confidence, correct), rel=1e-12, abs=1e-15)
    assert got["curvature_draws"] == 7 and math.isfinite(got["curvature"])


def test_ece_on_hand_binned_confidences():
    # bins (i/30, (i+1)/30]: 0.95 -> (28/30, 29/30], twice (one right); 1.0 -> the last bin;
    # 0.55 -> (16/30, 17/30]; 0.52 -> (15/30, 16/30]
    confidence = torch.tensor([0.95, 0.95, 1.0, 0.55, 0.52], dtype=torch.float64)
    correct = torch.tensor([True, False, True, True, True])
    want = 2 / 5 * abs(0.5 - 0.95) + 0 + 1 / 5 * (1 - 0.55) + 1 / 5 * (1 - 0.52)
    got = predictive.expected_calibration_error(confidence, correct)
    assert float(got) == pytest.approx(want, rel=1e-14)
    # 0.5 closes the bin (14/30, 15/30]; a hair above opens the next: no cancelling there
    edge = torch.tensor([0.5, 0.5 + 1e-9], dtype=torch.float64)
    got = predictive.expected_calibration_error(edge, torch.tensor([True, False]))
    assert float(got) == pytest.approx(0.5 * (1 - 0.5) + 0.5 * (0.5 + 1e-9), rel=1e-14)


def test_accumulated_batches_of_chains_equal_all_draws_at_once():
    target = landscapes.make(
        "mlp", device="cpu", dtype="float64", dataset="digits", hidden_sizes=(8,), n=200, seed=1
    )
    g = torch.Generator().manual_seed(3)
    steps, chains = 9, 4
    draws = 0.5 * torch.randn(steps, chains, target.dim, generator=g, dtype=torch.float64)
    flat = draws.reshape(steps * chains, -1)  # step-major, as the accumulator counts them
    whole = predictive.metrics(target, flat, curvature_draws=5)
    acc = predictive.Accumulator(target, "test", chains, steps * chains, curvature_draws=5)
    for first, last in ((0, 2), (2, 3), (3, 9)):  # uneven blocks of kept steps
        acc.add(draws[first:last])
    parts = acc.result()
    assert parts.keys() == whole.keys() == set(predictive.KEYS)
    for key, value in whole.items():
        assert parts[key] == (pytest.approx(value, rel=1e-12) if key != "split" else value), key
    assert whole["curvature_draws"] == 5
    # chains left out (diverged): the same as the metrics of the others' draws alone
    keep = torch.tensor([True, False, True, True])
    kept = predictive.metrics(target, draws[:, keep].reshape(-1, target.dim))
    some = acc.result(keep)
    assert some["draws"] == steps * 3
    for key in ("log_p", "mean_single_log_p", "accuracy", "ece", "confidence"):
        assert some[key] == pytest.approx(kept[key], rel=1e-12), key
    assert predictive.Accumulator(target, "test", chains).result()["log_p"] is None  # no draws


def test_jensen_on_sampled_draws_and_the_validation_split():
    target = landscapes.make(
        "mlp", device="cpu", dtype="float64", prior="gaussian", dataset="digits",
        hidden_sizes=(8,), n=400, seed=0,
    )  # fmt: skip
    kernel = samplers.make("sgld", step_size=2e-4, batch_size=50)
    g = torch.Generator().manual_seed(0)
    state = kernel.init(target.initial(g, 4), target, g)
    _, info = kernel.run(state, target, g, 60, positions=True)
    draws = info.position[20::4].reshape(-1, target.dim)  # after a burn-in, thinned
    for split in ("test", "val"):
        got = predictive.metrics(target, draws, split=split)
        assert got["split"] == split and got["draws"] == 40
        assert got["log_p"] > got["mean_single_log_p"]  # strictly: the draws differ
        assert got["accuracy"] > 0.3  # above the 0.1 of chance after 60 steps
    with pytest.raises(ParamError) as info:  # no validation set at the full 1437 images
        whole = landscapes.make("slp", device="cpu", dtype="float64", dataset="digits")
        predictive.metrics(whole, torch.zeros(1, whole.dim, dtype=torch.float64), split="val")
    assert info.value.field == "split"


def exact_curvature(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per point: |lambda_max| / (|grad| + 1e-6) of a linear softmax model's input Hessian
    W^T (diag(p) - p p^T) W (gradient W^T (p - e_y)), and |lambda_2| / |lambda_max|."""
    weight, bias = w[:640].reshape(10, 64), w[640:]
    p = numpy_softmax(x @ weight.T + bias)  # [N, 10]
    mean = p @ weight  # [N, 64]: W^T p
    hessian = (weight.T[None] * p[:, None, :]) @ weight - mean[:, :, None] * mean[:, None, :]
    eig = np.sort(np.abs(np.linalg.eigvalsh(hessian)), -1)  # [N, 64], by magnitude
    grad = (p - np.eye(10)[y]) @ weight
    return eig[:, -1] / (np.linalg.norm(grad, axis=-1) + 1e-6), eig[:, -2] / eig[:, -1]


def test_curvature_of_a_linear_softmax_model_is_its_exact_input_hessians():
    target = landscapes.make("slp", device="cpu", dtype="float64", dataset="digits")
    g = torch.Generator().manual_seed(0)
    draws = 0.3 * torch.randn(3, target.dim, generator=g, dtype=torch.float64)
    x, y = target.x_test, target.y_test
    got = predictive.input_curvature(target, draws, x, y).numpy()  # [S, N]
    pairs = [exact_curvature(w, x.numpy(), y.numpy()) for w in draws.numpy()]
    exact, gap = (np.stack([pair[i] for pair in pairs]) for i in (0, 1))  # [S, N] each
    # Power iteration's Rayleigh quotient errs by ~(lambda_2 / lambda_1)^(2 x 20) relative:
    # below 0.6^40 ~ 1e-9 (times the start's weights) where the top eigenvalue stands out.
    separated = gap < 0.6
    assert separated.mean() > 0.5
    np.testing.assert_allclose(got[separated], exact[separated], rtol=1e-3)
    assert (got <= exact * (1 + 1e-9)).all()  # a Rayleigh quotient never exceeds lambda_max
    # the metric: the mean over the fixed 10% subset (36 of 360) and the draws (3 <= 20)
    subset = predictive.curvature_subset(len(y))
    assert len(subset) == 36 and len(set(subset.tolist())) == 36
    value = predictive.metrics(target, draws)["curvature"]
    on_subset = predictive.input_curvature(target, draws, x[subset], y[subset])
    assert value == pytest.approx(float(on_subset.mean()), rel=1e-12)
    # its points converge more slowly where lambda_2 is near lambda_1: 1% on the mean
    assert value == pytest.approx(exact[:, subset.numpy()].mean(), rel=1e-2)


def test_predictive_needs_a_classification_network():
    for name, params in (("mlp", {"dataset": "two-clusters", "n": 20}), ("banana", {})):
        target = landscapes.make(name, device="cpu", dtype="float64", **params)
        with pytest.raises(ParamError) as info:
            predictive.metrics(target, torch.zeros(1, target.dim, dtype=torch.float64))
        assert info.value.field == "observables"
    base = {
        "target": {"name": "mlp", "params": {"dataset": "two-clusters"}},
        "sampler": {"name": "sgld"},
        "observables": ["predictive"],
    }
    for target in ({"name": "mlp", "params": {"dataset": "two-clusters"}}, {"name": "banana"}):
        with pytest.raises(SpecError) as info:
            parse_spec({**base, "target": target})
        assert info.value.field == "observables" and "classification" in info.value.message
    with pytest.raises(SpecError) as info:
        parse_spec({**base, "target": {"name": "slp", "params": {"dataset": "digits"}},
                    "record": {"positions": "none"}})  # fmt: skip
    assert info.value.field == "record.positions"
    spec = parse_spec({**base, "target": {"name": "slp", "params": {"dataset": "moons"}}})
    assert spec.observables == ["predictive"]


RUN = [
    *("--target", "mlp", "--target-param", "dataset=digits", "--target-param", "hidden_sizes=16"),
    *("--target-param", "prior=gaussian", "--target-param", "n=500"),
    *("--sampler", "sgld", "--param", "step_size=1e-4", "--param", "batch_size=100"),
    *("--chains", "4", "--steps", "300"),
    *("--thin", "10", "--burn-in", "100", "--seed", "1", "--compile", "never"),
    *("--observe", "predictive"),
]


def test_the_observable_end_to_end_through_the_cli(tmp_path, monkeypatch, capsys):
    out = cli(tmp_path, "run", *RUN, "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    block = summary["observables"]["predictive"]
    assert set(block) == set(predictive.KEYS) and block["split"] == "test"
    assert block["draws"] == 20 * 4  # steps 100, 110, ..., 290 of 4 chains
    assert block["curvature_draws"] == 20
    numbers = [v for k, v in block.items() if k != "split"]
    assert all(isinstance(v, (int, float)) and math.isfinite(v) for v in numbers)
    assert block["accuracy"] > 0.5 and block["log_p"] >= block["mean_single_log_p"]
    assert 0 <= block["ece"] <= 1 and 0.1 <= block["confidence"] <= 1
    # the plain-text output, a line a metric
    from cli.main import main

    monkeypatch.setenv("BASIN_HOME", str(tmp_path))
    assert main(["show", summary["run_id"]]) == 0
    lines = capsys.readouterr().out.splitlines()
    shown = {
        line.split(":")[0]: line.split(": ")[1].split()[0]
        for line in lines
        if line.startswith("predictive.")
    }
    assert set(shown) == {f"predictive.{k}" for k in predictive.KEYS[2:-1]}
    assert float(shown["predictive.accuracy"]) == pytest.approx(block["accuracy"], rel=1e-5)


def test_a_resumed_run_gives_the_same_metrics(tmp_path):
    """A run cancelled part way and resumed replays its draws from the seed: the observer,
    made anew, counts each draw once, so the summary is an uninterrupted run's."""
    spec = parse_spec(
        {
            "target": {
                "name": "mlp",
                "params": {
                    "dataset": "digits",
                    "hidden_sizes": [6],
                    "n": 200,
                    "prior": "horseshoe",
                },
            },
            "sampler": {"name": "sgld", "params": {"step_size": 1e-4, "batch_size": 50}},
            "chains": 3,
            "steps": 200,
            "burn_in": 50,
            "thin": 5,
            "compile": "never",
            "flush_every": 16,
            "observables": ["predictive"],
        }
    )
    store = Store(tmp_path)
    whole = execute(spec, store, store.create(spec.model_dump(mode="json")))
    cut = store.create(spec.model_dump(mode="json"))
    calls = iter(range(10**6))
    part = execute(spec, store, cut, should_stop=lambda: next(calls) >= 6)
    assert part["status"] == "cancelled" and 0 < part["steps"] < 200
    store.requeue(cut)
    resumed = execute(spec, store, cut)
    assert resumed["status"] == "completed"
    block = whole["observables"]["predictive"]
    assert block["draws"] == 30 * 3
    assert resumed["observables"]["predictive"] == block
