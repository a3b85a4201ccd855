"""devinterp's side of the LLC benchmark: the peer estimator, devinterp 1.3.2 on torch 2.13.0 (CPU).

Runs in its own virtualenv, bench/.devinterp-venv (``setup_devinterp()`` below, or
``python -m bench.peer_devinterp setup`` with the project's Python), from the repository root:

    bench/.devinterp-venv/bin/python -m bench.peer_devinterp normal-crossing [--draws 5000]
    bench/.devinterp-venv/bin/python -m bench.peer_devinterp dln --w0-file W.npz --data-file D.npz
    bench/.devinterp-venv/bin/python -m bench.peer_devinterp module --weights-file W.pt \
        --data-file D.npz
    bench/.devinterp-venv/bin/python -m bench.peer_devinterp rrr --mhn 4,3,8

and prints ONE JSON line on stdout (devinterp's warnings are silenced; ``--warnings`` sends them
to stderr). It imports none of the
project's packages (landscapes, samplers, jobs): only devinterp, torch, numpy and the standard
library. ``seconds`` is the wall time of the one call of
``devinterp.slt.sampler.estimate_learning_coeff_with_summary`` (which, inside, computes the
baseline loss and runs every chain), excluding imports and data generation.

What devinterp 1.3.2 does (read from the installed package, devinterp/slt/sampler.py,
devinterp/backends/default/slt/sampler.py, devinterp/slt/llc.py, devinterp/optim/sgld.py,
devinterp/utils.py):

* SGLD (``devinterp.optim.SGLD``, deprecated in 1.3.2 in favour of ``SGMCMC.sgld`` but what the
  test uses): w <- w - (lr/2) (nbeta grad L_m(w) + localization (w - w_init)) + sqrt(lr) N(0, I),
  with L_m the minibatch loss returned by ``evaluate``; the inverse temperature is the optimizer
  kwarg ``nbeta`` (``temperature`` is a deprecated alias). Same convention as Basin's step
  (lr = eps).
* LLC per chain = nbeta * (mean over draws of the recorded loss - init_loss); the recorded loss of
  a draw is the minibatch loss of the forward pass at the current weights *before* that step's
  update (so with no burn-in, draw 0 is the loss at w_init). ``llc/std`` is torch's unbiased std
  over chains.
* init_loss (when not passed): ``get_init_loss_multi_batch(loader, num_chains * grad_accum_steps,
  ...)``, the mean of the losses of the first min(num_chains, len(loader)) minibatches of a fresh
  pass of the loader (shuffled by the global torch RNG when the loader shuffles). Full data only
  when batch_size = n (the normal-crossing test); for ``dln`` it is 4 batches of 500 = 2000 of the
  10000 points. We also report ``init_loss_full`` (full-data loss at w_init) and
  ``llc_mean_full_init`` (the same draws against that baseline), computed after the timed call.
* Its default nbeta is ``default_nbeta(loader) = batch_size / log(batch_size)`` (batch size, not
  n!); we always pass nbeta = n / log n explicitly.
* Chains run one after another in this process (cores=1, the default); each chain deep-copies the
  model, cloudpickle-round-trips the DataLoader and ``evaluate``, builds a fresh optimizer and calls
  ``torch.manual_seed(seeds[c])`` with seeds = ``np.random.SeedSequence(seed).generate_state(C)``.
  Minibatches come from cycling the DataLoader.
* num_burnin_steps defaults to 0 (and the test uses 0).

Case ``normal-crossing`` follows devinterp's own accuracy test,
tests/slt/sampler_accuracy_test.py::test_accuracy_normalcrossing in timaeus-research/devinterp
(the version at commit fc4be68f63f5eacba1ed829418cc58ab778a7300, whose API, ``sample(...,
optimizer_kwargs=...)``, ``devinterp.slt.llc.LLCEstimator``, ``devinterp.test_utils.Polynomial``,
``devinterp.utils.default_nbeta``, matches 1.3.2; later versions move the sampling into a conftest
fixture with a ``sampling_method_kwargs`` argument 1.3.2 does not have). Parametrization
powers=[1, 2], true_lc=0.25, sampling_method=SGLD:

* data (the ``generated_normalcrossing_dataset`` fixture): torch.manual_seed(42),
  np.random.seed(42); x = torch.normal(0, 2, (1000,)); y = 0.25 * torch.normal(0, 1, (1000,));
  DataLoader(TensorDataset(x, y), batch_size=1000, shuffle=True);
* model ``devinterp.test_utils.Polynomial([1, 2])``: f(x) = x * w1 * w2^2, weights start at 0;
* torch.manual_seed(42), np.random.seed(42) before building the model; seed=42 passed to the
  sampler;
* lr = 4e-4, 10 chains x 5000 draws, no burn-in, nbeta = default_nbeta(1000) = 1000 / log 1000;
  optimizer_kwargs = {lr, nbeta} only, i.e. localization = 0 (SGLD's default: no pull toward the
  start), no bounding box, no weight decay;
* loss ``devinterp.utils.evaluate_mse`` = torch.nn.functional.mse_loss(model(x), y) (mean
  reduction: it averages over samples and over outputs; here the output is scalar);
* init_loss = get_init_loss_multi_batch(loader, 10, model, evaluate_mse, device="cpu") = the
  full-data loss at w = 0 (one batch of 1000).

The test calls ``sample`` + ``LLCEstimator`` directly; we call
``estimate_learning_coeff_with_summary`` with the same settings, which does exactly that (``--api
sample`` runs the test's literal calls; both give bit-identical LLCs).

Case ``dln``: f(x) = W_M ... W_1 x (torch Linear layers without bias, W_l of shape H_l x H_{l-1}),
loss = per-sample sum over outputs of the squared error, mean over the minibatch, started at the
generating weights W1..WM (``--w0-file``), data from ``--data-file`` (x [n, H0], y [n, HM]),
float32, SGLD with localization 1, nbeta = n / log n, batch size 500 (shuffled), 4 chains x 5000
draws, no burn-in, lr 1e-6 (the default widths 5,4,3,4 at their default weights have a largest
loss-Hessian eigenvalue of ~281, so plain gradient steps are stable below lr ~ 4 / (nbeta 281) =
1.3e-5; 1e-6 is ~8% of that). With 4 batches of 500 the baseline L_B(w_init) has a sampling error
of about sd(per-sample loss) / sqrt(2000) ~ 0.016, i.e. ~17 in LLC units at nbeta ~ 1086: compare
``llc_mean_full_init`` too.

Case ``module``: a user's nn.Module, the digits MLP of examples/digits_mlp.py (Linear(64, 128),
ReLU, Linear(128, 10), parameter names layers.0 / layers.1) rebuilt here in plain torch, its
weights the state dict ``--weights-file`` (torch.load(weights_only=True)), data ``--data-file``
(x [n, 64] float32, y [n] int64), loss F.cross_entropy (mean over the minibatch), SGLD lr 1e-5,
localization 1, nbeta = n / log n, batch 128 (shuffled), 4 chains x 2000 draws, no burn-in.
init_loss is 4 minibatches of 128 (512 of the 1437 points): compare ``llc_mean_full_init``.

Case ``rrr``: devinterp's tests/slt/rrr_test.py::test_accuracy_rrr, (m, h, n) from ``--mhn``:
torch.manual_seed(42), np.random.seed(42); x = torch.randn(1000, m); y = torch.randn(1000, n);
then ``devinterp.test_utils.ReducedRankRegressor(m, h, n)`` (fc1, fc2, no bias) built from the
RNG where the data left it (as the test does), Adam lr 0.01 for 5000 full-batch steps on
F.mse_loss; SGLD lr 6e-4, localization 1, nbeta = default_nbeta(loader) = 1000 / log 1000,
full batch, 3 chains x 2000 draws, seed 42, loss evaluate_mse, init_loss from
get_init_loss_multi_batch (one batch: the full data). The repository's versions of the test
differ: the one at d59dafd samples 10 chains at lr 0.0006 with LLCEstimator's default nbeta;
the one at 08b560b samples 3 chains at lr 0.00006 with nbeta = default_nbeta and init_loss from
get_init_loss_multi_batch. The defaults here (3 chains, lr 6e-4) mix them, as Basin's issue
asked; ``--lr 6e-5`` gives the later test's step.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
DEVINTERP_VENV = BENCH / ".devinterp-venv"
DEVINTERP_PYTHON = DEVINTERP_VENV / "bin" / "python"
TORCH_PIN = "torch==2.13.0"  # the local CPU wheel; an unpinned torch pulls the CUDA build
DEVINTERP_PIN = "devinterp==1.3.2"

CASE_DEFAULTS = {
    "normal-crossing": {
        "n": 1000,
        "chains": 10,
        "draws": 5000,
        "lr": 4e-4,
        "localization": 0.0,
        "batch_size": None,
        "seed": 42,
        "data_seed": 42,
    },
    "dln": {
        "n": 10_000,
        "chains": 4,
        "draws": 5000,
        "lr": 1e-6,
        "localization": 1.0,
        "batch_size": 500,
        "seed": 0,
        "data_seed": 0,
    },
    "module": {
        "n": 1437,  # replaced by the data file's length
        "chains": 4,
        "draws": 2000,
        "lr": 1e-5,
        "localization": 1.0,
        "batch_size": 128,
        "seed": 0,
        "data_seed": 0,
    },
    "rrr": {
        "n": 1000,
        "chains": 3,
        "draws": 2000,
        "lr": 6e-4,
        "localization": 1.0,
        "batch_size": 1000,
        "seed": 42,
        "data_seed": 42,
    },
}


def setup_devinterp(venv: Path = DEVINTERP_VENV, python: str = sys.executable) -> Path:
    """Create ``venv`` with torch 2.13.0 (CPU) and devinterp 1.3.2; return its python.

    torch goes in first, pinned, then devinterp with the pin repeated so that pip's resolver
    keeps the installed torch (devinterp 1.3.2 asks only for torch>=2.0.1). The venv gets a
    ``.gitignore`` of ``*`` (as Python >= 3.13's venv writes), so git ignores it wherever it lies.
    """
    venv = Path(venv)
    if not (venv / "bin" / "python").exists():
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
    (venv / ".gitignore").write_text("# created by bench/peer_devinterp.py\n*\n")
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
    subprocess.run([*pip, TORCH_PIN], check=True)
    subprocess.run([*pip, TORCH_PIN, DEVINTERP_PIN], check=True)
    check = (
        "import importlib.metadata as m, torch, devinterp.slt.sampler; "
        "assert torch.__version__.split('+')[0] == '2.13.0', torch.__version__; "
        "print('devinterp', m.version('devinterp'), 'torch', torch.__version__)"
    )
    subprocess.run([str(venv / "bin" / "python"), "-c", check], check=True)
    return venv / "bin" / "python"


# ---------------------------------------------------------------------------------------------
# The two cases. Everything below imports torch/devinterp lazily, so that setup_devinterp()
# runs under the project's Python.


def normal_crossing_task(args):
    """devinterp's fixture + model (see the module doc); returns model, loader, evaluate, extras."""
    import numpy as np
    import torch
    from devinterp.test_utils import Polynomial
    from devinterp.utils import evaluate_mse
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(args.data_seed)
    np.random.seed(args.data_seed)
    sigma = 0.25
    x = torch.normal(0, 2, size=(args.n,))
    y = sigma * torch.normal(0, 1, size=(args.n,))
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    model = Polynomial(args.powers)
    positive = [p for p in args.powers if p > 0]
    extras = {
        "powers": args.powers,
        "sigma": sigma,
        "true_llc": min(1 / (2 * p) for p in positive) if positive else None,
        "loss": "devinterp.utils.evaluate_mse = F.mse_loss(model(x), y), reduction mean "
        "(over samples and outputs; the output is scalar)",
        "model": "devinterp.test_utils.Polynomial: x * prod(w**powers), w starts at 0",
    }
    return model, loader, evaluate_mse, (x, y), extras


def dln_task(args):
    import numpy as np
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    if args.w0_file:
        with np.load(args.w0_file) as f:
            names = sorted((k for k in f.files if k.startswith("W")), key=lambda k: int(k[1:]))
            layers = [np.asarray(f[k], dtype=np.float64) for k in names]
        if names != [f"W{l}" for l in range(1, len(names) + 1)] or not layers:
            raise SystemExit(f"{args.w0_file}: expected arrays W1..WM, got {names}")
        widths = [layers[0].shape[1]] + [w.shape[0] for w in layers]
        if args.widths and list(args.widths) != widths:
            raise SystemExit(f"--widths {args.widths} but {args.w0_file} has widths {widths}")
        rank_source = "w0-file"
    else:
        widths = list(args.widths or (5, 4, 3, 4))
        g = np.random.default_rng(args.seed)
        layers = [  # Xavier-normal, W_l of shape H_l x H_{l-1}; first layer keeps `rank` rows
            math.sqrt(2.0 / (widths[l] + widths[l + 1]))
            * g.standard_normal((widths[l + 1], widths[l]))
            for l in range(len(widths) - 1)
        ]
        layers[0][args.rank :] = 0.0
        rank_source = "generated (Xavier-normal, seed, first layer keeps --rank rows)"
    for l, w in enumerate(layers):
        if w.shape != (widths[l + 1], widths[l]):
            raise SystemExit(f"W{l + 1} has shape {w.shape}, expected {(widths[l + 1], widths[l])}")
    product = layers[0]
    for w in layers[1:]:
        product = w @ product

    if args.data_file:
        with np.load(args.data_file) as f:
            x, y = np.asarray(f["x"], np.float32), np.asarray(f["y"], np.float32)
        if x.shape[1] != widths[0] or y.shape[1] != widths[-1] or len(x) != len(y):
            raise SystemExit(f"data x {x.shape}, y {y.shape} do not fit widths {widths}")
        args.n = len(x)
        data_source = str(args.data_file)
    else:
        g = np.random.default_rng(args.data_seed + 1_000_003)
        x = g.uniform(-10, 10, (args.n, widths[0]))
        y = x @ product.T + 0.5 * g.standard_normal((args.n, widths[-1]))
        x, y = x.astype(np.float32), y.astype(np.float32)
        data_source = "generated: X ~ U[-10,10]^H0, Y = W0 X + N(0, 0.25 I), numpy data_seed"

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(
                nn.Linear(widths[l], widths[l + 1], bias=False) for l in range(len(widths) - 1)
            )
            with torch.no_grad():
                for layer, w in zip(self.layers, layers, strict=True):
                    layer.weight.copy_(torch.as_tensor(w, dtype=torch.float32))

        def forward(self, h):
            for layer in self.layers:
                h = layer(h)
            return h

    def evaluate(model, data):  # per-sample sum over outputs, mean over samples
        xb, yb = data
        return ((model(xb) - yb) ** 2).sum(-1).mean()

    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    loader = DataLoader(TensorDataset(xt, yt), batch_size=args.batch_size, shuffle=True)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    extras = {
        "widths": widths,
        "rank": int(np.linalg.matrix_rank(product)),
        "params": int(sum(w.size for w in layers)),
        "w0": rank_source,
        "data": data_source,
        "loss": "evaluate = ((model(x) - y)**2).sum(-1).mean(): sum over outputs, mean over "
        "the minibatch",
        "model": "torch Linear layers, no bias, float32, started at W1..WM",
    }
    return Net(), loader, evaluate, (xt, yt), extras


def module_task(args):
    """The digits MLP of examples/digits_mlp.py rebuilt in plain torch: Linear(64, H), ReLU,
    Linear(H, 10) under the same parameter names (layers.0, layers.1), its weights from the
    state dict ``--weights-file`` (torch.load, weights only), its data from ``--data-file``
    (x [n, 64] float32, y [n] int64), loss F.cross_entropy (mean over the minibatch)."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    if not (args.weights_file and args.data_file):
        raise SystemExit("module: --weights-file (a state dict .pt) and --data-file are needed")
    state = torch.load(args.weights_file, map_location="cpu", weights_only=True)
    hidden = state["layers.0.weight"].shape[0]

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(64, hidden), nn.Linear(hidden, 10)])

        def forward(self, x):
            return self.layers[1](torch.relu(self.layers[0](x)))

    model = MLP()
    model.load_state_dict(state)
    with np.load(args.data_file) as f:
        x = torch.from_numpy(np.asarray(f["x"], np.float32))
        y = torch.from_numpy(np.asarray(f["y"], np.int64))
    args.n = len(x)

    def evaluate(model, data):
        xb, yb = data
        return F.cross_entropy(model(xb), yb)

    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    extras = {
        "params": int(sum(p.numel() for p in model.parameters())),
        "hidden": int(hidden),
        "w0": str(args.weights_file),
        "data": str(args.data_file),
        "loss": "F.cross_entropy(model(x), y), mean over the minibatch",
        "model": "Linear(64, H) -> ReLU -> Linear(H, 10), float32, the state dict's weights",
    }
    return model, loader, evaluate, (x, y), extras


def rrr_task(args):
    """devinterp's tests/slt/rrr_test.py::test_accuracy_rrr, literally: data and model from
    torch.manual_seed(42) (the model built after x and y are drawn, as the test does), Adam lr
    0.01 for 5000 full-batch steps on F.mse_loss; loss devinterp.utils.evaluate_mse."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from devinterp.test_utils import ReducedRankRegressor
    from devinterp.utils import evaluate_mse
    from torch.utils.data import DataLoader, TensorDataset

    m, h, n = args.mhn
    torch.manual_seed(args.data_seed)
    np.random.seed(args.data_seed)
    x = torch.randn(args.n, m)
    y = torch.randn(args.n, n)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True)
    model = ReducedRankRegressor(m, h, n)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(args.train_steps):
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    if (m + h + n) % 2 == 1:
        kind, true = "1_odd", (1 + 2 * m * n + 2 * h * n + 2 * m * h - n * n - m * m - h * h) / 8
    else:
        kind, true = "1_even", (2 * m * n + 2 * h * n + 2 * m * h - n * n - m * m - h * h) / 8
    if m + h < n:
        kind, true = "2", m * h / 2
    elif n + h < m:
        kind, true = "3", h * n / 2
    elif m + n < h:
        kind, true = "4", m * n / 2
    extras = {
        "mhn": [m, h, n],
        "rrr_case": kind,
        "true_llc": true,
        "train_steps": args.train_steps,
        "train_loss": float(F.mse_loss(model(x), y).detach()),
        "loss": "devinterp.utils.evaluate_mse = F.mse_loss(model(x), y): mean over samples and "
        "outputs",
        "model": "devinterp.test_utils.ReducedRankRegressor(m, h, n): fc1, fc2, no bias",
    }
    return model, loader, evaluate_mse, (x, y), extras


