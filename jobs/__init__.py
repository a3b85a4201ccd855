"""Background runs: the validated RunSpec, the run loop, the embedded Store, workers and the CLI.

The one path by which both the app and the command line run anything (DESIGN.md, "jobs").
"""

import os

# torch's CPU allocator page-aligns tensors of 2 MB or more (and asks for huge pages for them) when
# this is set before its first allocation, so ``import jobs`` before torch. The Store then writes
# a run's records to disk from where they lie (O_DIRECT needs aligned memory) instead of copying
# them through a staging buffer: 1 GB of records cost the 2-core VM's sampler ~0.1 s less
# (bench/RESULTS.md, 2026-11-24). Workers and ``python -m jobs`` import this first.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

# libgomp's threads spin ~7 ms (300,000 spins) after a parallel region before they sleep. A
# compiled chunk ends in one, and the next chunk's noise is then drawn on two threads
# (samplers.fused.fill) while a spinning thread still holds the other core: the draw ran no
# faster than on one. With 10,000 spins (digits MLP, 8 chains): 46 -> 25 us of noise a step, its
# run through jobs (25-step blocks between snapshots) 0.61 -> 0.53 s, the surfaces' eager loops
# unchanged within the host's noise. libgomp reads it when it loads: before torch, as above.
os.environ.setdefault("GOMP_SPINCOUNT", "10000")
