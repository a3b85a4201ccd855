"""samplers.rank_stats gives arviz-stats' bulk ESS and rank R-hat and scipy's ndtri and KS
statistic to the last bit, on numpy alone: a run's end imports neither arviz-stats nor scipy
(issue 58). tests/test_arviz_values.py holds the same ESS and R-hat to the values legacy ArviZ
0.23 recorded."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import scipy.fftpack
import scipy.special
import scipy.stats
from arviz_stats.base import array_stats

from samplers import diagnostics, rank_stats


def _cases() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {}
    for chains, draws, dim in [(4, 1000, 2), (64, 2000, 2), (2, 50, 3), (1, 100, 2), (3, 4, 1)]:
        x = rng.standard_normal((chains, draws, dim))
        out[f"iid_{chains}x{draws}"] = x
        out[f"walk_{chains}x{draws}"] = 0.1 * np.cumsum(x, axis=1) + x  # slow mixing
    out["three_draws"] = rng.standard_normal((3, 3, 1))
    nan = rng.standard_normal((4, 200, 2))
    nan[1, 5, 0] = np.nan
    out["nan"] = nan
    out["constant"] = np.ones((4, 100, 2))
    out["ties"] = np.round(rng.standard_normal((4, 300, 2)))
    heavy = rng.standard_normal((4, 100, 2))
    out["inf"] = np.where(rng.random((4, 100, 2)) < 0.01, np.inf, heavy)
    stuck = np.full((1, 500, 2), 0.3)
    out["one_stuck"] = np.concatenate([rng.standard_normal((3, 500, 2)), stuck])
    out["all_stuck"] = np.repeat(rng.standard_normal((4, 1, 3)), 200, 1)
    return out


CASES = _cases()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NaN and constant cases
@pytest.mark.parametrize("name", sorted(CASES))
def test_bulk_ess_and_rank_rhat_are_arviz_stats_to_the_last_bit(name):
    x = CASES[name]
    ess = array_stats.ess(x, chain_axis=0, draw_axis=1, method="bulk")
    rhat = array_stats.rhat(x, chain_axis=0, draw_axis=1, method="rank")
    np.testing.assert_array_equal(diagnostics.ess_bulk(x), ess)
    np.testing.assert_array_equal(diagnostics.rhat(x), rhat)
    both = diagnostics.ess_bulk_rhat(x)
    np.testing.assert_array_equal(both[0], ess)
    np.testing.assert_array_equal(both[1], rhat)
    if x.shape[-1] == 1:  # a scalar trace [chain, draw]: floats
        scalar = diagnostics.ess_bulk_rhat(x[..., 0])
        assert all(isinstance(v, float) for v in scalar)
        np.testing.assert_array_equal(scalar, (ess[0], rhat[0]))


def test_ndtri_is_scipys_to_the_last_bit():
    rng = np.random.default_rng(1)
    q = np.concatenate(
        [
            rng.random(200_000),
            10.0 ** -rng.uniform(0, 300, 20_000),  # far tails: the P2/Q2 branch
            1 - 10.0 ** -rng.uniform(1, 16, 20_000),
            (np.arange(1, 20_001) - 0.375) / 20_000.25,  # a run's rank-normal quantiles
        ]
    )
    np.testing.assert_array_equal(rank_stats.ndtri(q), scipy.special.ndtri(q))


def test_the_fft_length_is_scipys_next_fast_len():
    assert [rank_stats.fast_length(n) for n in range(1, 5000)] == [
        scipy.fftpack.next_fast_len(n) for n in range(1, 5000)
    ]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_the_ks_statistic_is_scipys():
    rng = np.random.default_rng(2)
    for i in range(60):
        a = rng.standard_normal(rng.integers(1, 2000)) * rng.random() + rng.random()
        b = rng.standard_normal(rng.integers(1, 2000))
        if i % 3 == 0:  # ties
            a, b = np.round(a), np.round(b)
        if i % 7 == 0:
            a[0] = np.inf
        if i % 11 == 0:
            b[-1] = np.nan
        want = scipy.stats.ks_2samp(a, b, method="asymp").statistic
        np.testing.assert_array_equal(rank_stats.ks_statistic(a, b), want)


def test_a_runs_end_statistics_import_neither_arviz_stats_nor_scipy():
    code = (
        "import sys, numpy as np\n"
        "from samplers import diagnostics\n"
        "x = np.random.default_rng(0).standard_normal((4, 100, 2))\n"
        "diagnostics.ess_bulk_rhat(x), diagnostics.ks_distance(x, x[0])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('scipy', 'arviz_stats')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
