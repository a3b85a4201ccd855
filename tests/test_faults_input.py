"""Issue 38 (items 1, 2, 10, 11, 14): no input exhausts memory or hangs before it is refused,
every refusal is one line naming the field, and a run that went wrong does not pass as fine.

Inputs that once allocated gigabytes run in a subprocess whose address space is capped (so a
regression fails fast instead of taking the machine down), and the test asserts that the refusal
came within a second or two of ``main`` starting, with a small peak RSS."""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import landscapes
from cli.main import main
from landscapes import ParamError, registry
from runs.budget import check_budget, estimate
from runs.spec import SpecError, parse_spec
from runs.store import Store

ROOT = Path(__file__).resolve().parents[1]
GiB = 2**30
# ``main`` in a child, then its time and peak RSS as the last line of stderr. The peak is the
# child's own (VmHWM): Linux carries ru_maxrss across exec, so a child forked from a big test
# process reported that process's size (725 MB late in the suite)
CHILD = """
import json, resource, sys, time
from cli.main import main
start = time.perf_counter()

def peak_mb():
    try:
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

try:
    code = main(sys.argv[1:])
finally:
    report = {"seconds": time.perf_counter() - start, "rss_mb": peak_mb()}
    print(json.dumps(report), file=sys.stderr)
sys.exit(code)
"""
ADDRESS_SPACE = 3 * GiB  # torch's import maps ~0.65 GB; anything near this is a regression


def limited_cli(home: Path, *args: str, env: dict | None = None, timeout: float = 60):
    """(exit code, stderr lines without the report, seconds in main, peak RSS in MB)."""
    resource = pytest.importorskip("resource")

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    # a subprocess: its address space is capped, and its peak RSS is its own
    out = subprocess.run(
        [sys.executable, "-c", CHILD, *args],
        cwd=ROOT,
        env={**os.environ, "BASIN_HOME": str(home), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=cap,
    )
    lines = out.stderr.strip().splitlines()
    report = json.loads(next(line for line in lines if line.startswith('{"seconds"')))
    rest = [line for line in lines if not line.startswith('{"seconds"')]
    return out.returncode, rest, report["seconds"], report["rss_mb"]


def assert_refused_at_once(result, field: str, *fragments: str) -> None:
    code, lines, seconds, rss = result
    assert code == 2, lines
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}: "), lines
    for fragment in fragments:
        assert fragment in lines[0], lines
    assert seconds < 2.0, seconds  # arithmetic on the parameters, nothing built
    assert rss < 700, rss  # the interpreter with torch loaded is ~250 MB


def submit(*args: str) -> list[str]:
    return ["submit", "--sampler", "sgld", "--chains", "1", *args]


# ---------------------------------------------------------------------------------------------
# 1. Sizes are checked from the parameters before anything is allocated.


def test_eleven_wide_dln_layers_are_refused_before_any_is_built(tmp_path):
    widths = ",".join(["5000"] * 11)  # d = 10 x 5000^2 = 2.5e8 fits; 1e5 points do not
    result = limited_cli(tmp_path, *submit("--target", "dln", "--target-param", f"widths={widths}"))
    # a point holds H0 + HM = 10,000 numbers of data: at most 2e8 // 10,000 points
    assert_refused_at_once(result, "target.params.n", "choose n <= 20000")


def test_forty_one_wide_dln_layers_are_refused_on_d(tmp_path):
    widths = ",".join(["5000"] * 41)  # d = 40 x 5000^2 = 1e9
    args = submit("--target", "dln", "--target-param", f"widths={widths}", "--target-param", "n=10")
    assert_refused_at_once(limited_cli(tmp_path, *args), "target.params.widths", "1e+09", "4e+08")


def test_the_100m_class_is_refused_from_its_drawn_widths(tmp_path):
    # the class's widths from seed 0, drawn as App. D.1 says, independently of the code under test
    g = torch.Generator().manual_seed(0)
    depth = int(torch.randint(2, 40 + 1, (1,), generator=g))
    widths = [int(h) for h in torch.randint(500, 3000 + 1, (depth + 1,), generator=g)]
    widest = max(widths[0] + widths[-1], max(widths))
    args = submit("--target", "dln", "--target-param", "size_class=100M")
    assert_refused_at_once(
        limited_cli(tmp_path, *args), "target.params.n", f"choose n <= {200_000_000 // widest}"
    )


