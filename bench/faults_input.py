"""Issue 60's bad inputs (items 4, 5 and 6) as ``python -m bench faults`` probes: numbers past
float's range, values once truncated or accepted without a word, and work with no reason to be
unbounded. Each is refused at once, in one line naming the field, and queues nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from bench.faults import refused
from runs.store import Store

BIG = "1" + "0" * 400  # 401 digits: past float's range
CUT = "10000000000000000000... (401 digits)"  # how a refusal shows it
Check = Callable[[subprocess.CompletedProcess], bool]


def queued_nothing(home: Path, check: Check) -> Check:
    """``check``, and the store holds no run."""
    return lambda out: check(out) and not Store(home).list()


def says(*fragments: str) -> Check:
    """Exit 2, no traceback, and the last stderr line holds every fragment (argparse's errors
    come after its usage line)."""

    def check(out: subprocess.CompletedProcess) -> bool:
        last = (out.stderr.strip().splitlines() or [""])[-1]
        return out.returncode == 2 and all(f in last for f in fragments)

    return check


def checkpoint(home: Path) -> list[str]:
    """A checkpoint sweep asking for 'predictive' of a model whose factory has no test set."""
    import torch

    from tests import model_factories

    torch.save(model_factories.small_classifier()[0].state_dict(), home / "step-10.pt")
    return [
        "sweep", "checkpoints", "--factory", "tests/model_factories.py:small_classifier",
        "--checkpoints", str(home / "step-*.pt"), "--sampler", "sgld", "--steps", "20",
        "--observe", "predictive", "--submit-only",
    ]  # fmt: skip


def fifo(home: Path) -> list[str]:
    """A spec path that is a named pipe with no writer: open() would wait forever."""
    os.mkfifo(home / "spec.json")
    return ["submit", str(home / "spec.json")]


def probes(home: Path) -> list[tuple[str, Callable[[], list[str]], Check]]:
    """(name, setup returning the CLI arguments, check of the outcome)."""
    (home / "batch.json").write_text(
        json.dumps(
            {
                "target": {"name": "mlp"},
                "sampler": {"name": "sgld"},
                "observables": ["llc"],
                "llc": {"train_batch_size": 1e19},
            }
        )
    )

    def given(*args: str) -> Callable[[], list[str]]:
        return lambda: list(args)

    def no_run(field: str, *fragments: str) -> Check:
        one = refused(field)
        return queued_nothing(home, lambda out: one(out) and says(*fragments)(out))

    submit = ("submit", "--sampler", "mala", "--target")
    nuts = ("submit", "--target", "banana", "--sampler", "nuts", "--param")
    calibrate = ("sweep", "calibrate", "--target", "banana", "--sampler", "sgld")
    return [
        # item 4: one short line, never an OverflowError traceback
        ("400-digit target param", given(*submit, "gaussian", "--target-param", f"dim={BIG}"),
         no_run("target.params.dim", CUT)),
        ("1e400 sampler param", given(*submit, "banana", "--param", "step_size=1e400"),
         no_run("sampler.params.step_size", "got inf")),
        ("400-digit --steps", given(*submit, "banana", "--steps", BIG), no_run("steps", CUT)),
        # item 5: refused, not truncated or accepted
        ("reprior --widths 2.5", given("sweep", "reprior", "--widths", "2.5", "--submit-only"),
         no_run("--widths", "integers >= 1")),
        ("reprior --depth 0", given("sweep", "reprior", "--depth", "0", "--submit-only"),
         no_run("depth", "[1, 8]")),
        ("vi --ns 2.7", given("sweep", "vi", "--ns", "500,2.7", "--submit-only"),
         no_run("--ns", "integers >= 1")),
        ("calibrate on a potential", given(*calibrate, "--step-sizes", "1e-3", "--submit-only"),
         no_run("target", "no learning coefficient")),
        ("llc.train_batch_size=1e19", given("submit", str(home / "batch.json")),
         no_run("llc.train_batch_size", "[1, 10000000]")),
        ("checkpoints --observe predictive, no test set", lambda: checkpoint(home),
         no_run("observables", "test set")),
        # item 6: capped, saying the cap and why
        ("wide kl --draws 1e9", given("wide", "kl", "--widths", "8", "--draws", "1000000000"),
         refused("--draws")),
        ("worker --slots 1e8", given("worker", "--slots", "100000000", "--once"),
         says("--slots: must be an integer in [1, ", "worker process")),
        ("spec path a FIFO", lambda: fifo(home), no_run("spec", "not a regular file")),
        ("NUTS step_size=1e-12 at submit", given(*nuts, "step_size=1e-12"),
         no_run("sampler.params.step_size", "max_depth")),
        ("NUTS nbeta=1e-12 at submit", given(*nuts, "nbeta=1e-12"),
         no_run("sampler.params.nbeta", "max_depth")),
    ]  # fmt: skip
