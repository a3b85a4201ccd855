"""Basin's CPU normal generator (samplers/normal.cpp) draws what its published algorithms define
(SplitMix64, xoshiro256++, Box-Muller, recomputed here in numpy and float64) and standard
normals by every test its sample size can tell."""

import math

import numpy as np
import pytest
import torch
from built import built_or_skip
from scipy import stats

from samplers import normals
from samplers.base import draw

M64 = (1 << 64) - 1


def lib_or_skip():
    built_or_skip(normals.library(), "normals come from torch's generator")


def splitmix64(state: int) -> tuple[int, int]:
    state = (state + 0x9E3779B97F4A7C15) & M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return state, z ^ (z >> 31)


def rotl(x: np.ndarray, k: int) -> np.ndarray:
    return (x << np.uint64(k)) | (x >> np.uint64(64 - k))


def xoshiro_lanes(state: int) -> tuple[list[np.ndarray], int]:
    """Eight lanes' xoshiro256++ states [s0, s1, s2, s3] from SplitMix64, lane by lane."""
    words = np.zeros((8, 4), dtype=np.uint64)
    for lane in range(8):
        for j in range(4):
            state, words[lane, j] = splitmix64(state)
    return [words[:, j].copy() for j in range(4)], state


def xoshiro_next(s: list[np.ndarray]) -> np.ndarray:
    out = rotl(s[0] + s[3], 23) + s[0]
    t = s[1] << np.uint64(17)
    s[2] ^= s[0]
    s[3] ^= s[1]
    s[1] ^= s[2]
    s[0] ^= s[3]
    s[2] ^= t
    s[3] = rotl(s[3], 45)
    return out


def reference(n: int, seed: int) -> np.ndarray:
    """normal.cpp's numbers, computed in float64 from the same 32-bit words."""
    radii, state = xoshiro_lanes(seed)
    angles, _ = xoshiro_lanes(state)
    out = []
    with np.errstate(over="ignore"):
        for _ in range(-(-n // 32)):
            k = xoshiro_next(radii).view(np.uint32)  # 16 words, little-endian halves in order
            w = xoshiro_next(angles).view(np.uint32)
            # u1 as the kernel rounds it: float32(k), + 1/2 in float32, times 2^-32 (exact)
            u1 = (k.astype(np.float32) + np.float32(0.5)).astype(np.float64) * 2.0**-32
            r = np.sqrt(-2 * np.log(u1))
            x = ((w >> np.uint32(6)) & np.uint32(0xFFFFFF)).astype(np.float64) / 2**24
            angle = ((w >> np.uint32(30)).astype(np.float64) + x - 0.5) * (math.pi / 2)
            out += [r * np.cos(angle), r * np.sin(angle)]
    return np.concatenate(out)[:n]


@pytest.mark.parametrize("seed", [0, 12345, 2**64 - 1])
def test_the_draws_are_xoshiro256pp_through_box_muller(seed):
    lib_or_skip()
    n = 32 * 40 + 7  # a short last block
    got = normals.fill(torch.empty(n), seed).numpy().astype(np.float64)
    want = reference(n, seed)
    # float32 arithmetic: a few ulps of r (<= 6.8) and of the angle
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)  # observed 2.6e-7
    assert np.abs(want).max() < 6.8


def test_a_million_draws_are_standard_normal_within_their_monte_carlo_error():
    lib_or_skip()
    n = 1 << 20
    z = normals.fill(torch.empty(n), 7).numpy().astype(np.float64)
    assert abs(z.mean()) < 5 / math.sqrt(n)
    assert abs(z.var() - 1) < 5 * math.sqrt(2 / n)
    assert abs(stats.skew(z)) < 5 * math.sqrt(6 / n)
    assert abs(stats.kurtosis(z)) < 5 * math.sqrt(24 / n)
    # Kolmogorov-Smirnov at the 0.1% level: sqrt(-ln(0.0005) / 2) / sqrt(n)
    assert stats.kstest(z, "norm").statistic < 1.95 / math.sqrt(n)
    for a in (2.0, 3.0, 4.0):  # the tails, each within 5 binomial standard errors
        p = 2 * stats.norm.sf(a)
        assert abs((np.abs(z) > a).mean() - p) < 5 * math.sqrt(p * (1 - p) / n), a
    # neighbours (lanes of one stream, the two normals of one pair) are uncorrelated
    for lag in (1, 16, 32):
        assert abs(np.corrcoef(z[:-lag], z[lag:])[0, 1]) < 5 / math.sqrt(n), lag


def test_two_seeds_give_independent_draws_and_one_seed_the_same():
    lib_or_skip()
    n = 1 << 18
    a, b = normals.fill(torch.empty(n), 1), normals.fill(torch.empty(n), 2)
    assert torch.equal(a, normals.fill(torch.empty(n), 1))
    assert abs(np.corrcoef(a.numpy(), b.numpy())[0, 1]) < 5 / math.sqrt(n)


def test_cpu_float32_normals_come_from_basin_others_from_torch():
    lib_or_skip()
    g = torch.Generator().manual_seed(3)
    seed = normals.seed_from(torch.Generator().manual_seed(3))
    got = draw(g, "normal", (5, 7), torch.float32)
    assert torch.equal(got, normals.fill(torch.empty(5, 7), seed))
    g64, ref = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(
        draw(g64, "normal", (5, 7), torch.float64),
        torch.randn(5, 7, generator=ref, dtype=torch.float64),
    )
    out = torch.empty(7, 5).T  # not contiguous: drawn, then copied in
    g = torch.Generator().manual_seed(3)
    assert draw(g, "normal", (5, 7), torch.float32, out=out) is out
    torch.testing.assert_close(out, got, rtol=0, atol=0)
