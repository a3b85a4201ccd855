"""Bad input is refused with an error that names the field and what is allowed; hostile
formulas are refused without running anything."""

import ast
import builtins
import contextlib
import os
import sys

import numpy as np
import pytest
import torch

import landscapes
from landscapes import ParamError
from landscapes.formula import compile_formula


def refused(name, field, *fragments, **params):
    with pytest.raises(ParamError) as info:
        landscapes.make(name, device="cpu", **params)
    assert info.value.field == field, str(info.value)
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)
    return str(info.value)


def test_unknown_target_lists_the_choices():
    message = refused("gaussain", "target", "gaussian", "banana")
    assert "unknown target 'gaussain'" in message


def test_unknown_parameter_lists_the_known_ones():
    refused("gaussian", "gaussian.dimension", "unknown parameter", "'dim'", dimension=3)
    refused("banana", "banana.dim", "takes ['a', 'b', 'gradient_noise']", dim=3)


@pytest.mark.parametrize(
    ("name", "field", "params", "fragment"),
    [
        ("gaussian", "gaussian.dim", {"dim": 0}, "an integer in [1, 2000]"),
        ("gaussian", "gaussian.dim", {"dim": 2.5}, "an integer in [1, 2000]"),
        ("gaussian", "gaussian.dim", {"dim": "two"}, "got 'two'"),
        ("gaussian", "gaussian.dim", {"dim": np.True_}, "an integer in [1, 2000]"),
        ("gaussian", "gaussian.scales", {"scales": (1.0, -1.0)}, "each in [1e-06, 1e+06]"),
        ("gaussian", "gaussian.scales", {"dim": 3, "scales": (1.0, 2.0)}, "1 or 3 entries"),
        ("gaussian", "gaussian.condition", {"dim": 1, "condition": 10.0}, "dim >= 2"),
        ("gaussian", "gaussian.condition", {"condition": 0.5}, "[1, 1e+12]"),
        ("gaussian", "gaussian.rotate", {"rotate": "maybe"}, "true or false"),
        ("banana", "banana.a", {"a": float("nan")}, "in [0.1, 10]"),
        ("donut", "donut.width", {"width": 0.0}, "in [0.0001, 100]"),
        ("funnel", "funnel.dim", {"dim": 1}, "[2, 1000]"),
        ("normal-crossing", "normal-crossing.k", {"k": (1, 25)}, "each in [0, 20]"),
        ("normal-crossing", "normal-crossing.form", {"form": "mean"}, "['product', 'sum']"),
        ("normal-crossing", "normal-crossing.prior_std", {"prior_std": 0.0}, "not integrable"),
        ("normal-crossing", "normal-crossing.k", {"k": (0, 2), "form": "sum"}, ">= 1"),
        ("dln", "dln.widths", {"widths": (5,)}, "length 2..41"),
        ("dln", "dln.rank", {"widths": (3, 2, 4), "rank": 3}, "[0, 2]"),
        ("dln", "dln.n", {"n": 0}, "[1, 1e+07]"),
        ("dln", "dln.n", {"widths": (4000, 4000), "n": 1_000_000}, "choose n <="),
        ("dln", "dln.size_class", {"size_class": "huge"}, "'tiny'"),
        ("rrr", "rrr.rank", {"inputs": 2, "hidden": 3, "outputs": 4, "rank": 3}, "[0, 2]"),
        ("polynomial", "polynomial.powers", {"powers": (0, 0)}, "positive"),
        ("tanh", "tanh.hidden", {"hidden": 0}, "[1, 4096]"),
        ("mlp", "mlp.activation", {"activation": "softmax"}, "'relu'"),
        ("mlp", "mlp.n", {"n": 5000}, "[1, 1437]"),
        ("mlp", "mlp.hidden_sizes", {"hidden_sizes": (8, 0)}, "each in [1, 4096]"),
        ("slp", "slp.dataset", {"dataset": "mnist"}, "'digits'"),
        # beyond float's range: float() raises OverflowError, once a traceback
        ("gaussian", "gaussian.dim", {"dim": 10**400}, "[1, 2000], got 1000"),
        ("mlp", "mlp.hidden_sizes", {"hidden_sizes": (8, 10**400)}, "(401 digits)"),
    ],
)
def test_out_of_range_values_name_the_field_and_the_range(name, field, params, fragment):
    refused(name, field, fragment, **params)


