"""``python -m bench whole`` (bench/whole.py) without its peers or runs: the ratio arithmetic, and
that every case's Basin command line parses into a valid RunSpec."""

from __future__ import annotations

import math

import pytest
import torch

from bench import whole
from cli.flags import spec_from_args
from cli.main import build_parser
from runs.spec import parse_spec


def test_median_of_per_pair_ratios():
    basin, peer = [2.0, 9.0, 3.0], [1.0, 3.0, 6.0]
    assert whole.pair_ratios(basin, peer) == [2.0, 3.0, 0.5]
    assert whole.median_ratio(basin, peer) == 2.0  # not median(basin) / median(peer) = 1.0
    assert whole.median_ratio(basin, []) is None
    # a peer that ran once: its one time serves every pair
    assert whole.pair_ratios([1.0, 4.0, 2.0], [2.0]) == [0.5, 2.0, 1.0]
    with pytest.raises(ValueError):
        whole.pair_ratios([1.0, 2.0], [1.0, 2.0, 3.0])


def test_summary_uses_whole_pairs_only(monkeypatch):
    def t(wall: float, cpu: float) -> whole.Timed:
        return whole.Timed(wall, cpu, {"compiled": True})

    basin = [t(2.0, 4.0), t(4.0, 4.0), t(9.0, 9.0)]
    peer = [t(1.0, 1.0), t(4.0, 2.0)]  # the third pair's peer process was stopped
    monkeypatch.setattr(whole, "accuracy", lambda *args: "-")  # no summaries to read here
    r = whole.summarise("banana-sgld-64", 100, basin, peer)
    assert r["wall_ratios"] == [2.0, 1.0] and r["wall_ratio"] == 1.5
    assert r["cpu_ratios"] == [4.0, 2.0] and r["cpu_ratio"] == 3.0
    assert r["basin_wall"] == 4.0 and r["peer_wall"] == 2.5
    assert r["compiled"] == 3


def test_nuts_depth_is_basins_default():
    from samplers.nuts import NUTS

    default = {p.name: p.default for p in NUTS.SPEC.params}["max_depth"]
    assert whole.NUTS_MAX_DEPTH == default
    assert whole.BLACKJAX_CASES["banana-nuts-128"]["max_depth"] == default


@pytest.mark.parametrize("name", list(whole.CASES))
def test_basin_command_is_a_valid_run_spec(name, tmp_path):
    checkpoint = ""
    if name == "llc-module":
        from examples.digits_mlp import TRAIN, model

        assert whole.MODULE["n"] == TRAIN  # nbeta = n / log n of the digits' training set
        checkpoint = str(tmp_path / "w.pt")
        torch.save(model().state_dict(), checkpoint)
    argv = whole.basin_args(name, checkpoint=checkpoint)
    assert argv[0] == "run" and argv[-1] == "--json"
    spec = parse_spec(spec_from_args(build_parser().parse_args(argv)))
    assert spec.seed == 0 and spec.compile == "auto"  # the CLI's default path
    assert spec.steps == whole.CASES[name].steps
    if name in whole.BLACKJAX_CASES:
        case = whole.BLACKJAX_CASES[name]
        assert spec.target.name == "banana" and spec.sampler.name == case["sampler"]
        assert (spec.chains, spec.thin) == (case["chains"], case["thin"])
        assert spec.sampler.params["step_size"] == case["step_size"]
    else:
        assert spec.observables == ["llc"] and spec.sampler.name == "sgld"
    if name == "llc-normal-crossing":
        assert spec.llc.w0 == "truth" and spec.sampler.params["localization"] == 0.0
        assert spec.target.params["n"] == 1000 and spec.chains == 10
    if name == "llc-module":
        assert spec.target.params["checkpoint"] == checkpoint
        assert math.isclose(spec.sampler.params["nbeta"], 1437 / math.log(1437))
