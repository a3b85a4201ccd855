"""Basin's LLC on devinterp's reduced-rank-regression accuracy test, at devinterp's settings.

devinterp (timaeus-research/devinterp, tests/slt/rrr_test.py) trains two bias-free Linear
layers m -> h -> n with Adam on F.mse_loss (the mean over samples AND outputs) and runs SGLD
(lr 6e-4, localization 1, nbeta = 1000 / log 1000, full batch, 3 chains x 2000 draws). Basin
takes the same module as a user's model (``landscapes.make("model", factory=...)``, loss
"mse" = F.mse_loss), its w0 from a checkpoint of the same training, and runs its own SGLD at
those hyperparameters (the same update: w <- w - (lr/2)(nbeta grad L + loc (w - w0)) +
sqrt(lr) N(0, I)). Its estimate must agree with devinterp's recorded one within their combined
standard error; with the loss summed over outputs (Basin's default convention for its built-in
regression targets) the same step reads clearly higher: the convention, not the sampler, made
the gap an earlier comparison saw.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import landscapes
import samplers
from samplers import llc
from tests import model_factories

FACTORIES = "tests/model_factories.py"

# devinterp 1.3.2 (torch 2.13.0, CPU) on (m, h, n) = (4, 3, 8), Aoyagi-Watanabe case 2, true
# LLC m h / 2 = 6, at its test's settings; produced by
#   bench/.devinterp-venv/bin/python -m bench.peer_devinterp rrr --mhn 4,3,8 --threads 1
# (bench/RESULTS.md, "devinterp's reduced-rank-regression test" entry of 2026-11-27):
# llc/mean and llc/std (over its 3 chains), and its init_loss (full batch, float32).
DEVINTERP_MEAN, DEVINTERP_SD, DEVINTERP_CHAINS = 6.2501, 0.2249, 3
DEVINTERP_INIT_LOSS = 1.0013669729232788

NBETA = 1000 / math.log(1000)  # devinterp's default_nbeta(loader): batch size 1000 = n
STEPS = 2000


def llc_estimate(target, chains: int, seed: int = 0) -> llc.Estimate:
    """As an LLC run (and bench/llc.py's basin_estimate): ``llc.Paired`` SGLD chains from w0,
    full batch, no burn-in, baseline the full-data loss at w0."""
    kernel = samplers.make("sgld", step_size=6e-4, localization=1.0, nbeta=NBETA)
    g = torch.Generator().manual_seed(seed)
    paired = llc.Paired(kernel, target, target.w0)
    state = paired.init(target.w0.expand(chains, -1).clone(), target, g)
    _, info = paired.run(state, target, g, STEPS, compiled=False)
    baseline = float(target.full_loss(target.w0[None])[0])
    return llc.estimate(info.loss.numpy(), baseline, kernel.nbeta_for(target))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """devinterp's w0 for (4, 3, 8): 5000 Adam steps, trained once, saved as a state dict."""
    module, _, _ = model_factories.rrr_devinterp(4, 3, 8)
    path = tmp_path_factory.mktemp("rrr") / "w0.pt"
    torch.save(module.state_dict(), path)
    return str(path)


def target(name: str, checkpoint: str):
    return landscapes.make(
        "model", factory=f"{FACTORIES}:{name}", checkpoint=checkpoint, device="cpu",
        dtype="float64",
    )  # fmt: skip


@pytest.mark.slow  # ~7 s: 5000 Adam steps to w0, then 12 chains x 2000 steps
def test_rrr_llc_matches_devinterp(checkpoint):
    mean = target("rrr_devinterp_4_3_8_untrained", checkpoint)
    # the same w0 and data as devinterp's run: its init_loss, up to float32
    assert float(mean.full_loss(mean.w0[None])[0]) == pytest.approx(DEVINTERP_INIT_LOSS, rel=1e-6)

    basin = llc_estimate(mean, chains=8)
    se_devinterp = DEVINTERP_SD / math.sqrt(DEVINTERP_CHAINS)
    combined = math.sqrt(basin.se**2 + se_devinterp**2)
    assert abs(basin.mean - DEVINTERP_MEAN) <= 2 * combined, (basin, combined)

    # Basin's summed convention (squared error summed over the 8 outputs) at the same step and
    # nbeta: the energy is 8 x devinterp's, and the estimate reads far higher
    summed = llc_estimate(target("rrr_devinterp_4_3_8_summed_untrained", checkpoint), chains=4)
    combined_sum = math.sqrt(summed.se**2 + se_devinterp**2)
    assert summed.mean - DEVINTERP_MEAN > max(2.0, 4 * combined_sum), (summed, combined_sum)


def test_rrr_loss_conventions():
    """The built-in rrr target: "mean" is F.mse_loss on its data, "sum" is outputs x "mean"."""
    params = {"inputs": 4, "hidden": 3, "outputs": 5, "n": 300, "seed": 0, "device": "cpu"}
    t_mean = landscapes.make("rrr", loss_convention="mean", dtype="float64", **params)
    t_sum = landscapes.make("rrr", loss_convention="sum", dtype="float64", **params)
    g = torch.Generator().manual_seed(1)
    w = torch.randn(3, t_mean.dim, generator=g, dtype=torch.float64)
    w1, w2 = t_mean.unflatten(w).values()  # [C, H, M], [C, N, H]
    assert w1.shape[1:] == (3, 4) and w2.shape[1:] == (5, 3)
    x, y = t_mean.x, t_mean.y
    expected = torch.stack([F.mse_loss(x @ w1[c].T @ w2[c].T, y) for c in range(len(w))])
    for got in (t_mean.loss(w), t_mean.full_loss(w)):
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=0)
    for got in (t_sum.loss(w), t_sum.full_loss(w)):
        torch.testing.assert_close(got, 5 * expected, rtol=1e-12, atol=0)
