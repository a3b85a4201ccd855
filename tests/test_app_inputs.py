"""Inputs that never lie (AppTest, no worker started): a run length out of range, or not a
number, blocks Run with the field's name and allowed range and queues nothing; a run over the
budget shows its size and time first and waits for "Run anyway"; the time model learns this
machine's speed from the store; and a typed formula whose exp(-U) cannot be normalised is
warned about under its density before Run."""

from __future__ import annotations

import pytest
from apptest import errors, page  # `home` is a fixture from conftest.py

import landscapes
import samplers
import ui
from landscapes.formula import normalisable
from runs import budget
from runs.budget import estimate
from runs.spec import parse_spec
from runs.store import Store
from studies import diagnostics
from ui.widgets import plain

FIX = "Fix the fields marked above first; nothing was queued."


@pytest.fixture
def no_workers(home, monkeypatch):
    monkeypatch.setenv("BASIN_NO_WORKERS", "1")  # a queued run stays queued: the test reads it
    return home


def run_clicked(at, key: str = "pg.run"):
    return at.button(key=key).click().run()


def test_a_bad_run_length_names_the_field_and_its_range_and_queues_nothing(no_workers):
    at = page("playground")
    assert not errors(at), errors(at)
    cases = [
        ("pg.chains", "100000", "chains", "must be an integer in [1, 4096], got '100000'"),
        ("pg.steps", "0", "steps", "must be an integer in [10, 100000], got '0'"),
        ("pg.burn_pct", "95", "burn-in", "must be an integer in [0, 90], got '95'"),
        ("pg.chains", "", "chains", "must be an integer in [1, 4096]; the field is empty"),
        ("pg.seed", "1.5", "seed", "must be an integer in [0, 2147483647], got '1.5'"),
    ]
    for key, typed, field, message in cases:
        before = at.text_input(key=key).value
        at.text_input(key=key).input(typed).run()
        assert errors(at) == [f"**{field}**: {plain(message)}"], errors(at)
        run_clicked(at)
        assert FIX in errors(at) and not at.exception
        assert Store(no_workers).list() == []  # nothing queued, with this value or the last
        at.text_input(key=key).input(before).run()
        assert not errors(at), errors(at)


def test_a_bounded_integer_parameter_is_checked_the_same_way(no_workers):
    at = page("compare")
    at.text_input(key="cmp.target.funnel.dim").input("1").run()
    assert errors(at) == ["**funnel.dim**: " + plain("must be an integer in [2, 1000], got '1'")]
    run_clicked(at, "cmp.run")
    assert any(e.startswith("Fix the fields marked above first") for e in errors(at))
    assert Store(no_workers).list() == []


def test_a_run_over_budget_shows_its_size_and_waits_for_run_anyway(no_workers):
    at = page("playground")
    at.selectbox(key="pg.target_name").select("banana").run()
    at.selectbox(key="pg.sampler_name").select("mala").run()
    estimates = [c.value for c in at.caption if c.value.startswith("Estimate:")]
    assert len(estimates) == 1 and "~2,000 records × 32 chains" in estimates[0], estimates
    # 32 chains x 2000 steps: within budget, nothing to confirm
    assert "pg.confirm_big" not in [c.key for c in at.checkbox]
    assert not [w for w in at.warning if "Over budget" in w.value]

    at.text_input(key="pg.chains").input("4096").run()
    at.text_input(key="pg.steps").input("100000").run()
    spec = parse_spec(
        {
            "target": {"name": "banana"},
            "sampler": {"name": "mala"},
            "chains": 4096,
            "steps": 100_000,
            "thin": diagnostics.auto_thin(4096, 100_000),
        }
    )
    size = f"~{estimate(spec).store_bytes / 2**20:,.0f} MiB"
    (shown,) = [c.value for c in at.caption if c.value.startswith("Estimate:")]
    assert f"~4,762 records × 4,096 chains, {size} on disk, ~" in shown, shown
    (warning,) = [w.value for w in at.warning if "Over budget" in w.value]
    assert "over the 50 MiB budget: lower chains or steps, or raise thin" in warning
    assert "over the 60 s budget: lower chains or steps" in warning
    assert at.checkbox(key="pg.confirm_big").label.startswith(f"Run anyway: {size}, ~")

    run_clicked(at)
    assert errors(at) == [ui.OVER_BUDGET] and Store(no_workers).list() == []
    at.checkbox(key="pg.confirm_big").check().run()
    at.text_input(key="pg.steps").input("90000").run()  # another size: confirmed anew
    assert at.checkbox(key="pg.confirm_big").value is False
    at.checkbox(key="pg.confirm_big").check().run()
    run_clicked(at)
    assert not errors(at), errors(at)
    (run,) = Store(no_workers).list()
    assert (run.spec["chains"], run.spec["steps"], run.spec["thin"]) == (4096, 90_000, 19)