def test_device_and_dtype_are_checked():
    with pytest.raises(ParamError, match="dtype"):
        landscapes.make("banana", dtype="float16")
    with pytest.raises(ParamError, match="device"):
        landscapes.make("banana", device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ParamError, match="no CUDA device"):
            landscapes.make("banana", device="cuda")


@pytest.mark.parametrize("name", ["banana", "funnel", "dln", "custom"])
def test_wrong_positions_are_refused(name):
    target = landscapes.make(name, device="cpu", dtype="float32")
    d = target.dim
    for bad in (torch.zeros(d), torch.zeros(3, d + 1), torch.zeros(2, 3, d)):
        with pytest.raises(ParamError, match=rf"w: must have shape \[C, {d}\]"):
            target.loss(bad)
    with pytest.raises(ParamError, match="float64 on cpu but the target was built for"):
        target.grad(torch.zeros(3, d, dtype=torch.float64))
    with pytest.raises(ParamError, match=r"torch\.Tensor"):
        target.loss([[0.0] * d])


HOSTILE = [
    ("__import__('os').system('touch /tmp/basin-pwned')", "attribute access is not allowed"),
    ("__import__('os')", "'__import__' is not an allowed function"),
    ("os.system('ls')", "attribute access is not allowed"),
    ("x.__class__", "attribute access is not allowed"),
    ("(lambda: 1)()", "lambda is not allowed"),
    ("(lambda t: t)", "lambda is not allowed"),
    ("[x for x in (1, 2)]", "comprehension is not allowed"),
    ("sum(x for x in (1, 2))", "'sum' is not an allowed function"),
    ("9**9**9", "exponent is too large"),
    ("x**1000", "exponent is too large"),
    ("x**(2**10)", "exponent is too large"),
    ("1e300 * x", "too large"),
    ("'abc'", "only numbers are allowed"),
    ("True + x", "only numbers are allowed"),
    ("x if y else 1", "IfExp is not allowed"),
    ("x[0]", "indexing is not allowed"),
    ("exp(x, y)", "exactly one plain argument"),
    ("exp(x=1)", "exactly one plain argument"),
    ("exp(*x)", "exactly one plain argument"),
    ("open('f')", "'open' is not an allowed function"),
    ("eval('1')", "'eval' is not an allowed function"),
    ("x < y", "Compare is not allowed"),
    ("x and y", "BoolOp is not allowed"),
    ("x // 2", "operator FloorDiv is not allowed"),
    ("x @ y", "operator MatMult is not allowed"),
    ("z + 1", "unknown name 'z'"),
    ("w01**2 + w1**2", "unknown name 'w01'"),  # no column is named w01: refused, not mid-run
    ("w999999999", "at most w0..w63"),  # 10^9 columns would exhaust memory
    ("x + w3", "either x, y or w0"),
    ("x +", "not a valid formula"),
    ("x; import os", "not a valid formula"),
    ("(" * 300 + "x" + ")" * 300, "too"),
    ("x" + " + x" * 200, "too long"),
    ("", "non-empty"),
]


DANGEROUS = {"os", "sys", "subprocess", "shutil", "socket", "ctypes", "importlib", "pty", "posix"}


