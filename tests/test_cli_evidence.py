"""``python -m jobs evidence``: nested sampling's log Z against a potential's exact normaliser
(its closed form in landscapes), and bad input refused by name."""

import json

import pytest
from clitest import jobs


@pytest.mark.parametrize("target", ["gaussian", "mixture"])
def test_the_evidence_agrees_with_the_exact_normaliser(target, tmp_path):
    done = jobs(tmp_path, "evidence", "--target", target, "--param", "live=300", "--json")
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert abs(facts["log_z"] - facts["exact_log_z"]) <= 3 * facts["log_z_error"], facts
    assert facts["verdict"] == "consistent" and facts["stopped"] == "dlogz"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--target", "polynomial"], "target: must be a potential with a box"),
        (["--target", "donut", "--param", "live=3"], "nested.params.live: must be an integer"),
        (["--target", "donut", "--target-param", "radius=-1"], "target.params.radius"),
    ],
)
def test_bad_input_exits_2_naming_the_field(argv, message, tmp_path):
    done = jobs(tmp_path, "evidence", *argv)
    assert done.returncode == 2 and message in done.stderr, done.stderr