def test_the_time_estimate_learns_the_machines_speed_from_finished_runs(tmp_path):
    def spec(chains: int, steps: int, sampler: str = "mala") -> dict:
        return parse_spec(
            {
                "target": {"name": "banana"},
                "sampler": {"name": sampler, "params": {"step_size": 0.1}},
                "chains": chains,
                "steps": steps,
            }
        ).model_dump(mode="json")

    store = Store(tmp_path)
    big = spec(4096, 100_000)
    default = budget.estimate_seconds(big, store)  # nothing to learn from: the defaults
    assert default == pytest.approx(budget.STARTUP_S + budget.model_seconds(big))
    # a step's overhead dominates 32 chains: 128 times the chains take ~7 times as long
    per_step = budget.model_seconds(spec(32, 1)), budget.model_seconds(spec(4096, 1))
    assert 3 < per_step[1] / per_step[0] < 10
    # HMC's 10 leapfrog steps cost 10 gradients a step
    leapfrogs = samplers.REGISTRY["hmc"].param("leapfrog_steps").default  # gradients a step
    assert budget.model_seconds(spec(32, 1, "hmc")) == pytest.approx(leapfrogs * per_step[0])

    small = spec(32, 2000)
    run_id = store.create(small)
    sampling = 3 * budget.model_seconds(small)  # a machine 3 times slower than the defaults
    store.finish(
        run_id, "completed", summary={"seconds": sampling + 1.0, "sampling_seconds": sampling}
    )
    other = store.create(spec(32, 2000, "hmc"))  # another sampler: not this one's speed
    store.finish(other, "completed", summary={"seconds": 1.0, "sampling_seconds": 1e-3})
    learned = budget.estimate_seconds(big, store)
    assert learned == pytest.approx(1.0 + 3 * budget.model_seconds(big))


def test_the_budgets_say_which_is_exceeded_and_what_to_lower():
    assert budget.over_budget(budget.BUDGET_STORE_BYTES, budget.BUDGET_SECONDS) == []
    (disk,) = budget.over_budget(budget.BUDGET_STORE_BYTES + 1, 1.0)
    assert "on disk" in disk and "raise thin" in disk
    (time,) = budget.over_budget(0, budget.BUDGET_SECONDS + 1)
    assert "60 s budget" in time and "lower chains or steps" in time


DEFAULT_FORMULA = landscapes.REGISTRY["custom"].param("formula").default
BOUNDS = ((-3.0, 3.0), (-3.0, 3.0))


@pytest.mark.parametrize(
    "formula",
    [
        "x*y",  # falls along x = -y
        "x**2",  # flat in y
        "x**2 * y**2",  # zero on both axes
        "log(1 + x**2 + y**2)",  # grows as 2 log r: exp(-U) ~ 1/r**2, whose integral diverges
        "w0**2 + w3**2",  # flat in w1 and w2
    ],
)
def test_formulas_whose_exp_minus_u_cannot_be_normalised_are_flagged(formula):
    message = normalisable(formula, None, BOUNDS)
    assert message and "may not be normalisable" in message, message


@pytest.mark.parametrize(
    "formula",
    [
        DEFAULT_FORMULA,  # a thin valley along y = x**2 whose floor rises slowly
        "x**2 + y**2",
        "x**2/2 + y**2/2",
        "(sqrt(x**2 + y**2) - 2)**2 / 0.1",  # a donut
        "1.5 * log(1 + x**2 + y**2)",  # heavy tailed, but 3 log r outgrows 2 log r
        "(1 - x)**2 / 10 + (y - x**2)**2 + softplus(x * y) / pi",
        "w0**2 + 0.3 * w1**2 + 3 * w2**2",
    ],
)
def test_normalisable_formulas_pass(formula):
    assert normalisable(formula, None, BOUNDS) is None


def test_the_playground_warns_of_a_formula_before_run_and_still_runs_it(no_workers):
    at = page("playground")
    at.selectbox(key="pg.target_name").select("custom").run()
    assert not [w for w in at.warning if "normalisable" in w.value]  # the default formula
    at.text_input(key="pg.target.custom.formula").input("x*y").run()
    (warning,) = [w.value for w in at.warning if "normalisable" in w.value]
    assert warning.startswith("**custom.formula**: exp(-U) may not be normalisable")
    # flat in y: the RunSpec cannot prove it wrong, so Run stays allowed after the warning
    at.text_input(key="pg.target.custom.formula").input("x**2").run()
    assert [w for w in at.warning if "normalisable" in w.value]
    run_clicked(at)
    assert not errors(at), errors(at)
    (run,) = Store(no_workers).list()
    assert run.spec["target"]["params"]["formula"] == "x**2"