def test_a_wide_rrr_hidden_layer_counts_in_its_data_pass(tmp_path):
    # 1.25e7 points x 1000 hidden units, float64, is 100 GB in the truth's pass over the data
    args = ["--target-param", "inputs=1", "--target-param", "outputs=1", "--target-param", "rank=1"]
    args = submit(
        "--target", "rrr", "--target-param", "hidden=1000", "--target-param", "n=1e7", *args
    )
    assert_refused_at_once(limited_cli(tmp_path, *args), "target.params.n", "choose n <= 200000")


def test_make_checks_before_it_builds(tmp_path):
    code = (
        "import landscapes, time\n"
        "t = time.perf_counter()\n"
        "try:\n"
        "    landscapes.make('dln', widths=(5000,) * 11, n=100_000)\n"
        "except landscapes.ParamError as exc:\n"
        "    print(exc.field, time.perf_counter() - t)\n"
    )
    resource = pytest.importorskip("resource")
    # a subprocess: its address space is capped
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ},
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE,) * 2),
    )
    field, seconds = out.stdout.split()
    assert field == "dln.n" and float(seconds) < 1.0, out.stderr


SMALL = [
    ("dln", {"widths": (3, 4, 2), "rank": 1, "n": 50}),
    ("dln", {"widths": (3, 4, 2), "n": 50, "seed": 4}),  # random rank reductions
    ("dln", {"size_class": "tiny", "n": 30, "seed": 7}),
    ("dln", {"size_class": "small", "n": 30, "seed": 2}),
    ("rrr", {"inputs": 3, "hidden": 2, "outputs": 4, "rank": 1, "n": 40}),
    ("polynomial", {"powers": (1, 2, 0), "n": 40}),
    ("tanh", {"hidden": 5, "n": 40}),
    ("mlp", {"hidden_sizes": (7, 3), "n": 100}),
    ("mlp", {"dataset": "moons", "hidden_sizes": (5,), "n": 37}),
    ("mlp", {"dataset": "two-clusters", "hidden_sizes": (), "n": 21}),
    ("mlp", {"hidden_sizes": (7, 3), "n": 100, "prior": "horseshoe"}),  # + a scale per tensor
    ("mlp", {"dataset": "moons", "hidden_sizes": (5,), "n": 37, "prior": "gaussian"}),
    ("mlp", {"hidden_sizes": (4,), "n": 1077}),  # digits: 360 validation images held too
    ("slp", {}),
    ("slp", {"dataset": "digits", "n": 10}),
    ("banana", {}),
    ("gaussian", {"dim": 3, "rotate": True}),
    ("custom", {"formula": "w0**2 + w3**2"}),
]


@pytest.mark.parametrize(
    ("name", "params"), SMALL, ids=[f"{n}-{i}" for i, (n, _) in enumerate(SMALL)]
)
def test_facts_equal_what_the_built_target_holds(name, params):
    got = registry.facts(name, params)
    target = landscapes.make(name, device="cpu", dtype="float32", **params)
    tensors = [v for v in vars(target).values() if isinstance(v, torch.Tensor)]
    assert got["dim"] == target.dim == sum(math.prod(s) for s in target.layout.values())
    assert got["n"] == target.n
    assert got["floats"] == sum(t.numel() for t in tensors if t.is_floating_point())
    other = sum(t.numel() * t.element_size() for t in tensors if not t.is_floating_point())
    assert got["other_bytes"] == other
    assert got["truth"] == (target.truth_point is not None)  # w0, or a potential's minimum
    assert got["nbeta"] == pytest.approx(target.nbeta)
    true = target.true_llc
    assert got["true_llc"] == (None if true is None else true[0])
    assert got["multiplicity"] == (None if true is None else true[1])
    if name == "dln":
        assert tuple(got["widths"]) == target.widths
    if hasattr(target, "sizes"):  # an MLP: its layer sizes, input to output
        assert tuple(got["widths"]) == target.sizes
        assert got["nbeta"] == (target.n if target.has_prior else target.n / math.log(target.n))
    if "task" in vars(target):  # networks: their classes and test points too
        labels = target.task == "classification"
        assert got["classes"] == (target.classes if labels else None)
        assert got["n_test"] == len(target.y_test)


