"""samplers.diagnostics on arviz-stats gives the numbers legacy ArviZ 0.23 gave.

tests/data/arviz_0_23_values.json holds ESS (bulk, tail), rank R-hat, MCSE of the mean and the
summary table, recorded with arviz 0.23.4 by tests/data/record_arviz_values.py before Basin moved
to arviz-stats (issue 57). The arrays are rebuilt here from that script's fixed-seed recipes: AR(1)
chains, a stuck chain and a near-constant coordinate, heavy tails, 2 x 50 and 3-draw cases, one
chain, a NaN draw, a constant trace, more chains than draws, float32 input.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from samplers import diagnostics

DATA = Path(__file__).with_name("data")
RECORD = json.loads((DATA / "arviz_0_23_values.json").read_text())


def _recorder():
    spec = importlib.util.spec_from_file_location(
        "record_arviz_values", DATA / "record_arviz_values.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RECORDER = _recorder()
CASES = RECORDER.cases()


def test_the_record_covers_every_case():
    assert RECORD["arviz"].startswith("0.23")
    assert set(RECORD["values"]) == set(CASES)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # R-hat of a constant trace
@pytest.mark.parametrize("name", sorted(CASES))
def test_diagnostics_equal_the_recorded_arviz_0_23_values(name):
    x = CASES[name]
    old = RECORD["values"][name]
    for stat in RECORDER.STATISTICS:
        new = getattr(diagnostics, stat)(x)
        assert np.shape(new) == np.shape(old[stat]), stat
        # NaN where 0.23 gave NaN (too few draws, one chain for R-hat, a NaN draw), else 1e-8
        np.testing.assert_allclose(new, old[stat], rtol=1e-8, atol=0, err_msg=f"{name} {stat}")
    table = diagnostics.summary(x)
    assert set(table) == set(old["summary"])
    for key, value in table.items():
        np.testing.assert_allclose(value, old["summary"][key], rtol=1e-8, atol=0, err_msg=key)
