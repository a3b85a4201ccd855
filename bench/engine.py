"""Basin's side of ``python -m bench engine``: kernels from ``samplers.make`` on targets from
``landscapes.make``, timed over ``kernel.run(..., compiled=True)`` in calls of one noise block."""

from __future__ import annotations

import platform
import time

import torch

import landscapes
import samplers

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
    """One case at one chain count; the state and its noise stream carry over from one
    measurement to the next."""

    def __init__(self, name: str, chains: int, device: str = "auto"):
        case = CASES[name]
        self.target = build_target(case["target"], device)
        if "nbeta" in case["params"]:  # nbeta = n: temperature 1, as the peer's data_size
            assert case["params"]["nbeta"] == self.target.n, self.target.n
        self.kernel = samplers.make(case["sampler"], **case["params"])
        self.generator = torch.Generator(device=self.target.device).manual_seed(0)
        start = self.target.initial(self.generator, chains)
        self.state = self.kernel.init(start, self.target, self.generator)
        self.noise = self.kernel.noise_for(self.state, self.target, self.generator)

    def advance(self, steps: int) -> None:
        """``steps`` steps in ``kernel.run`` calls of one noise block each (whole blocks run as
        the compiled chunk), every call's per-step records computed and then dropped, as the
        jobs loop runs a run in blocks; one call of all the steps would also stack every step's
        records into one fresh array, which neither the jobs loop nor the peer's scan makes."""
        length = self.noise.length
        while steps > 0:
            n = min(steps, self.noise.left or length)
            self.state, _ = self.kernel.run(self.state, self.target, self.noise, n, compiled=True)
            steps -= n

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
    return f"torch {torch.__version__} ({torch.get_num_threads()} threads), device {dev} ({name})"
