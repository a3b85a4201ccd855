"""User-typed energy formulas, compiled to torch ops through a whitelist over Python's ``ast``.

Nothing is ever passed to eval/exec: the parse tree is walked, every node is checked against a
short whitelist, and each allowed node becomes a closure over torch functions. Anything else
(names, attributes, subscripts, lambdas, comprehensions, keyword arguments, strings, huge
exponents) is refused with a message that points at the offending token.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from .base import ParamError

MAX_LENGTH = 500
MAX_NODES = 400
MAX_EXPONENT = 64.0
MAX_CONSTANT = 1e12

FUNCTIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "exp": torch.exp,
    "log": torch.log,
    "sin": torch.sin,
    "cos": torch.cos,
    "tanh": torch.tanh,
    "sqrt": torch.sqrt,
    "abs": torch.abs,
    "softplus": F.softplus,
}
CONSTANTS = {"pi": math.pi}
BINARY = {
    ast.Add: torch.add,
    ast.Sub: torch.sub,
    ast.Mult: torch.mul,
    ast.Div: torch.div,
    ast.Pow: torch.pow,
}
SCALAR = {  # the same operations with a Python number on one side
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}
_INDEXED = re.compile(r"w(0|[1-9]\d*)\Z")  # w0, w12; not w01, which names no column
MAX_DIM = 64  # custom.dim's upper bound: a typed w999999999 must not allocate 10^9 columns

Compiled = Callable[[Tensor], Tensor]  # w: [C, d] -> Tensor[C] (or broadcastable)


class FormulaError(ParamError):
    def __init__(self, formula: str, message: str, col: int | None = None):
        where = ""
        if col is not None:
            where = f"\n  {formula}\n  {' ' * col}^"
        super().__init__("custom.formula", message + where)


def compile_formula(formula: str, dim: int | None = None) -> tuple[Compiled, int]:
    """Check and compile ``formula``; return (energy function, dimension).

    Variables are x, y (dimension 2) or w0..w{d-1} (dimension = highest index + 1, or ``dim``).
    """
    if not isinstance(formula, str) or not formula.strip():
        raise FormulaError(str(formula), "must be a non-empty formula such as 'x**2 + y**2'")
    if len(formula) > MAX_LENGTH:
        raise FormulaError(
            formula[:40] + "...", f"is too long ({len(formula)} > {MAX_LENGTH} chars)"
        )
    try:
        tree = ast.parse(formula.strip(), mode="eval")
    except SyntaxError as exc:
        col = (exc.offset or 1) - 1
        raise FormulaError(formula.strip(), f"is not a valid formula ({exc.msg})", col) from None
    except (RecursionError, MemoryError, ValueError):
        raise FormulaError(formula, "is nested too deeply") from None
    formula = formula.strip()
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise FormulaError(formula, f"has too many terms (more than {MAX_NODES} syntax nodes)")

    names: set[str] = set()
    body = _compile(tree.body, formula, names)
    xy, indexed = names & {"x", "y"}, {n for n in names if _INDEXED.match(n)}
    if xy and indexed:
        raise FormulaError(formula, "use either x, y or w0, w1, ..., not both")
    needed = 2 if xy else (max(int(n[1:]) for n in indexed) + 1 if indexed else 1)
    if dim is None:
        dim = needed
    elif dim < needed:
        raise ParamError("custom.dim", f"must be at least {needed} for this formula, got {dim}")
    if xy and dim != 2:
        raise ParamError("custom.dim", f"must be 2 when the formula uses x and y, got {dim}")

    def energy(w: Tensor) -> Tensor:
        env = {f"w{i}": w[:, i] for i in range(w.shape[1])}
        if w.shape[1] == 2:
            env.update(x=w[:, 0], y=w[:, 1])
        return torch.broadcast_to(body(env).to(w), w.shape[:1])

    return energy, dim


def _compile(node: ast.AST, src: str, names: set[str]) -> Callable[[dict], Tensor]:
    col = getattr(node, "col_offset", None)
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise FormulaError(src, f"only numbers are allowed, not {value!r}", col)
        if abs(value) > MAX_CONSTANT:
            raise FormulaError(src, f"number {value!r} is too large (limit {MAX_CONSTANT:g})", col)
        v = float(value)
        return lambda env: torch.tensor(v, dtype=torch.float64)
    if isinstance(node, ast.Name):
        if node.id in CONSTANTS:
            v = CONSTANTS[node.id]
            return lambda env: torch.tensor(v, dtype=torch.float64)
        if node.id in ("x", "y") or _INDEXED.match(node.id):
            if node.id[0] == "w" and int(node.id[1:]) >= MAX_DIM:
                raise FormulaError(
                    src, f"{node.id!r}: a formula has at most w0..w{MAX_DIM - 1}", col
                )
            names.add(node.id)
            key = node.id
            return lambda env: _lookup(env, key, src)
        raise FormulaError(
            src,
            f"unknown name {node.id!r}; use x, y or w0..w(d-1), pi, and "
            f"the functions {sorted(FUNCTIONS)}",
            col,
        )
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _compile(node.operand, src, names)
        sign = -1.0 if isinstance(node.op, ast.USub) else 1.0
        return lambda env: sign * inner(env)
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
        if isinstance(node.op, ast.Pow):
            _check_exponent(node.right, src)
        op = BINARY[type(node.op)]
        left, right = _compile(node.left, src, names), _compile(node.right, src, names)
        # a number beside a variable as a Python float: torch's scalar paths (w**2 as w * w,
        # 0.3 * w) take half the time of a 0-d tensor's, forward and backward
        number, other = _literal(node.right), _literal(node.left)
        scalar = SCALAR[type(node.op)]
        if number is not None and other is None:
            return lambda env: scalar(left(env), number)
        if other is not None and number is None:
            return lambda env: scalar(other, right(env))
        return lambda env: _binary(op, left(env), right(env))
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name):
            _compile(node.func, src, set())  # refuses lambdas, attributes, ... by what they are
            raise FormulaError(src, f"only the functions {sorted(FUNCTIONS)} can be called", col)
        if node.func.id not in FUNCTIONS:
            shown = node.func.id
            raise FormulaError(
                src, f"{shown!r} is not an allowed function; allowed: {sorted(FUNCTIONS)}", col
            )
        if node.keywords or len(node.args) != 1 or isinstance(node.args[0], ast.Starred):
            raise FormulaError(src, f"{node.func.id}() takes exactly one plain argument", col)
        fn, arg = FUNCTIONS[node.func.id], _compile(node.args[0], src, names)
        return lambda env: fn(arg(env))
    what = {
        ast.Attribute: "attribute access",
        ast.Lambda: "lambda",
        ast.Subscript: "indexing",
        ast.ListComp: "comprehension",
        ast.GeneratorExp: "comprehension",
        ast.SetComp: "comprehension",
        ast.DictComp: "comprehension",
    }.get(type(node))
    if isinstance(node, (ast.BinOp, ast.UnaryOp)):
        what = f"operator {type(node.op).__name__}"
    what = what or type(node).__name__
    raise FormulaError(
        src,
        f"{what} is not allowed; use numbers, x, y (or w0, w1, ...), "
        f"+ - * / ** and {sorted(FUNCTIONS)}",
        col,
    )


def _literal(node: ast.AST) -> float | None:
    """The value of a number written as is (2, -0.5, pi), else None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _literal(node.operand)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    if isinstance(node, ast.Constant) and not isinstance(node.value, bool):
        return float(node.value) if isinstance(node.value, (int, float)) else None
    if isinstance(node, ast.Name) and node.id in CONSTANTS:
        return CONSTANTS[node.id]
    return None


