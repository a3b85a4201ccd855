"""Standard normal float32 draws on the CPU from Basin's own generator (``normal.cpp``).

torch's CPU generator (mt19937, one thread) takes 2.4-3.5 ns a normal on this project's 2-core
VMs, and a chain's step draws one per parameter: the digits MLP's 8 chains draw 19,280 a step,
67 us on a Xeon where the rest of the step is 66 us of one core. ``normal.cpp`` draws them at
~0.55 ns (xoshiro256++ in SIMD lanes and the Box-Muller transform), built once per machine with
the compiler torch.compile already needs and cached (``landscapes.native``).

``draw`` (samplers/base.py) takes every CPU float32 normal from here: eager steps, a fused
chunk's noise drawn up front, and each of its parallel parts (``fused.fill``). A draw takes one
64-bit seed from the run's torch.Generator, so a run's numbers still follow from its seed and
its shapes alone. Other dtypes, other devices, and machines where the build fails (no compiler)
keep torch's generator, the last with other numbers for the same seed.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch
from torch import Tensor

from landscapes import native

SOURCE = Path(__file__).with_name("normal.cpp")
FLAGS = ["-O3", "-march=native", "-fno-math-errno", "-std=c++17"]


def library() -> ctypes.CDLL | None:
    """The generator built for this CPU (~0.5 s once, then cached), or None where it fails."""
    lib = native.load(SOURCE, FLAGS, [])
    if lib is not None and lib.basin_normal_float32.argtypes is None:
        lib.basin_normal_float32.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint64]
        lib.basin_normal_float32.restype = None
    return lib


def seed_from(generator: torch.Generator) -> int:
    """A 64-bit seed drawn from ``generator`` (it advances as any draw does)."""
    return int(torch.randint(-(2**63), 2**63 - 1, (), generator=generator)) % 2**64


def fill(out: Tensor, seed: int) -> Tensor:
    """``out`` (contiguous float32 on the CPU) filled with standard normals from ``seed``."""
    lib = library()
    if lib is None:
        raise RuntimeError(f"{SOURCE.name} is not built on this machine")
    if out.numel():
        lib.basin_normal_float32(out.data_ptr(), out.numel(), seed)
    return out


def serves(generator: torch.Generator, dtype: torch.dtype) -> bool:
    """Whether a normal draw of ``dtype`` from ``generator`` comes from ``normal.cpp`` here."""
    return generator.device.type == "cpu" and dtype == torch.float32 and library() is not None


def normal(generator: torch.Generator, shape: tuple[int, ...], out: Tensor | None = None) -> Tensor:
    """Standard normal float32 draws of ``shape`` (into ``out`` when given)."""
    if out is not None and out.is_contiguous() and out.shape == shape:
        return fill(out, seed_from(generator))
    drawn = fill(torch.empty(shape, dtype=torch.float32), seed_from(generator))
    return drawn if out is None else out.resize_(shape).copy_(drawn)
