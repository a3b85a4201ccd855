"""The ``model`` target: a user's torch module, checked against the built-in networks, torch
itself and its checkpoints (the generic network tests of tests/test_networks.py also run on it).
"""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from apptest import run_queued
from kernel_params import stepped
from safetensors.torch import save_file

import landscapes
import samplers
from cli.main import main as cli_main
from landscapes.base import ParamError
from landscapes.surface import surface
from runs.store import Store
from tests import model_factories

FACTORIES = "tests/model_factories.py"


def model(name: str, **params):
    return landscapes.make(
        "model", factory=f"{FACTORIES}:{name}", device="cpu", dtype="float64", **params
    )


def test_model_equals_the_builtin_mlp_loss_and_gradients():
    """The digits MLP as a user's module against Basin's own ``mlp``: same loss and gradients
    at the same weights (float64, 1e-10), full data, a shared minibatch and one per chain, so
    every statistical test of the built-in networks carries over to ``model``."""
    mlp = landscapes.make("mlp", hidden_sizes=(32,), n=200, seed=0, device="cpu", dtype="float64")
    user = model("digits_mlp")
    assert user.layout == mlp.layout and user.n == mlp.n
    g = torch.Generator().manual_seed(0)
    w = 0.3 * torch.randn(5, mlp.dim, generator=g, dtype=torch.float64)
    shared = torch.randint(mlp.n, (64,), generator=g)
    own = torch.randint(mlp.n, (5, 32), generator=g)
    for batch in (None, shared, own):
        got = user.loss_and_grad(w, None if batch is None else user.batch(batch))
        want = mlp.loss_and_grad(w, None if batch is None else mlp.batch(batch))
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(user.full_loss(w), mlp.full_loss(w), rtol=1e-10, atol=1e-10)


def test_mse_is_torch_mse_loss_and_a_callable_loss_is_the_callable():
    g = torch.Generator().manual_seed(1)
    for name, loss in (("small_regression", F.mse_loss), ("callable_loss", F.huber_loss)):
        t = model(name)
        module, (x, y), _ = getattr(model_factories, name)()
        w = t.w0[None] + 0.1 * torch.randn(3, t.dim, generator=g, dtype=torch.float64)
        for c in range(3):
            net = module.double().eval()
            torch.nn.utils.vector_to_parameters(w[c], net.parameters())
            with torch.no_grad():
                want = loss(net(x.double()), y.double())
            assert float(t.loss(w)[c]) == pytest.approx(float(want), rel=1e-12)
    assert model("small_regression").loss_doc().endswith("(F.mse_loss)")


def test_w0_is_the_module_weights_and_the_global_rng_is_left_alone():
    state = torch.random.get_rng_state()
    t = model("small_classifier")
    assert torch.equal(torch.random.get_rng_state(), state)
    module = model_factories.small_classifier()[0]
    flat = torch.cat([p.detach().reshape(-1) for p in module.parameters()]).double()
    torch.testing.assert_close(t.w0, flat)
    assert list(t.layout) == [k for k, _ in module.named_parameters()]


# ---------------------------------------------------------------------------------------------
# Checkpoints: weights only, mismatches named.


def trained_state(seed: int = 5) -> dict:
    module = model_factories.small_classifier()[0]
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape, generator=g))
    return module.state_dict()


def test_a_checkpoint_gives_w0_by_torch_save_and_by_safetensors(tmp_path):
    state = trained_state()
    flat = torch.cat([v.reshape(-1) for v in state.values()]).double()
    torch.save(state, tmp_path / "step-10.pt")
    torch.save({"model_state_dict": state, "step": 10}, tmp_path / "wrapped.pt")
    save_file(state, tmp_path / "step-10.safetensors")
    for name in ("step-10.pt", "wrapped.pt", "step-10.safetensors"):
        t = model("small_classifier", checkpoint=str(tmp_path / name))
        torch.testing.assert_close(t.w0, flat)
        assert t.params["checkpoint"] == str((tmp_path / name).resolve())