def _check_exponent(node: ast.AST, src: str) -> None:
    """Refuse constant exponents beyond +-MAX_EXPONENT (e.g. 9**9**9), which only overflow."""
    value = _constant_value(node)
    if value is not None and abs(value) > MAX_EXPONENT:
        raise FormulaError(
            src,
            f"exponent is too large (|p| <= {MAX_EXPONENT:g} allowed)",
            getattr(node, "col_offset", None),
        )


def _constant_value(node: ast.AST) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value) if abs(node.value) <= MAX_CONSTANT else math.inf
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _constant_value(node.operand)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        base, exp = _constant_value(node.left), _constant_value(node.right)
        if base is None or exp is None:
            return None
        if abs(exp) > MAX_EXPONENT:
            return math.inf
        try:
            return abs(base) ** exp
        except (OverflowError, ZeroDivisionError):
            return math.inf
    return None


def _lookup(env: dict, key: str, src: str) -> Tensor:
    if key not in env:
        raise FormulaError(src, f"variable {key!r} is out of range for this dimension")
    return env[key]


def _binary(op: Callable[[Tensor, Tensor], Tensor], a: Tensor, b: Tensor) -> Tensor:
    # Constants are made on the CPU in float64; move them to the variables' device and dtype.
    if a.ndim == 0 and b.ndim > 0:
        a = a.to(b)
    elif b.ndim == 0 and a.ndim > 0:
        b = b.to(a)
    return op(a, b)


