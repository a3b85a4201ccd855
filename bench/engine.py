"""Basin's side of ``python -m bench engine``: kernels from ``samplers.make`` on targets from
``landscapes.make``, timed over ``kernel.run`` in calls of one compiled chunk."""

from __future__ import annotations

import os
import platform
import time

import torch

import landscapes
import samplers
from samplers.fused import MAX_CHUNK, Ahead

from .cases import CASES, TARGETS


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build_target(name: str, device: str) -> landscapes.Target:
    known = {p.name for p in landscapes.REGISTRY[name].params}
    params = {k: v for k, v in TARGETS[name].items() if k in known}
    target = landscapes.make(name, device=device, dtype="float32", **params)
    if name == "banana":  # the peer writes the banana out; check that it is this one
        t = TARGETS[name]
        assert target.mu.tolist() == list(t["mu"]), target.mu
        assert target.sigma.tolist() == [list(r) for r in t["sigma"]], target.sigma
    return target


class BasinCase:
    """One case at one chain count; the state carries over from one measurement to the next."""

    def __init__(self, name: str, chains: int, device: str = "auto"):
        case = CASES[name]
        self.target = build_target(case["target"], device)
        if "nbeta" in case["params"]:  # nbeta = n: temperature 1, as the peer's data_size
            assert case["params"]["nbeta"] == self.target.n, self.target.n
        self.kernel = samplers.make(case["sampler"], **case["params"])
        self.generator = torch.Generator(device=self.target.device).manual_seed(0)
        start = self.target.initial(self.generator, chains)
        self.state = self.kernel.init(start, self.target, self.generator)
        self.ahead = Ahead()

    def advance(self, steps: int) -> None:
        """``steps`` steps in ``kernel.run`` calls of one compiled chunk each (MAX_CHUNK steps),
        sharing an ``Ahead``, every call's per-step records (loss, accepted, diverged) computed
        and then dropped, as the jobs loop runs a run in blocks of at most one chunk. One call of
        all the steps would also stack every step's records into one fresh array, which the
        jobs loop does not make (it writes each block's records as they are) nor the peer's
        scan: 150 MB of copies into new pages for 4000 steps at 4096 chains, 25% of that case's
        time (bench/RESULTS.md, 2026-11-25 09:59 reading)."""
        for start in range(0, steps, MAX_CHUNK):
            n = min(MAX_CHUNK, steps - start)
            self.state, _ = self.kernel.run(
                self.state, self.target, self.generator, n, fused=True, ahead=self.ahead
            )
        self.ahead.close()  # a draw left pending would run on into the peer's measurement

    def seconds(self, steps: int) -> float:
        """Wall time of ``steps`` steps of all chains, device work included."""
        device = self.target.device
        _sync(device)
        start = time.perf_counter()
        self.advance(steps)
        _sync(device)
        return time.perf_counter() - start


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            models = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    except OSError:
        models = []
    return models[0] if models else platform.processor() or "unknown CPU"


def describe(device: str) -> str:
    """torch version, threads and the device Basin runs on."""
    dev = landscapes.resolve_device(device)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else cpu_name()
    threads = f"{torch.get_num_threads()} threads"
    if dev.type == "cpu":  # set by ``import jobs`` as in Basin's workers (jobs/__init__.py)
        threads += f", GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT', 'unset')}"
    return f"torch {torch.__version__} ({threads}), device {dev} ({name})"