class Payload:
    """Unpickling this would create ``marker``: code a checkpoint must never run."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_pickle_that_would_run_code_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "executed"
    bad = tmp_path / "evil.pt"
    with bad.open("wb") as f:
        pickle.dump({"layers.0.weight": Payload(marker)}, f, protocol=2)
    torch.save({"x": Payload(marker)}, tmp_path / "evil2.pt")
    for path in (bad, tmp_path / "evil2.pt"):
        with pytest.raises(ParamError, match="not a weights-only checkpoint") as err:
            model("small_classifier", checkpoint=str(path))
        assert err.value.field == "model.checkpoint"
    assert not marker.exists()


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: s.pop("layers.1.bias"), "has no tensor 'layers.1.bias'"),
        (
            lambda s: s.__setitem__("layers.0.weight", torch.zeros(4, 2)),
            r"'layers.0.weight' has shape \[4, 2\], the module's \[5, 2\]",
        ),
        (lambda s: s.__setitem__("head.weight", torch.zeros(1)), "'head.weight' is not a param"),
    ],
)
def test_a_checkpoint_that_does_not_fit_names_its_first_mismatched_tensor(
    tmp_path, change, message
):
    state = trained_state()
    change(state)
    torch.save(state, tmp_path / "ckpt.pt")
    with pytest.raises(ParamError, match=message) as err:
        model("small_classifier", checkpoint=str(tmp_path / "ckpt.pt"))
    assert err.value.field == "model.checkpoint"


@pytest.mark.parametrize(
    "factory, message",
    [
        ("no_colon.py", "must be 'path/to/file.py:function'"),
        (f"{FACTORIES}:missing", "has no function 'missing'"),
        ("tests/nowhere.py:make", "no such file"),
        ("torch.nn:Identity", r"must return \(module, \(inputs, targets\), loss\), got Identity"),
    ],
)
def test_a_bad_factory_is_a_clear_error_naming_model_factory(factory, message):
    with pytest.raises(ParamError, match=message) as err:
        landscapes.make("model", factory=factory, device="cpu")
    assert err.value.field == "model.factory"


# ---------------------------------------------------------------------------------------------
# BatchNorm and Dropout: eval mode, buffers fixed.


def test_batchnorm_and_dropout_run_in_eval_mode_with_buffers_held_fixed():
    """What Basin does with them, as its statement says: Dropout is off (the loss is
    deterministic), BatchNorm normalises with its running statistics (the eval-mode module's
    output), and those buffers are neither sampled nor changed by sampling."""
    t = model("batchnorm_dropout")
    module, (x, y), _ = model_factories.batchnorm_dropout()
    assert "eval mode (BatchNorm1d, Dropout)" in t.describe_modes()
    assert "held fixed, not sampled" in t.describe_modes()
    assert t.dim == sum(p.numel() for p in module.parameters())  # buffers are not sampled
    assert not any(k.startswith("norm.running") for k in t.layout)
    w = t.w0.expand(4, -1).clone()
    assert torch.equal(t.loss(w), t.loss(w))  # no dropout noise
    net = module.double().eval()
    with torch.no_grad():
        want = F.mse_loss(net(x.double()), y.double())
        train_mode = F.mse_loss(net.train()(x.double()), y.double())
    assert float(t.loss(w)[0]) == pytest.approx(float(want), rel=1e-12)
    assert abs(float(train_mode) - float(want)) > 1e-3  # the modes differ on this module
    before = {k: v.clone() for k, v in t.buffers.items()}
    kernel = samplers.make("sgld", step_size=1e-4, nbeta=50.0, batch_size=32)
    g = torch.Generator().manual_seed(0)
    state = kernel.init(w, t, g)
    kernel.run(state, t, g, 20)
    assert all(torch.equal(before[k], t.buffers[k]) for k in before)


# ---------------------------------------------------------------------------------------------
# Everything Basin has works on it.


@pytest.mark.parametrize("name", sorted(samplers.REGISTRY))
def test_every_sampler_runs_on_a_model(name):
    t = model("small_regression")
    # NUTS doubles its tree until it turns: at a tiny step that is its depth limit each step
    params = stepped(name, 1e-4) | ({"max_depth": 3} if name == "nuts" else {})
    kernel = samplers.make(name, **params)
    g = torch.Generator().manual_seed(0)
    state = kernel.init(t.initial(g, 4), t, g)
    state, info = kernel.run(state, t, g, 10)
    assert torch.isfinite(state.position).all() and not info.diverged.any()


@pytest.mark.parametrize("metric", ["monge", "shampoo"])
def test_sgrld_metrics_see_the_model_s_tensors(metric):
    """Shampoo's blocks are the module's named tensors (its layout): a run stays finite and
    moves every tensor."""
    t = model("batchnorm_dropout")
    kernel = samplers.make("sgrld", metric=metric, step_size=1e-5, batch_size=32)
    g = torch.Generator().manual_seed(0)
    state, info = kernel.run(kernel.init(t.initial(g, 3), t, g), t, g, 20)
    assert torch.isfinite(state.position).all() and not info.diverged.any()
    moved = t.unflatten(state.position - t.w0)
    assert all(bool((v != 0).any()) for v in moved.values()), list(t.layout)


def test_surfaces_of_a_model_pca_random_and_hessian():
    t = model("small_regression")
    rng = np.random.default_rng(0)
    traj = t.w0.numpy()[None, None] + 0.01 * np.cumsum(rng.standard_normal((2, 8, t.dim)), 1)
    for directions in ("pca", "random", "hessian"):
        out = surface(t, traj, directions=directions, grid=3, reference="last")
        theta = torch.from_numpy(traj[0, -1])[None]
        assert out["reference_loss"] == pytest.approx(float(t.full_loss(theta)[0]), rel=1e-10)


def _cli(home: Path, monkeypatch, *args: str) -> str:
    monkeypatch.setenv("BASIN_HOME", str(home))
    assert cli_main(list(args)) == 0
    return ""


def test_llc_run_starts_at_the_checkpoint_and_exports(tmp_path, monkeypatch, capsys):
    """An LLC run on a model through jobs: w0 (auto) is the checkpoint's weights, the summary
    says the loss and the modes, and the run exports."""
    state = trained_state()
    torch.save(state, tmp_path / "w.pt")
    args = [
        "run", "--target", "model", "--target-param", f"factory={FACTORIES}:small_classifier",
        "--target-param", f"checkpoint={tmp_path / 'w.pt'}", "--sampler", "sgld",
        "--param", "step_size=1e-4", "--chains", "2", "--steps", "200", "--observe", "llc",
        "--dtype", "float64", "--json",
    ]  # fmt: skip
    _cli(tmp_path / "home", monkeypatch, *args)
    summary = json.loads(capsys.readouterr().out)
    llc = summary["observables"]["llc"]
    assert llc["w0"] == "truth"
    target = model("small_classifier", checkpoint=str(tmp_path / "w.pt"))
    assert llc["baseline_loss"] == pytest.approx(float(target.full_loss(target.w0[None])[0]))
    assert summary["modes"] == target.describe_modes()
    assert summary["loss_function"] is None  # cross-entropy: no regression convention to state
    assert summary["loss"]["mean"] < 1e9  # the run's own loss statistics are still there
    store = Store(tmp_path / "home")
    run_id = store.list()[0].id
    np.testing.assert_allclose(store.get_array(run_id, "w0"), target.w0.numpy())
    _cli(tmp_path / "home", monkeypatch, "export", run_id, "--out", str(tmp_path / "r.npz"))
    exported = np.load(tmp_path / "r.npz")
    np.testing.assert_allclose(exported["loss"].T, store.read(run_id)["loss"])


def test_sweep_checkpoints_gives_the_llc_at_each_by_step(tmp_path, monkeypatch, capsys):
    """One LLC run per checkpoint, ordered by the step in the file name; each cell's training
    loss is the full-data loss at that checkpoint, and its lambda_hat is the run's."""
    for step, seed in ((200, 1), (5, 2), (40, 3)):
        torch.save(trained_state(seed), tmp_path / f"step-{step}.pt")
    args = [
        "sweep", "checkpoints", "--factory", f"{FACTORIES}:small_classifier",
        "--checkpoints", str(tmp_path / "step-*.pt"), "--sampler", "sgld",
        "--param", "step_size=1e-4", "--chains", "2", "--steps", "100", "--dtype", "float64",
        "--submit-only",
    ]  # fmt: skip
    _cli(tmp_path / "home", monkeypatch, *args)
    sweep_id = capsys.readouterr().out.strip()
    run_queued(tmp_path / "home")  # the pool's work, here, with a worker's threads
    _cli(tmp_path / "home", monkeypatch, "sweep", "show", sweep_id, "--json")
    result = json.loads(capsys.readouterr().out)
    cells = result["cells"]
    assert [c["step"] for c in cells] == [5, 40, 200]
    store = Store(tmp_path / "home")
    for cell, seed in zip(cells, (2, 3, 1), strict=True):
        assert cell["status"] == "completed" and cell["llc"] is not None
        t = model_factories.small_classifier()[0]
        t.load_state_dict(trained_state(seed))
        target = model("small_classifier", checkpoint=str(tmp_path / cell["checkpoint"]))
        assert cell["train_loss"] == pytest.approx(float(target.full_loss(target.w0[None])[0]))
        summary = store.get(cell["run_id"]).summary["observables"]["llc"]
        assert cell["llc"] == summary["mean"] and cell["se"] == summary["se"]
    assert math.isfinite(cells[-1]["llc"])