# A fixed probe of a formula's values: seeded N(0, I) points and the unit axes (both signs: a
# valley along an axis, x + y**2, is rarely met by random points far out), at each scale.
PROBE_POINTS = 256
PROBE_SCALES = (1.0, 1e1, 1e2, 1e3, 1e4)


def probe(formula: str, dim: int | None = None) -> None:
    """Refuse (FormulaError on custom.formula, with the reason) a formula with nothing to
    sample, judged by its float64 values on the probe above:

    - NaN or infinite at every probe point;
    - flat: one value at every point where it is finite;
    - unbounded below: its lowest value falls at each of the three largest scales, and at
      1e4 lies below -10 x max(1, |lowest at 1e2|) (x, -x**2: exp(-U) has no normaliser).

    A heuristic: a minimum farther out than ~1e3 reads as unbounded, and a slow descent
    (-log(1 + x**2)) passes."""
    energy, dim = compile_formula(formula, dim)
    g = torch.Generator().manual_seed(0)
    axes = torch.eye(dim, dtype=torch.float64)
    base = torch.cat(
        [torch.randn(PROBE_POINTS, dim, generator=g, dtype=torch.float64), axes, -axes]
    )
    with torch.no_grad():
        values = torch.stack([energy(scale * base) for scale in PROBE_SCALES])  # [scales, points]
    finite = values.isfinite()
    formula = formula.strip()
    if not finite.any():
        raise FormulaError(formula, "is NaN or infinite at every probe point: nothing to sample")
    seen = values[finite]
    if bool((seen == seen[0]).all()):
        raise FormulaError(
            formula, f"flat: nothing to sample (it is {float(seen[0]):g} everywhere)"
        )
    lows = [
        float(row[ok].min()) if ok.any() else math.inf
        for row, ok in zip(values, finite, strict=True)
    ]
    middle, large, largest = lows[-3:]
    if largest < large < middle and largest < -10 * max(1.0, abs(middle)):
        raise FormulaError(
            formula,
            f"unbounded below: it falls to {largest:.3g} at |w| ~ 1e4 (from {middle:.3g} at "
            "|w| ~ 1e2), so exp(-U) cannot be normalised; add a term that grows, e.g. + x**2",
        )


# The normalisability check below: shells |w| = R 2^k beyond the plot (R its half-width), far
# enough out that a thin curved valley, the default formula's y = x**2, has turned upwards
# (from 3 to 384 for the plot's +-3; the default's bound only falls until ~50), and the points
# on each: a dense circle in the plane, else seeded directions and both signs of every axis.
NORM_SHELLS = 8
NORM_DIRECTIONS = 4096
NORM_BAND = 0.1  # the plot's edge band, a tenth of each side's range: 36% of its area