@contextlib.contextmanager
def nothing_may_run():
    """Make eval, exec, imports and code compilation fail while the parser runs."""

    def forbidden(*args, **kwargs):
        raise AssertionError("the formula parser must never eval, exec, compile or import")

    real = {fn: getattr(builtins, fn) for fn in ("eval", "exec", "__import__", "compile")}

    def parse_only(source, filename, mode, flags=0, *args, **kwargs):
        # ast.parse is compile(..., PyCF_ONLY_AST): a parse tree, never a code object
        if not flags & ast.PyCF_ONLY_AST:
            forbidden()
        return real["compile"](source, filename, mode, flags, *args, **kwargs)

    loaded = set(sys.modules) - DANGEROUS

    def known_imports_only(name, *args, **kwargs):
        # the stdlib's ast.walk imports collections lazily; a formula must not import anything new
        if name not in loaded:
            forbidden()
        return real["__import__"](name, *args, **kwargs)

    builtins.eval = builtins.exec = forbidden
    builtins.__import__ = known_imports_only
    builtins.compile = parse_only
    try:
        yield
    finally:
        for fn, value in real.items():
            setattr(builtins, fn, value)


@pytest.mark.parametrize(("formula", "message"), HOSTILE)
def test_hostile_formulas_are_refused_without_running_anything(formula, message):
    with pytest.raises(ParamError) as info, nothing_may_run():
        compile_formula(formula)
    assert info.value.field == "custom.formula"
    assert message in str(info.value), str(info.value)
    assert not os.path.exists("/tmp/basin-pwned")


def test_the_guard_itself_catches_eval_and_imports():
    with pytest.raises(AssertionError, match="never eval"), nothing_may_run():
        eval("1 + 1")
    with pytest.raises(AssertionError, match="never eval"), nothing_may_run():
        __import__("os")


def test_error_points_at_the_offending_token():
    with pytest.raises(ParamError) as info:
        compile_formula("x**2 + foo(y)")
    lines = str(info.value).splitlines()
    assert lines[-2].strip() == "x**2 + foo(y)"
    assert lines[-1].index("^") - lines[-2].index("x") == len("x**2 + ")


def test_formula_dimension_rules():
    assert compile_formula("x * y")[1] == 2
    assert compile_formula("w0 + w4")[1] == 5
    assert compile_formula("w0", dim=3)[1] == 3
    assert compile_formula("w63")[1] == 64  # custom.dim's upper bound, reached by the formula
    with pytest.raises(ParamError, match=r"custom\.dim"):
        compile_formula("w0 + w4", dim=2)
    with pytest.raises(ParamError, match=r"custom\.dim"):
        compile_formula("x + y", dim=3)
    refused("custom", "custom.formula", "unknown name", formula="import_me + 1")
    with pytest.raises(ParamError, match="can be called"):
        compile_formula("(2)(y)")


# ---------------------------------------------------------------------------------------------
# Issue 60 item 4: numbers beyond float's range, on every numeric path of the CLI and a spec
# file, get the one-line range error with the value cut short; never a traceback.

BIG = "1" + "0" * 400  # 401 digits: float() overflows
HUGE = "1" + "0" * 5000  # past Python's 4300-digit limit on int <-> text conversion
CUT = "10000000000000000000... (401 digits)"
RUN = ["submit", "--target", "banana", "--sampler", "mala", "--steps", "10", "--chains", "2"]
VI = ["submit", "--kind", "vi", "--target", "tanh"]


