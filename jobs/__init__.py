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