def normalisable(formula: str, dim: int | None = None, bounds: tuple | None = None) -> str | None:
    """Why exp(-U) of ``formula`` may not be normalisable (a warning, for before a run), or
    None where nothing says so. FormulaError where it does not compile.

    On the shell |w| = r, exp(-U) is at most exp(-m(r)), m(r) the lowest U there, so the
    shell's share of the mass per unit of log r is at most ~r^d exp(-m(r)). Where that bound
    decays, s(r) = m(r) - d log r rising, the integral converges: it is flagged unless s rises
    at the two outermost doublings of r. U that does not grow along some direction (x**2 in
    the plane, flat in y), grows no faster than d log r (log(1 + x**2 + y**2)) or falls (x*y)
    is flagged. Sampled points can miss a narrow valley, so a pass is no proof; a flag on a
    normalisable U means its mass lies beyond ~128 R. The message adds what quadrature on the
    plot's grid sees: the share of exp(-U) on ``bounds`` that lies in their edge band."""
    energy, dim = compile_formula(formula, dim)
    half = max((abs(float(v)) for pair in bounds for v in pair), default=3.0) if bounds else 3.0
    if dim == 1:
        directions = torch.tensor([[1.0], [-1.0]], dtype=torch.float64)
    elif dim == 2:
        angle = torch.arange(NORM_DIRECTIONS, dtype=torch.float64) * (2 * math.pi / NORM_DIRECTIONS)
        directions = torch.stack([angle.cos(), angle.sin()], -1)
    else:
        g = torch.Generator().manual_seed(0)
        draws = torch.randn(NORM_DIRECTIONS, dim, generator=g, dtype=torch.float64)
        axes = torch.eye(dim, dtype=torch.float64)
        directions = torch.cat([draws / draws.norm(dim=-1, keepdim=True), axes, -axes])
    radii = [half * 2**k for k in range(NORM_SHELLS)]
    lows = []
    with torch.no_grad():
        for r in radii:
            u = energy(r * directions)
            lows.append(float(torch.where(u.isnan(), math.inf, u).min()))  # NaN: no mass
    bound = [m - dim * math.log(r) for m, r in zip(lows, radii, strict=True)]
    if all(b == math.inf or b > a for a, b in zip(bound[-3:-1], bound[-2:], strict=True)):
        return None
    message = (
        f"exp(-U) may not be normalisable: the lowest U on the sphere |w| = r goes from "
        f"{lows[0]:.3g} at r = {radii[0]:g} to {lows[-1]:.3g} at r = {radii[-1]:g}, which does "
        f"not outgrow {dim} log r (the sphere's growth), so chains can drift off without bound"
    )
    if dim == 2 and bounds is not None:
        message += f"; {edge_share(energy, bounds):.0%} of exp(-U) on the plot lies in its "
        message += f"outer tenth (a flat U puts {1 - (1 - 2 * NORM_BAND) ** 2:.0%} there)"
    term = "(x**2 + y**2) / 100" if dim == 2 else "a square of every coordinate / 100"
    return f"{message}. Add a term that grows in every direction, e.g. + {term}"


def edge_share(energy: Compiled, bounds: tuple, points: int = 161) -> float:
    """The share of exp(-U) over the rectangle ``bounds`` (a ``points`` x ``points`` grid) that
    lies in its edge band (NORM_BAND of each side's range)."""
    (x0, x1), (y0, y1) = bounds
    xs = torch.linspace(x0, x1, points, dtype=torch.float64)
    ys = torch.linspace(y0, y1, points, dtype=torch.float64)
    grid = torch.stack(torch.meshgrid(xs, ys, indexing="ij"), -1).reshape(-1, 2)
    with torch.no_grad():
        u = energy(grid).reshape(points, points)
    u = torch.where(u.isnan(), math.inf, u)
    finite = u[u.isfinite()]
    if not finite.numel():
        return 0.0
    p = torch.exp(-(u - finite.min()))
    k = round(NORM_BAND * (points - 1))
    return float(1 - p[k : points - k, k : points - k].sum() / p.sum())
