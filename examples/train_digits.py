"""Train the digits MLP (examples/digits_mlp.py), save checkpoints, and measure the LLC at each.

    python -m examples.train_digits [--out examples/out] [--steps 2000] [--no-sweep]

Plain torch trains the model (SGD with momentum, batches of 64) and saves its state dict at
log-spaced steps as ``OUT/ckpt/step-XXXXX.pt``, printing the training loss. Then it runs Basin's
sweep over them, one LLC estimate a checkpoint on the worker pool:

    python -m jobs sweep checkpoints --factory examples.digits_mlp:make \\
        --checkpoints 'OUT/ckpt/step-*.pt' --sampler sgld --param step_size=1e-5 ...

and prints lambda_hat against the step beside the training loss (the Networks page's "LLC over
training" tab shows the same sweep live). A few minutes on a laptop's CPU.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from examples.digits_mlp import data, model

SAVE_AT = (0, 10, 30, 100, 300, 1000, 2000, 5000, 10000)


def train(out: Path, steps: int, seed: int = 0) -> list[Path]:
    """SGD on the digits; the state dict saved at the SAVE_AT steps up to ``steps``."""
    x, y = data()
    net = model(seed)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(seed)
    (out / "ckpt").mkdir(parents=True, exist_ok=True)
    saved = []
    for step in range(steps + 1):
        if step in SAVE_AT or step == steps:
            path = out / "ckpt" / f"step-{step:05d}.pt"
            torch.save(net.state_dict(), path)
            with torch.no_grad():
                loss = float(F.cross_entropy(net(x), y))
            print(f"step {step:>6}  train loss {loss:.4f}  -> {path}")
            saved.append(path)
        if step == steps:
            break
        index = torch.randint(len(x), (64,), generator=g)
        opt.zero_grad()
        F.cross_entropy(net(x[index]), y[index]).backward()
        opt.step()
    return saved


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="examples/out", help="where the checkpoints go")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--no-sweep", dest="sweep", action="store_false")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--draws", type=int, default=2000, help="SGLD steps per chain")
    args = parser.parse_args()
    out = Path(args.out)
    train(out, args.steps)
    if not args.sweep:
        return 0
    command = [
        sys.executable, "-m", "jobs", "sweep", "checkpoints",
        "--factory", "examples.digits_mlp:make",
        "--checkpoints", str(out / "ckpt" / "step-*.pt"),
        "--sampler", "sgld", "--param", "step_size=1e-5", "--param", "batch_size=128",
        "--chains", str(args.chains), "--steps", str(args.draws),
        "--burn-in", str(args.draws // 5), "--dtype", "float32",
    ]  # fmt: skip
    print("$", " ".join(command), flush=True)
    return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main())