TASKS = {
    "normal-crossing": normal_crossing_task,
    "dln": dln_task,
    "module": module_task,
    "rrr": rrr_task,
}


def run(args) -> dict:
    import importlib.metadata
    import warnings

    import numpy as np
    import torch
    from devinterp.optim.sgld import SGLD
    from devinterp.slt.llc import LLCEstimator
    from devinterp.slt.sampler import estimate_learning_coeff_with_summary, sample
    from devinterp.utils import get_init_loss_multi_batch

    torch.set_num_threads(args.threads)
    task = TASKS[args.case]
    model, loader, evaluate, (x, y), extras = task(args)
    nbeta = args.n / math.log(args.n)

    def kwargs():  # devinterp adds keys ("metrics") to the dict it is given: a fresh one per use
        return {"lr": args.lr, "nbeta": nbeta, "localization": args.localization}

    # Both calls draw the init-loss minibatches from the global RNG state set by the task
    # (torch.manual_seed(seed)); we restore that state to recompute the value afterwards.
    rng_state = torch.get_rng_state()
    with warnings.catch_warnings():
        if not args.warnings:
            warnings.simplefilter("ignore")
        if args.api == "summary":
            start = time.perf_counter()
            results = estimate_learning_coeff_with_summary(
                model,
                loader,
                evaluate=evaluate,
                sampling_method=SGLD,
                optimizer_kwargs=kwargs(),
                num_draws=args.draws,
                num_chains=args.chains,
                num_burnin_steps=args.burnin,
                seed=args.seed,
                device="cpu",
                verbose=False,
            )
            seconds = time.perf_counter() - start
        else:  # the normal-crossing test's literal calls
            start = time.perf_counter()
            init = get_init_loss_multi_batch(loader, args.chains, model, evaluate, device="cpu")
            estimator = LLCEstimator(
                num_chains=args.chains, num_draws=args.draws, nbeta=nbeta, init_loss=init
            )
            sample(
                model,
                loader,
                evaluate=evaluate,
                optimizer_kwargs=kwargs(),
                sampling_method=SGLD,
                num_chains=args.chains,
                num_draws=args.draws,
                num_burnin_steps=args.burnin,
                callbacks=[estimator],
                verbose=False,
                seed=args.seed,
            )
            results = estimator.get_results()
            seconds = time.perf_counter() - start

        # After the timed call: the init loss devinterp used (same function, same RNG state;
        # the model passed in is untouched, each chain samples a deep copy) and the full-data one.
        torch.set_rng_state(rng_state)
        init_loss = get_init_loss_multi_batch(loader, args.chains, model, evaluate, device="cpu")
    with torch.no_grad():
        out = evaluate(model, (x, y))  # evaluate_mse returns (loss, {"output": ...})
        init_loss_full = float(out[0] if isinstance(out, tuple) else out)

    per_chain = [float(results[f"llc-chain/{c}"]) for c in range(args.chains)]
    trace = np.asarray(results["loss/trace"], dtype=np.float64)  # [chains, draws]
    recovered = trace.mean(axis=1) - np.asarray(per_chain) / nbeta  # = init_loss, up to float32
    full_init = nbeta * (trace.mean(axis=1) - init_loss_full)
    return {
        "case": args.case,
        "llc_mean": float(results["llc/mean"]),
        "llc_std": float(results["llc/std"]),
        "llc_per_chain": per_chain,
        "seconds": seconds,
        "versions": {
            "devinterp": importlib.metadata.version("devinterp"),
            "torch": torch.__version__,
            "numpy": np.__version__,
            "python": sys.version.split()[0],
        },
        "api": "devinterp.slt.sampler.estimate_learning_coeff_with_summary"
        if args.api == "summary"
        else "devinterp.slt.sampler.sample + devinterp.slt.llc.LLCEstimator",
        "sampler": "devinterp.optim.sgld.SGLD",
        "n": args.n,
        "chains": args.chains,
        "draws": args.draws,
        "burnin": args.burnin,
        "lr": args.lr,
        "nbeta": nbeta,
        "localization": args.localization,
        "batch_size": args.batch_size,
        "seed": args.seed,
        "data_seed": args.data_seed,
        "threads": torch.get_num_threads(),
        "device": "cpu",
        "cores": 1,
        "init_loss": init_loss,
        "init_loss_batches": min(args.chains, len(loader)),
        "init_loss_recovered_max_abs_err": float(np.max(np.abs(recovered - init_loss))),
        "init_loss_full": init_loss_full,
        "llc_mean_full_init": float(full_init.mean()),
        "llc_per_chain_full_init": [float(v) for v in full_init],
        "final_loss_mean": float(trace[:, -1].mean()),
        **extras,
    }


def ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.peer_devinterp", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "case",
        choices=(*CASE_DEFAULTS, "setup"),
        help="a case, or `setup` to create bench/.devinterp-venv",
    )
    p.add_argument("--chains", type=int)
    p.add_argument("--draws", type=int)
    p.add_argument("--burnin", type=int, default=0, help="num_burnin_steps (devinterp: 0)")
    p.add_argument("--lr", type=float, help="SGLD step size (normal-crossing 4e-4, dln 1e-6)")
    p.add_argument("--localization", type=float, help="normal-crossing 0 (as the test), dln 1")
    p.add_argument("--n", type=int, help="data points (normal-crossing 1000, dln 10000)")
    p.add_argument("--batch-size", type=int, help="normal-crossing n (full batch), dln 500")
    p.add_argument("--seed", type=int, help="sampler seed (normal-crossing 42, dln 0)")
    p.add_argument("--data-seed", type=int, help="data seed (normal-crossing 42, dln 0)")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--api", choices=("summary", "sample"), default="summary")
    p.add_argument("--warnings", action="store_true", help="show devinterp's warnings")
    p.add_argument("--powers", type=ints, default=[1, 2], help="normal-crossing powers")
    p.add_argument("--widths", type=ints, help="dln H0,...,HM (default 5,4,3,4)")
    p.add_argument("--rank", type=int, default=2, help="dln: rank of the generated product")
    p.add_argument("--w0-file", type=Path, help="dln: .npz with W1..WM, W_l of shape H_l x H_{l-1}")
    p.add_argument("--data-file", type=Path, help="dln: .npz with x [n, H0], y [n, HM]")
    p.add_argument("--weights-file", type=Path, help="module: the state dict (.pt) of w0")
    p.add_argument("--mhn", type=ints, default=[4, 3, 8], help="rrr: m,h,n (default 4,3,8)")
    p.add_argument("--train-steps", type=int, default=5000, help="rrr: Adam steps to w0")
    args = p.parse_args(argv)
    if args.case != "setup":
        for key, value in CASE_DEFAULTS[args.case].items():
            if getattr(args, key) is None:
                setattr(args, key, value)
        if args.batch_size is None:
            args.batch_size = args.n
    return args


def main(argv=None) -> None:
    args = parse(argv)
    if args.case == "setup":
        print(f"devinterp peer ready: {setup_devinterp()}")
        return
    print(json.dumps(run(args)), flush=True)


if __name__ == "__main__":
    main()