def test_facts_of_the_largest_class_come_from_arithmetic_alone():
    started = time.perf_counter()
    got = registry.facts("dln", {"size_class": "100M", "seed": 0, "n": 10})
    assert time.perf_counter() - started < 0.5  # its 79 M float64 parameters would take seconds
    g = torch.Generator().manual_seed(0)
    depth = int(torch.randint(2, 40 + 1, (1,), generator=g))
    widths = [int(h) for h in torch.randint(500, 3000 + 1, (depth + 1,), generator=g)]
    assert list(got["widths"]) == widths
    assert got["dim"] == sum(a * b for a, b in itertools.pairwise(widths))
    assert got["true_llc"] is None  # a random-rank truth needs its drawn layers: not built here


def test_facts_refuse_like_the_builders():
    with pytest.raises(ParamError) as info:
        registry.facts("dln", {"widths": (3, 2, 4), "rank": 3})
    assert info.value.field == "dln.rank" and "[0, 2]" in str(info.value)
    with pytest.raises(ParamError, match="positive"):
        registry.facts("polynomial", {"powers": (0, 0)})
    with pytest.raises(ParamError) as info:
        registry.facts("mlp", {"n": 5000})
    assert info.value.field == "mlp.n" and "[1, 1437]" in str(info.value)
    with pytest.raises(ParamError, match="unknown target"):
        registry.facts("dlm", {})


# ---------------------------------------------------------------------------------------------
# 2. The budget counts a step's activations.


def tanh_spec(hidden: int, n: int, chains: int, **sampler) -> dict:
    return {
        "target": {"name": "tanh", "params": {"hidden": hidden, "n": n}},
        "sampler": {"name": "sgld", "params": sampler},
        "chains": chains,
        "steps": 100,
    }


def test_a_full_batch_step_counts_chains_x_n_x_hidden():
    spec = parse_spec(tanh_spec(1000, 1_000_000, 4))
    # one [C, n, H] float32 tensor of tanh(a x) alone: 4 x 1e6 x 1000 x 4 bytes = 16 GB
    assert estimate(spec).device_bytes >= 4 * 1_000_000 * 1000 * 4
    with pytest.raises(SpecError) as info:
        check_budget(spec, budget_bytes=8 * GiB)
    assert info.value.field == "memory"
    for knob in ("chains", "sampler.params.batch_size", "target.params.n"):
        assert knob in info.value.message, info.value.message
    # a minibatch helps: the run's initial loss then passes DATA_CHUNK = 65536 points at a time,
    # two [C, chunk, H] tensors (a x and tanh(a x)) alive: 2 x 4 x 65536 x 1000 x 4 = 2.1 GB
    minibatch = estimate(parse_spec(tanh_spec(1000, 1_000_000, 4, batch_size=100)))
    assert 2 * 4 * 65536 * 1000 * 4 <= minibatch.device_bytes < estimate(spec).device_bytes / 5


def test_a_minibatch_lowers_the_step_to_its_batch():
    # 1e5 points: a full-batch step keeps 4 x 1e5 x 1000 x 4 bytes = 1.6 GB of tanh(a x) for
    # the backward pass, with as much again in a x and in the gradients: over 4.8 GB (4.5 GiB)
    full = parse_spec(tanh_spec(1000, 100_000, 4))
    assert estimate(full).device_bytes >= 3 * 4 * 100_000 * 1000 * 4
    with pytest.raises(SpecError, match=r"set sampler\.params\.batch_size"):
        check_budget(full, budget_bytes=4 * GiB)
    # batches of 100: the initial loss's pass, DATA_CHUNK = 65536 points at a time (a x and
    # tanh(a x): 2.1 GB), is the largest part
    small = check_budget(parse_spec(tanh_spec(1000, 100_000, 4, batch_size=100)), 4 * GiB)
    assert 2 * 4 * 65536 * 1000 * 4 <= small.device_bytes < 4 * GiB


