"""Device kernels per compiled step and the step's time on CUDA, under an Inductor option set:

    python -m bench.kernels_per_step '{}'                      # the options Basin compiles with
    python -m bench.kernels_per_step '{"max_autotune_gemm": true}'

Times 5 x 4096 compiled steps of each case (median) and counts the device operations that
torch.profiler records over 256 more; prints the most frequent kernels.
"""

from __future__ import annotations

import collections
import json
import statistics
import sys
import time

import torch

from samplers import compiled

from .engine import BasinCase

STEPS, PROFILED = 4096, 256  # whole noise blocks of 256 steps: every step compiled


def main(options: dict) -> None:
    compiled.OPTIONS["cuda"] = options  # read when a case's chunk is built
    cases = [("mlp-sgld", 1), ("mlp-sgld", 8), ("banana-sgld", 64), ("banana-hmc", 64)]
    for name, chains in cases:
        start = time.perf_counter()
        case = BasinCase(name, chains, "cuda")
        case.seconds(PROFILED)  # compiles
        first = time.perf_counter() - start
        step_us = statistics.median(case.seconds(STEPS) for _ in range(5)) / STEPS * 1e6
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            case.seconds(PROFILED)
        kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        print(
            f"{options} {name} C={chains}: {step_us:.2f} us/step, first call {first:.1f} s, "
            f"{len(kernels) / PROFILED:.1f} device ops/step"
        )
        for kernel, count in collections.Counter(k[:60] for k in kernels).most_common(12):
            print(f"    {count / PROFILED:6.2f}/step  {kernel}")


if __name__ == "__main__":
    main(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {})