def test_sweep_checkpoints_refuses_a_bad_glob_and_a_mismatch_before_queueing(tmp_path, monkeypatch):
    torch.save({"layers.0.weight": torch.zeros(1)}, tmp_path / "step-1.pt")
    base = ["sweep", "checkpoints", "--factory", f"{FACTORIES}:small_classifier"]
    monkeypatch.setenv("BASIN_HOME", str(tmp_path / "home"))
    assert cli_main([*base, "--checkpoints", str(tmp_path / "none-*.pt")]) == 2
    assert cli_main([*base, "--checkpoints", str(tmp_path / "step-*.pt")]) == 2
    assert Store(tmp_path / "home").list() == []


@pytest.mark.parametrize(
    "name, params",
    [("mlp", {"dataset": "two-clusters", "n": 80}), ("dln", {"widths": (3, 4, 2), "n": 90})],
)
def test_loss_convention_mean_is_the_sum_over_outputs_divided_by_their_count(name, params):
    """ "mean" is F.mse_loss on the network's outputs, on every path that computes the loss:
    the forward pass, the DLN's closed form from moments and the MLP's plane of a surface."""
    made = {
        c: landscapes.make(name, loss_convention=c, device="cpu", dtype="float64", **params)
        for c in ("sum", "mean")
    }
    t = made["mean"]
    w = 0.5 * torch.randn(3, t.dim, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    out = t.predict(w, t.x)
    want = torch.stack([F.mse_loss(out[c], t.y) for c in range(3)])
    torch.testing.assert_close(t.loss(w), want, rtol=1e-12, atol=0)
    torch.testing.assert_close(t.full_loss(w), want, rtol=1e-10, atol=0)
    outputs = out.shape[-1]
    assert outputs > 1 or name == "mlp"
    torch.testing.assert_close(made["sum"].full_loss(w), outputs * want, rtol=1e-10, atol=0)
    a, b = torch.tensor([0.0, 0.3, 0.3]), torch.tensor([0.0, 0.0, -0.2])
    plane = t.plane_loss(w[0], w[1:], a.double(), b.double(), chunk=2)
    points = w[0] + a.double()[:, None] * w[1] + b.double()[:, None] * w[2]
    torch.testing.assert_close(plane, t.full_loss(points), rtol=1e-10, atol=0)


def test_a_regression_run_says_its_loss_convention(tmp_path, monkeypatch, capsys):
    args = ["run", "--target", "rrr", "--target-param", "n=200", "--loss-convention", "mean",
            "--sampler", "sgld", "--param", "step_size=1e-4", "--chains", "2", "--steps", "50",
            "--json"]  # fmt: skip
    _cli(tmp_path, monkeypatch, *args)
    summary = json.loads(capsys.readouterr().out)
    assert (
        summary["loss_function"]
        == landscapes.make("rrr", n=200, loss_convention="mean", device="cpu").loss_doc()
    )
    assert "F.mse_loss" in summary["loss_function"] and "init" in summary["loss"]