def test_the_327_gb_tanh_run_is_refused_at_submit(tmp_path):
    args = ["submit", "--target", "tanh", "--target-param", "hidden=4096"]
    args += ["--target-param", "n=1e7", "--sampler", "sgld", "--chains", "2"]
    # 2 x 1e7 x 4096 x 4 bytes = 327 GB: over any budget; 64 GiB makes the test machine-free
    result = limited_cli(tmp_path, *args, env={"BASIN_MEMORY_BUDGET": str(64 * GiB)})
    assert_refused_at_once(result, "memory", "chains", "target.params.n")
    assert not Store(tmp_path).list()


def test_small_runs_keep_small_estimates():
    est = estimate(parse_spec({"target": {"name": "banana"}, "sampler": {"name": "mala"}}))
    assert est.device_bytes < 2**20
    # the summary keeps all 64 chains' 1000 draws of (x, y) in float32 for ESS and R-hat
    assert est.host_bytes == 64 * 1000 * 2 * 4 + 2 * 64 * 2 * 8
    mlp = estimate(parse_spec({"target": {"name": "mlp"}, "sampler": {"name": "sgld"}}))
    assert mlp.device_bytes < 2**30  # the digits MLP, 64 chains, full batch of 1437 points


# ---------------------------------------------------------------------------------------------
# 10. submit and run validate the same things, before creating a run.


