"""Device kernels per compiled step and the step's time on CUDA, under an Inductor option set:

    python -m bench.kernels_per_step '{}'                      # the options Basin compiles with
    python -m bench.kernels_per_step '{"max_autotune_gemm": true}'

Times 5 x 4096 graphed steps of each case (median) and counts the device operations that
torch.profiler records over 256 more; prints the most frequent kernels. The readings of
bench/RESULTS.md's 12:02/12:11 entry came from this script.
"""

from __future__ import annotations

import collections
import json
import statistics
import sys
import time

import jobs  # noqa: F401  (first: torch's allocator option, as a worker has it)
import samplers.fused as fused

from .engine import BasinCase

STEPS, PROFILED = 4096, 256


def main(options: dict) -> None:
    import torch  # after ``jobs``, like the workers' torch

    fused.COMPILE_OPTIONS["cuda"] = options
    cases = [("mlp-sgld", 1), ("mlp-sgld", 8), ("banana-sgld", 64), ("banana-hmc", 64)]
    for name, chains in cases:
        start = time.perf_counter()
        case = BasinCase(name, chains, "cuda")
        case.seconds(PROFILED)  # compiles and captures
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
