"""Verdicts: a finished run says whether its own numbers can be trusted (runs.verdict).

The runs the issue found passing as green "Run completed." must not be reported as good: MALA
at the Playground's default step on the donut (chains stuck in the hole), MALA on Neal's funnel
(R-hat far above 1.1), and an improper typed formula; a well-tuned HMC run on the donut is good.
The unit tests feed ``judge`` draws whose truth is known by construction (iid exact draws, and
the same draws shifted)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import landscapes
from cli.main import main
from runs.budget import check_budget
from runs.loop import execute
from runs.spec import SpecError, parse_spec
from runs.store import Store
from runs.verdict import headline, judge

PLAYGROUND = {"chains": 32, "steps": 2000, "burn_in": 200, "seed": 0}  # the page's defaults


def run(tmp_path, target: dict, sampler: dict, **length) -> dict:
    spec = parse_spec({"target": target, "sampler": sampler, **{**PLAYGROUND, **length}})
    check_budget(spec)
    store = Store(tmp_path / "store")
    run_id = store.create(spec.model_dump(mode="json"))
    return execute(spec, store, run_id)


def codes(verdict: dict, status: str = "fail") -> set[str]:
    return {s["code"] for s in verdict["signals"] if s["status"] == status}


def test_mala_at_the_default_step_on_the_donut_fails_with_stuck_chains_and_low_acceptance(
    tmp_path,
):
    summary = run(
        tmp_path, {"name": "donut", "params": {}}, {"name": "mala", "params": {"step_size": 0.1}}
    )
    verdict = summary["verdict"]
    assert verdict["status"] == "fail"
    assert {"acceptance", "stuck", "rhat", "ks"} <= codes(verdict), verdict
    for signal in verdict["signals"]:  # each names its evidence and a change to try
        assert signal["message"] and signal["try"]
    stuck = next(s for s in verdict["signals"] if s["code"] == "stuck")
    assert "smaller step_size" in stuck["try"]


def test_mala_on_neals_funnel_fails_on_r_hat_and_suggests_hmc_or_nuts(tmp_path):
    summary = run(
        tmp_path, {"name": "funnel", "params": {}}, {"name": "mala", "params": {"step_size": 0.1}}
    )
    verdict = summary["verdict"]
    assert verdict["status"] == "fail" and "rhat" in codes(verdict), verdict
    rhat = next(s for s in verdict["signals"] if s["code"] == "rhat")
    assert rhat["value"] > 1.1 and "hmc or nuts" in rhat["try"]


def test_an_improper_formula_is_refused_or_fails_as_running_off(tmp_path):
    with pytest.raises(SpecError, match="formula"):  # x*y falls without bound: never queued
        check_budget(
            parse_spec(
                {
                    "target": {"name": "custom", "params": {"formula": "x*y"}},
                    "sampler": {"name": "mala", "params": {"step_size": 0.1}},
                    **PLAYGROUND,
                }
            )
        )
    # x**2 alone is bounded below but leaves y free: nothing to converge to
    summary = run(
        tmp_path,
        {"name": "custom", "params": {"formula": "x**2"}},
        {"name": "mala", "params": {"step_size": 0.1}},
    )
    assert summary["verdict"]["status"] == "fail"
    assert "run_off" in codes(summary["verdict"]), summary["verdict"]


def test_a_well_tuned_hmc_run_on_the_donut_is_good_and_the_cli_prints_its_verdict(
    tmp_path, capsys, monkeypatch
):
    summary = run(
        tmp_path,
        {"name": "donut", "params": {}},
        {"name": "hmc", "params": {"step_size": 0.2, "leapfrog_steps": 25}},
    )
    assert summary["verdict"] == {"status": "good", "signals": []}, summary["verdict"]
    store = Store(tmp_path / "store")
    (record,) = store.list()
    store.finish(record.id, "completed", summary=summary)
    monkeypatch.setenv("BASIN_HOME", str(store.home))
    assert main(["show", record.id, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["verdict"]["status"] == "good"


def test_hmc_with_step_size_auto_on_the_donut_is_good_without_a_typed_step(tmp_path):
    """The Playground's defaults with the step left to the warm-up (issue 59): good, and the
    summary holds what the warm-up settled on."""
    auto = {"name": "hmc", "params": {"step_size": "auto"}}
    summary = run(tmp_path, {"name": "donut", "params": {}}, auto)
    assert summary["verdict"] == {"status": "good", "signals": []}, summary["verdict"]
    adapted = summary["adapted"]
    assert adapted["finished"] and adapted["warmup"] == PLAYGROUND["burn_in"]
    assert 0.05 < adapted["step_size"] < 0.5 and len(adapted["inverse_mass"]) == 2


def test_a_kernel_without_an_mh_test_is_judged_by_the_scalars_it_declares():
    """Slice sampling's cost and MCLMC's energy error, against the bounds their SPECs declare
    (samplers.spec.Watch); below them, nothing is said."""
    base = {"target": {"name": "donut"}, "chains": 4, "steps": 100}
    slice_ = {**base, "sampler": {"name": "slice", "params": {}}}
    high = judge(slice_, {"scalars": {"evaluations": 40.0, "capped": 0.1}})
    assert codes(high, "warn") == {"evaluations", "capped"}
    assert judge(slice_, {"scalars": {"evaluations": 5.0, "capped": 0.0}})["signals"] == []
    mclmc = {**base, "sampler": {"name": "mclmc", "params": {}}}
    assert codes(judge(mclmc, {"scalars": {"energy_error": 0.02}}), "warn") == {"energy_error"}


# -- judge on draws whose truth is known -----------------------------------------------------


def _case(shift: float = 0.0, chains: int = 8, draws: int = 500):
    target = landscapes.make("gaussian", dtype="float64")
    g = torch.Generator().manual_seed(3)
    x = target.exact_sample(g, chains * draws).numpy().reshape(chains, draws, -1) + shift
    exact = target.exact_sample(torch.Generator().manual_seed(4), 20_000).numpy()
    from samplers import diagnostics

    summary = {
        "diverged_chains": 0,
        "acceptance": 0.6,
        "coordinates": {
            "rhat": np.atleast_1d(diagnostics.rhat(x)).tolist(),
            "ess_bulk": np.atleast_1d(diagnostics.ess_bulk(x)).tolist(),
        },
        "warnings": [],
    }
    spec = {"chains": chains, "sampler": {"name": "mala", "params": {"step_size": 0.5}}}
    return spec, summary, exact, x, target.bounds


def test_iid_exact_draws_are_good_and_the_same_draws_shifted_fail_ks():
    spec, summary, exact, x, bounds = _case()
    assert judge(spec, summary, bounds, exact, draws=x)["status"] == "good"
    spec, summary, exact, x, bounds = _case(shift=0.3)
    verdict = judge(spec, summary, bounds, exact, draws=x)
    assert codes(verdict) == {"ks"} and headline(verdict) == "fail (ks)"


def test_thresholds_follow_the_published_rules():
    spec, summary, *_ = _case()
    for rhat, status in ((1.005, "good"), (1.05, "warn"), (1.2, "fail")):
        summary["coordinates"]["rhat"] = [rhat, 1.0]
        assert judge(spec, summary)["status"] == status, rhat
    summary["coordinates"] = {"rhat": [1.0], "ess_bulk": [99.0]}
    assert codes(judge(spec, summary), "warn") == {"ess"}
    summary["coordinates"] = None
    summary["acceptance"] = 0.05  # below a third of MALA's band: the step is far too large
    assert codes(judge(spec, summary)) == {"acceptance"}
    summary["acceptance"], summary["diverged_chains"] = 0.6, 2
    assert codes(judge(spec, summary)) == {"diverged"}
    summary["diverged_chains"] = 0
    summary["warnings"] = [{"code": "dropped_gamma", "message": "the Gamma term is omitted"}]
    assert codes(judge(spec, summary), "warn") == {"dropped_gamma"}
    acceptance = np.array([0.5, 0.6, 0.001, 0.55])  # one chain barely accepted anything
    verdict = judge({**spec, "chains": 4}, {**summary, "warnings": []}, chain_acceptance=acceptance)
    assert codes(verdict) == {"stuck"} and verdict["signals"][0]["value"] == 1


def test_a_repriorised_run_is_judged_on_its_precision_warm_up_and_skipped_mh():
    """reprior-lmc: with MH skipped, a mean acceptance probability under Hron et al.'s 0.98 is
    flagged (the MH band does not apply); a burn-in shorter than the step's warm-up, and float32
    under repriorisation, are warned about."""
    lmc = {"step_size": 0.01, "mh": True, "warmup": 100}
    spec = {
        "target": {"name": "ntk-fcn", "params": {"parametrisation": "reprior"}},
        "sampler": {"name": "reprior-lmc", "params": lmc},
        "chains": 2, "steps": 1000, "burn_in": 100, "dtype": "float64",
    }  # fmt: skip
    summary = {"diverged_chains": 0, "acceptance": 0.9, "coordinates": None}
    assert judge(spec, summary)["status"] == "good"
    assert codes(judge(spec, {**summary, "acceptance": 0.3}), "warn") == {"acceptance"}
    assert codes(judge({**spec, "burn_in": 50}, summary), "warn") == {"warmup"}
    assert codes(judge({**spec, "dtype": "float32"}, summary), "warn") == {"precision"}
    skipped = {
        **spec,
        "sampler": {**spec["sampler"], "params": {**spec["sampler"]["params"], "mh": False}},
    }
    assert codes(judge(skipped, {**summary, "acceptance": 0.95}), "warn") == {"unadjusted"}
    assert judge(skipped, {**summary, "acceptance": 0.99})["status"] == "good"