@pytest.mark.parametrize(
    ("argv", "field", "shown"),
    [
        (["submit", "--target", "gaussian", "--sampler", "mala", "--target-param", f"dim={BIG}"],
         "target.params.dim", CUT),
        ([*RUN, "--param", f"step_size={BIG}"], "sampler.params.step_size", CUT),
        ([*RUN, "--param", f"nbeta=-{BIG}"], "sampler.params.nbeta", "-" + CUT),
        ([*RUN, "--param", "step_size=1e400"], "sampler.params.step_size", "got inf"),
        ([*RUN, "--target-param", "a=1e400"], "target.params.a", "got inf"),
        ([*RUN, "--target-param", f"a={HUGE}"], "target.params.a", "(5001 digits)"),
        ([*RUN, "--chains", BIG], "chains", CUT),
        ([*RUN, "--steps", BIG], "steps", CUT),
        ([*RUN, "--burn-in", BIG], "burn_in", CUT),
        ([*RUN, "--thin", BIG], "thin", CUT),
        ([*RUN, "--seed", BIG], "seed", CUT),
        ([*RUN, "--flush-every", BIG], "flush_every", CUT),
        ([*RUN, "--train-steps", BIG], "llc.train_steps", CUT),
        ([*RUN, "--train-batch-size", BIG], "llc.train_batch_size", CUT),
        ([*RUN, "--train-patience", BIG], "llc.train_patience", CUT),
        ([*RUN, "--train-lr", "1e400"], "llc.train_lr", "got inf"),
        ([*VI, "--vi-param", f"epochs={BIG}"], "vi.epochs", CUT),
        ([*VI, "--vi-param", f"lambda0={BIG}"], "vi.lambda0", CUT),
        (["sweep", "reprior", "--widths", f"8,{BIG}", "--submit-only"], "--widths", CUT),
        (["sweep", "reprior", "--steps", BIG, "--submit-only"], "steps", CUT),
        (["sweep", "vi", "--ns", f"500,{BIG}", "--submit-only"], "--ns", CUT),
        (["sweep", "dln", "--problems", BIG, "--samplers", "sgld", "--step-sizes", "1e-6",
          "--submit-only"], "sweep", f"{CUT} runs"),
        (["sweep", "dln", "--problems", "1", "--samplers", "sgld", "--step-sizes", "1e400",
          "--submit-only"], "sampler.params.step_size", "got inf"),
        (["wide", "kl", "--widths", "8", "--draws", BIG], "--draws", CUT),
        (["sweep", "order", "--target", "harmonic", "--samplers", "gla1", "--step-sizes", "0.1",
          "--steps", BIG, "--submit-only"], "steps", CUT),
        (["sweep", "dln", "--problems", "1", "--samplers", "sgld", "--step-sizes", "1e-6",
          "--steps", BIG, "--submit-only"], "steps", CUT),
        (["sweep", "reprior", "--steps", "-" + BIG, "--submit-only"], "steps", "-" + CUT),
    ],
)  # fmt: skip
def test_numbers_past_floats_range_get_one_short_line(tmp_path, argv, field, shown):
    from clitest import jobs

    out = jobs(tmp_path, *argv)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr[-2000:]
    assert lines[0].startswith(f"error: {field}: ") and shown in lines[0], lines[0]
    assert len(lines[0]) < 250, lines[0]  # the value cut short, not 400 digits echoed


@pytest.mark.parametrize(
    ("fields", "field", "shown"),
    [
        (f'"steps": {BIG}', "steps", CUT),
        ('"chains": 1e400', "chains", "got inf"),
        (f'"llc": {{"train_batch_size": {BIG}}}', "llc.train_batch_size", CUT),
        ('"llc": {"train_lr": 1e400}', "llc.train_lr", "got inf"),
        (f'"target": {{"name": "gaussian", "params": {{"dim": {BIG}}}}}', "target.params.dim",
         CUT),
        (f'"steps": {HUGE}', "spec", "(4300 digits)"),
    ],
    ids=["steps", "chains", "llc.train_batch_size", "llc.train_lr", "dim", "steps-5001-digits"],
)  # fmt: skip
def test_spec_file_numbers_past_floats_range_get_one_short_line(tmp_path, fields, field, shown):
    from clitest import jobs

    spec = tmp_path / "spec.json"
    spec.write_text(f'{{"target": {{"name": "banana"}}, "sampler": {{"name": "mala"}}, {fields}}}')
    out = jobs(tmp_path, "submit", str(spec))
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr[-2000:]
    assert lines[0].startswith(f"error: {field}: ") and shown in lines[0], lines[0]
    assert len(lines[0]) < 250, lines[0]


def test_an_integer_past_pythons_text_limit_is_named_without_a_traceback():
    with pytest.raises(ParamError) as info:
        landscapes.make("gaussian", dim=10**5000)
    assert "an integer of about 5001 digits" in str(info.value), str(info.value)