@pytest.mark.parametrize("command", ["submit", "run"])
def test_a_bad_splitting_scheme_is_refused_before_a_run_exists(
    command, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("BASIN_HOME", str(tmp_path))
    args = [command, "--target", "banana", "--sampler", "splitting", "--param", "scheme=XYZ"]
    assert main([*args, "--steps", "10", "--compile", "never"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: sampler.params.scheme: "), err
    assert "'XYZ'" in err[0] and "A, B, O" in err[0]
    assert not Store(tmp_path).list()


# ---------------------------------------------------------------------------------------------
# 11. Slots, sweep sizes, surface ranges and spec files are bounded.


@pytest.mark.parametrize("slots", ["-1", "0"])
def test_worker_refuses_fewer_than_one_slot(slots, tmp_path):
    env = {**os.environ, "BASIN_HOME": str(tmp_path)}
    # a subprocess for its timeout: a hang in this process would stall the suite
    out = subprocess.run(
        [sys.executable, "-m", "jobs", "worker", "--slots", slots, "--once"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,  # it used to hang
    )
    assert out.returncode == 2
    assert "--slots" in out.stderr and "at least 1" in out.stderr and "Traceback" not in out.stderr


def test_a_sweep_over_the_cap_is_refused_at_once(tmp_path):
    args = ["sweep", "dln", "--problems", "10000", "--samplers", "sgld,rmsprop-sgld,adam-sgld"]
    result = limited_cli(tmp_path, *args, "--step-sizes", "1e-8,1e-7", "--submit-only", timeout=30)
    assert_refused_at_once(
        result, "sweep", "problems x samplers x step_sizes = 60000 runs", "over the 1000"
    )
    assert not Store(tmp_path).list_sweeps()


def test_a_calibration_over_the_cap_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BASIN_HOME", str(tmp_path))
    steps = ",".join(f"{10 ** (-k / 100):.6g}" for k in range(1, 1002))  # 1001 step sizes
    args = ["sweep", "calibrate", "--target", "rrr", "--sampler", "sgld", "--step-sizes", steps]
    assert main([*args, "--submit-only"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: sweep: step_sizes x nbetas = 1001 runs, over the 1000"), err
    assert not Store(tmp_path).list_sweeps()


def test_a_surface_range_beyond_the_bound_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BASIN_HOME", str(tmp_path))
    args = ["--target", "banana", "--sampler", "mala", "--chains", "2", "--steps", "20"]
    assert main(["run", *args, "--compile", "never"]) == 0
    run_id = Store(tmp_path).list()[0].id
    capsys.readouterr()
    for bad in ("1e300", "-1", "inf"):
        assert main(["surface", run_id, "--range", bad]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: --range: must be a number in (0, 1e+06]"), err
        assert f"got {float(bad):g}" in err


def test_spec_files_are_capped_in_size_and_depth(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BASIN_HOME", str(tmp_path))
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"target": {"name": "banana"}, "pad": "x" * 2**20}))
    assert main(["submit", str(big)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: spec: ") and "1 MiB" in err and "1.0 MiB" in err, err
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)  # 200 kB
    assert main(["submit", str(deep)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: spec: ") and "nested deeper than 20" in err, err
    mild = tmp_path / "mild.json"
    mild.write_text(json.dumps({"target": {"name": "banana", "params": {"a": [[[[[[1]]]]]]}}}))
    assert main(["submit", str(mild), "--sampler", "mala"]) == 2  # depth 8: a value error
    assert "target.params.a" in capsys.readouterr().err
    assert not Store(tmp_path).list()


# ---------------------------------------------------------------------------------------------
# 14. Formulas with nothing to sample are refused; failed runs are not plainly completed.


@pytest.mark.parametrize(
    ("formula", "reason"),
    [
        ("log(-1 - x**2) + y", "NaN or infinite"),
        ("1 / (x - x)", "NaN or infinite"),
        ("2 * pi", "flat: nothing to sample"),
        ("x - x + 3 * 0 * y", "flat: nothing to sample"),
        ("-x**2 - y**2", "unbounded below"),
        ("x + y**2", "unbounded below"),
        ("10 - w0**2 / 1000", "unbounded below"),
    ],
)
def test_a_formula_with_nothing_to_sample_is_refused(formula, reason):
    spec = parse_spec(
        {"target": {"name": "custom", "params": {"formula": formula}}, "sampler": {"name": "mala"}}
    )
    with pytest.raises(SpecError) as info:
        check_budget(spec)
    assert info.value.field == "target.params.formula" and reason in info.value.message


@pytest.mark.parametrize(
    "formula",
    [
        "(1 - x)**2 / 10 + (y - x**2)**2",  # the default: a banana
        "(x**2 - 1)**2 + y**2",  # a double well
        "x**2 + y**2 - 1000 * (x + y)",  # bounded below, by -5e5 at (500, 500)
        "sin(5 * x) + x**2 / 10 + abs(y)",
        "exp(x) + exp(-x) + y**2",  # overflows to inf far out, finite near 0
    ],
)
def test_a_formula_with_a_minimum_passes(formula):
    spec = parse_spec(
        {"target": {"name": "custom", "params": {"formula": formula}}, "sampler": {"name": "mala"}}
    )
    check_budget(spec)


def test_a_flat_formula_is_refused_by_run_before_a_run_exists(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BASIN_HOME", str(tmp_path))
    args = ["run", "--target", "custom", "--target-param", "formula=x - x", "--sampler", "mala"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: target.params.formula: flat"), err
    assert not Store(tmp_path).list()


def run_json(tmp_path, monkeypatch, capsys, *args: str) -> tuple[dict, list[str]]:
    monkeypatch.setenv("BASIN_HOME", str(tmp_path))
    assert main(["run", *args, "--steps", "50", "--compile", "never", "--json"]) == 0
    out = capsys.readouterr()
    return json.loads(out.out), out.err.strip().splitlines()


def test_a_run_whose_every_chain_diverged_warns(tmp_path, monkeypatch, capsys):
    # ULA at step 10 on N(0, 1e-12 I): the gradient w / 1e-12 throws every chain out at once
    summary, err = run_json(
        tmp_path, monkeypatch, capsys, "--target", "gaussian", "--target-param", "scales=1e-6",
        "--sampler", "ula", "--param", "step_size=10", "--chains", "4",
    )  # fmt: skip
    assert summary["diverged_chains"] == 4
    codes = [w["code"] for w in summary["warnings"]]
    assert codes == ["all_diverged"]
    assert any(line.startswith("warning: all_diverged: every chain") for line in err), err
    stored = Store(tmp_path).get(summary["run_id"]).summary
    assert [w["code"] for w in stored["warnings"]] == ["all_diverged"]


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")  # arviz: R-hat of stuck chains
def test_a_run_that_accepted_nothing_warns_and_keeps_the_kernels_caveats(
    tmp_path, monkeypatch, capsys
):
    # RWMH at step 10 from N(0, I) on N(0, 1e-12 I) in 50 dimensions: a proposal lands closer
    # to 0 than its start with probability ~ 0 (|w + 10 xi| ~ 70 against |w| ~ 7)
    summary, err = run_json(
        tmp_path, monkeypatch, capsys, "--target", "gaussian", "--target-param", "dim=50",
        "--target-param", "scales=1e-6", "--sampler", "rwmh", "--param", "step_size=10",
        "--chains", "4",
    )  # fmt: skip
    assert summary["acceptance"] == 0 and summary["diverged_chains"] == 0
    assert [w["code"] for w in summary["warnings"]] == ["no_acceptance"]
    assert any(line.startswith("warning: no_acceptance: ") for line in err), err
    # a kernel caveat stays, the new warning comes after it: RMSProp-SGLD's noise at step 10
    # walks every chain into x < 0, where sqrt(x) is NaN
    summary, err = run_json(
        tmp_path, monkeypatch, capsys, "--target", "custom", "--target-param",
        "formula=sqrt(x) + x**2 + y**2", "--sampler", "rmsprop-sgld", "--param", "step_size=10",
        "--chains", "4",
    )  # fmt: skip
    assert [w["code"] for w in summary["warnings"]] == ["dropped_gamma", "all_diverged"]


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["sweep", "reprior", "--widths", "8,2.5"], "--widths"),
        (["sweep", "vi", "--target", "tanh", "--ns", "500,2.7"], "--ns"),
        (["wide", "kl", "--widths", "8,0"], "--widths"),
    ],
)
def test_fractional_or_zero_sizes_are_refused_not_truncated(tmp_path, argv, flag):
    from clitest import jobs

    out = jobs(tmp_path, *argv)  # once: 2.5 queued a width-2 network without a word
    assert out.returncode == 2 and f"{flag}: must be comma-separated integers >= 1" in out.stderr
    assert Store(tmp_path).list() == []


# ---------------------------------------------------------------------------------------------
# Issue 60 item 5: what a sweep once queued without a word is refused, naming the field.


def one_line(out, field: str, *fragments: str) -> str:
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr[-2000:]
    assert lines[0].startswith(f"error: {field}: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def test_a_reprior_sweep_at_depth_zero_is_refused(tmp_path):
    from clitest import jobs

    # depth 0 is Bayesian linear regression: no hidden layer, so every width is one network
    out = jobs(tmp_path, "sweep", "reprior", "--depth", "0", "--submit-only")
    one_line(out, "depth", "[1, 8]", "no hidden layer", "got 0")
    assert Store(tmp_path).list() == []


def test_a_calibration_on_a_potential_without_an_llc_is_refused(tmp_path):
    from clitest import jobs

    args = ["sweep", "calibrate", "--sampler", "sgld", "--step-sizes", "1e-3,1e-2"]
    out = jobs(tmp_path, *args, "--target", "banana", "--submit-only")
    one_line(out, "target", "banana is a potential", "no learning coefficient")
    assert Store(tmp_path).list() == []
    # normal-crossing knows its learning coefficient: a calibration there checks against it
    out = jobs(tmp_path, *args, "--target", "normal-crossing", "--steps", "20", "--submit-only")
    assert out.returncode == 0, out.stderr
    assert len(Store(tmp_path).list()) == 2


def test_a_checkpoint_sweep_keeps_its_observables_and_refuses_predictive_without_a_test_set(
    tmp_path,
):
    from clitest import jobs

    from tests import model_factories

    torch.save(model_factories.small_classifier()[0].state_dict(), tmp_path / "step-10.pt")
    args = ["sweep", "checkpoints", "--factory", "tests/model_factories.py:small_classifier"]
    args += ["--checkpoints", str(tmp_path / "step-*.pt"), "--sampler", "sgld", "--steps", "20"]
    out = jobs(tmp_path / "home", *args, "--observe", "predictive", "--submit-only")
    one_line(out, "observables", "'predictive' evaluates the draws on a test set")
    assert Store(tmp_path / "home").list() == []
    out = jobs(tmp_path / "home", *args, "--observe", "thermo", "--submit-only")
    assert out.returncode == 0, out.stderr  # kept beside llc, not dropped without a word
    (run,) = Store(tmp_path / "home").list()
    assert run.spec["observables"] == ["thermo", "llc"]


# ---------------------------------------------------------------------------------------------
# Issue 60 item 6: work with no reason to be unbounded is capped, saying the cap and why.


def test_wide_kl_caps_its_prior_draws(tmp_path):
    from clitest import jobs

    started = time.perf_counter()
    out = jobs(tmp_path, "wide", "kl", "--widths", "8", "--draws", "1000000000")
    one_line(out, "--draws", "[2, 100000]", "got 1000000000", "Cholesky")
    assert time.perf_counter() - started < 2.0  # refused before a width is built
    one_line(jobs(tmp_path, "wide", "kl", "--widths", "8", "--draws", "0"), "--draws")
    one_line(jobs(tmp_path, "wide", "kl", "--widths", "8", "--seed", str(2**64)), "--seed")
    one_line(jobs(tmp_path, "wide", "kl", "--widths", "8", "--depth", "0"), "--depth", "width")


@pytest.mark.parametrize("argv", [["worker", "--once"], ["sweep", "reprior", "--submit-only"]])
def test_slots_are_capped(tmp_path, argv):
    from clitest import jobs

    out = jobs(tmp_path, *argv[:-1], "--slots", "100000000", argv[-1])
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    line = out.stderr.strip().splitlines()[-1]  # argparse's: its usage, then the line
    assert "--slots: must be an integer in [1, " in line and "got '100000000'" in line, line
    assert "worker process" in line, line  # why
    assert Store(tmp_path).list() == []


def test_a_spec_path_that_is_a_fifo_is_refused_without_opening_it(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no named pipes here")
    os.mkfifo(tmp_path / "spec.json")  # no writer: open() would wait for one forever
    # a subprocess for its timeout: a hang here would stall the suite
    out = subprocess.run(
        [sys.executable, "-m", "jobs", "submit", str(tmp_path / "spec.json")],
        cwd=ROOT,
        env={**os.environ, "BASIN_HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    one_line(out, "spec", "is not a regular file (a FIFO, device or folder)")
    out = subprocess.run(
        [sys.executable, "-m", "jobs", "submit", "/dev/zero"],
        cwd=ROOT,
        env={**os.environ, "BASIN_HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    one_line(out, "spec", "/dev/zero is not a regular file")


def nuts(**params) -> dict:
    return {
        "target": {"name": "banana"},
        "sampler": {"name": "nuts", "params": params},
        "chains": 16,
        "steps": 500,
    }


def test_the_time_estimate_counts_nuts_trees_at_their_depth():
    from runs import budget

    usual = budget.estimate_seconds(nuts(step_size=0.1))
    tiny = budget.estimate_seconds(nuts(step_size=1e-6))  # trees of 2^10 leapfrogs
    cold = budget.estimate_seconds(nuts(step_size=0.1, nbeta=1e-12))  # a scale of ~2.5e6
    assert usual < budget.BUDGET_SECONDS < tiny and tiny == pytest.approx(cold)
    assert budget.gradient_evaluations(nuts(step_size=1e-6)) >= 2**10
    assert budget.gradient_evaluations(nuts(step_size=1e-6, max_depth=4)) < 2**6  # its cap
    assert budget.gradient_evaluations(nuts(step_size="auto")) < 2**7  # the warm-up adapts it
    # a step at the target's own scale: its trees are short whatever the scale is
    small = {"name": "gaussian", "params": {"scales": [1e-6]}}
    assert budget.gradient_evaluations({**nuts(step_size=1e-7), "target": small}) < 2**7


@pytest.mark.parametrize(
    ("param", "field", "advice"),
    [("step_size=1e-12", "step_size", "or 'auto'"), ("nbeta=1e-12", "nbeta", "raise nbeta")],
)
def test_nuts_far_below_its_targets_scale_is_refused_at_submit(tmp_path, param, field, advice):
    from clitest import jobs

    out = jobs(tmp_path, "submit", "--target", "banana", "--sampler", "nuts", "--param", param)
    one_line(out, f"sampler.params.{field}", "max_depth 10", "1023 leapfrog steps", advice)
    assert Store(tmp_path).list() == []
    out = jobs(tmp_path, "submit", "--target", "banana", "--sampler", "nuts", "--steps", "50")
    assert out.returncode == 0, out.stderr  # NUTS at its default step is queued
