"""RECORDER, not a test: the values legacy ArviZ 0.23 gave for samplers.diagnostics.

Basin computed ESS (bulk, tail), rank R-hat and MCSE with ``arviz`` 0.23 until issue 57 moved it
to arviz-stats. This script was run once, with arviz 0.23.4 installed and the old
samplers/diagnostics.py, to write tests/data/arviz_0_23_values.json; tests/test_arviz_values.py
rebuilds the same arrays from ``cases()`` (fixed seeds, no stored arrays) and checks that the
current diagnostics give the recorded numbers. Rerunning it now records the current code's values,
which the test would then trivially match: do not, unless the estimators are meant to change.

    python tests/data/record_arviz_values.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

OUT = Path(__file__).with_name("arviz_0_23_values.json")


def ar1(seed: int, phi: float, shape: tuple[int, ...]) -> np.ndarray:
    """Stationary AR(1) x_{t+1} = phi x_t + sqrt(1 - phi^2) eps along axis 1 of ``shape``
    ([chain, draw] or [chain, draw, dim]), N(0, 1) marginals; a plain loop, so the draws do not
    depend on a filter routine's rounding."""
    rng = np.random.default_rng(seed)
    eps = rng.standard_normal(shape)
    x = np.empty(shape)
    x[:, 0] = rng.standard_normal((shape[0], *shape[2:]))
    scale = np.sqrt(1 - phi**2)
    for t in range(1, shape[1]):
        x[:, t] = phi * x[:, t - 1] + scale * eps[:, t]
    return x


def stuck() -> np.ndarray:
    """8 x 300 x 3: dim 0 AR(1) 0.5; dim 1 near-constant (1 + 1e-9 noise); dim 2 AR(1) 0.8
    with chain 0 stuck at its first value (a sampler that never accepted)."""
    x = ar1(11, 0.5, (8, 300, 3))
    x[..., 1] = 1.0 + 1e-9 * np.random.default_rng(12).standard_normal((8, 300))
    x[..., 2] = ar1(13, 0.8, (8, 300))
    x[0, :, 2] = x[0, 0, 2]
    return x


def heavy() -> np.ndarray:
    """4 x 1000 x 2 Student-t draws: df 1.5 (infinite variance) and df 3, iid."""
    rng = np.random.default_rng(21)
    return np.stack([rng.standard_t(1.5, (4, 1000)), rng.standard_t(3.0, (4, 1000))], axis=-1)


def with_nan() -> np.ndarray:
    """4 x 200 x 2 AR(1) 0.3 with one NaN draw in chain 1, dim 0 (a diverged chain)."""
    x = ar1(31, 0.3, (4, 200, 2))
    x[1, 50, 0] = np.nan
    return x


def cases() -> dict[str, np.ndarray]:
    """The recipes: name -> draws[chain, draw] or draws[chain, draw, dim]."""
    rng = np.random.default_rng(41)
    return {
        "ar1_0.9_4x500": ar1(1, 0.9, (4, 500)),
        "stuck_8x300x3": stuck(),
        "short_ar1_0.3_2x50": ar1(2, 0.3, (2, 50)),
        "heavy_t_4x1000x2": heavy(),
        "shifted_chain_4x400": ar1(3, 0.5, (4, 400)) + np.array([[1.5], [0], [0], [0]]),
        "antithetic_ar1_-0.6_4x500x2": ar1(4, -0.6, (4, 500, 2)),
        "more_chains_than_draws_64x10x2": rng.standard_normal((64, 10, 2)),
        "one_chain_1x400": ar1(5, 0.7, (1, 400)),
        "four_draws_3x4": rng.standard_normal((3, 4)),
        "three_draws_4x3": rng.standard_normal((4, 3)),
        "constant_4x100": np.full((4, 100), 2.5),
        # every chain stuck at its own start (a run that accepted nothing): R-hat ~ 1e16
        "all_stuck_4x200x3": np.repeat(np.random.default_rng(7).standard_normal((4, 1, 3)), 200, 1),
        "nan_4x200x2": with_nan(),
        "float32_ar1_0.5_4x300x2": ar1(6, 0.5, (4, 300, 2)).astype(np.float32),
    }


STATISTICS = ("ess_bulk", "ess_tail", "rhat", "mcse_mean")


def _json(value) -> list | float:
    return np.asarray(value, dtype=np.float64).tolist()  # NaN is written as NaN (json's default)


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import arviz

    from samplers import diagnostics

    values = {}
    for name, x in cases().items():
        values[name] = {f: _json(getattr(diagnostics, f)(x)) for f in STATISTICS}
        values[name]["summary"] = {k: _json(v) for k, v in diagnostics.summary(x).items()}
    record = {
        "about": "samplers.diagnostics computed by legacy arviz; arrays rebuilt by cases() in "
        "tests/data/record_arviz_values.py",
        "arviz": arviz.__version__,
        "numpy": np.__version__,
        "values": values,
    }
    OUT.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {OUT} (arviz {arviz.__version__}, {len(values)} cases)")


if __name__ == "__main__":
    main()
