"""Tables of runs: plain rows from stored runs, summaries side by side, traces as long-format CSV.

Pure functions of dicts and arrays (a run is the mapping ``vars(RunRecord)`` gives); no
Streamlit, no torch, nothing from jobs.
"""

from __future__ import annotations

import io
import math
import time
from collections.abc import Callable, Iterable, Mapping

import numpy as np
import pandas as pd

RUN_COLUMNS = ("id", "target", "sampler", "chains", "steps", "status", "progress (%)", "created")
# rows compared only when some run has the number
OPTIONAL_FACTS = ("LLC mean", "Psi (VI)", "log Z (nested)", "exact log Z")
POSITION_COLUMNS_MAX = 64  # positions go into the CSV only up to this many coordinates


def columns(
    rows: Iterable[Mapping], spec: Mapping[str, str | Callable[[Mapping], object]]
) -> dict[str, list]:
    """A table by columns, as st.dataframe takes it: under each header of ``spec``, every row's
    field of that name, or what the header's function makes of the row."""
    rows = list(rows)
    return {head: [f(r) if callable(f) else r[f] for r in rows] for head, f in spec.items()}


def method(spec: Mapping) -> str:
    """How a run explores its target: the sampler's name, or "vi (nf_gamma)" for a fit."""
    if spec.get("kind") == "vi":
        source = (spec.get("vi") or {}).get("source", "gamma")
        return f"vi (nf_{source})"
    if spec.get("kind") == "nested":
        return "nested"
    return str((spec.get("sampler") or {}).get("name", "?"))


def target(spec: Mapping) -> str:
    """What a run samples, in a word or three: the target's name, and for a user's model its
    factory and checkpoint files ("model · digits_mlp:make @ step-00100.pt")."""
    part = spec.get("target") or {}
    name, params = str(part.get("name", "?")), part.get("params") or {}
    if name != "model" or not params.get("factory"):
        return name
    where, _, function = str(params["factory"]).rpartition(":")
    label = f"{name} · {where.rpartition('/')[2].removesuffix('.py')}:{function}"
    checkpoint = params.get("checkpoint")
    return (
        f"{label} @ {str(checkpoint).replace(chr(92), '/').rpartition('/')[2]}"
        if checkpoint
        else label
    )


def run_row(run: Mapping) -> dict:
    """One run as a table row: what it samples, how far it got, when it was created (local)."""
    spec, progress = run.get("spec") or {}, run.get("progress") or {}
    total, done = progress.get("steps_total") or 0, progress.get("steps_done") or 0
    if run.get("status") == "completed":
        percent = 100.0
    elif progress.get("phase") == "train" or not total:
        percent = 0.0  # an LLC run training to w0 has not sampled yet
    else:
        percent = min(100.0, 100.0 * done / total)
    created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.get("created") or 0))
    other = spec.get("kind") in ("vi", "nested")  # no chains; its own count of steps
    return {
        "id": run.get("id"),
        "target": target(spec),
        "sampler": method(spec),
        "chains": None if other else spec.get("chains"),
        "steps": total if other else spec.get("steps"),  # a fit's epochs, nested's iterations
        "status": run.get("status"),
        "progress (%)": round(percent, 1),
        "created": created,
    }


def run_rows(runs: Iterable[Mapping]) -> list[dict]:
    return [run_row(run) for run in runs]


def summary_facts(summary: Mapping | None) -> dict[str, float | None]:
    """The numbers worth comparing across runs; None where a run has no such number (no
    acceptance for SGLD, no ESS for projected positions, no LLC without the observable)."""
    s = summary or {}
    coords = s.get("coordinates") or {}
    llc = (s.get("observables") or {}).get("llc") or {}
    nested = s.get("kind") == "nested"
    return {
        "acceptance": _number(s.get("acceptance")),
        "ESS bulk (min over coordinates)": _extreme(coords.get("ess_bulk"), min),
        "R-hat (max over coordinates)": _extreme(coords.get("rhat"), max),
        "seconds": _number(s.get("seconds")),
        "diverged chains": _number(s.get("diverged_chains")),
        "LLC mean": _number(llc.get("mean")),
        "Psi (VI)": _number(s.get("objective")) if s.get("kind") == "vi" else None,
        "log Z (nested)": _number(s.get("log_z")) if nested else None,
        "exact log Z": _number(s.get("exact_log_z")) if nested else None,
    }


def evidence(summary: Mapping | None) -> str | None:
    """A nested run's evidence as a cell, "1.970 ± 0.093 (exact 1.660)"; None for any other
    run (an MCMC run estimates no normaliser)."""
    s = summary or {}
    if s.get("kind") != "nested" or _number(s.get("log_z")) is None:
        return None
    text = f"{s['log_z']:.3f} ± {_number(s.get('log_z_error')) or math.nan:.3f}"
    exact = _number(s.get("exact_log_z"))
    return text + (f" (exact {exact:.3f})" if exact is not None else " (no exact)")


def compare_rows(summaries: Mapping[str, Mapping | None]) -> list[dict]:
    """One row per quantity, one column per run id; the LLC row only when some run has one."""
    facts = {run_id: summary_facts(s) for run_id, s in summaries.items()}
    names = list(summary_facts(None))
    rows = []
    for name in names:
        values = {run_id: f[name] for run_id, f in facts.items()}
        if name in OPTIONAL_FACTS and all(v is None for v in values.values()):
            continue
        rows.append({"quantity": name, **values})
    return rows


def trace_rows(data: Mapping[str, np.ndarray]) -> int:
    """Rows the long-format CSV of ``data`` will have: one per recorded draw and chain."""
    loss = data.get("loss")
    return 0 if loss is None else int(np.asarray(loss).size)


def traces_csv(data: Mapping[str, np.ndarray], positions: bool = True) -> bytes:
    """Long-format CSV of a run's records (step-major: [draws, chains] arrays): one row per draw
    and chain with step, chain, loss and every other per-chain scalar (booleans as 0/1), then
    ``position_0`` ... when ``positions`` and the positions have at most 64 coordinates."""
    if "loss" not in data:
        raise ValueError("the records have no 'loss' yet: nothing to export")
    loss = np.asarray(data["loss"])
    draws, chains = loss.shape
    step = np.asarray(data.get("step", np.arange(draws)))
    columns: dict[str, np.ndarray] = {
        "step": np.repeat(step, chains),
        "chain": np.tile(np.arange(chains), draws),
        "loss": loss.ravel(),
    }
    for name in sorted(data):
        value = np.asarray(data[name])
        if name in ("step", "loss", "position") or value.shape != loss.shape:
            continue
        columns[name] = value.ravel().astype(np.int8) if value.dtype == bool else value.ravel()
    position = data.get("position")
    if positions and position is not None and np.shape(position)[-1] <= POSITION_COLUMNS_MAX:
        flat = np.asarray(position).reshape(draws * chains, -1)
        columns.update({f"position_{i}": flat[:, i] for i in range(flat.shape[1])})
    buffer = io.StringIO()
    pd.DataFrame(columns).to_csv(buffer, index=False)
    return buffer.getvalue().encode()


SUSPECT = "background-color: rgba(214, 39, 40, 0.28)"  # reads on light and dark themes
TINTS = {
    "fail": SUSPECT,
    "warn": "background-color: rgba(255, 165, 0, 0.30)",
    "good": "background-color: rgba(44, 160, 44, 0.22)",
}


def highlighted(rows: list[dict], flags: list, digits: int = 3):
    """``rows`` as a pandas Styler for st.dataframe: numbers to ``digits`` significant figures
    in plain notation where it is short (0.0361, not 3.61e-2), and the cells named in ``flags``
    tinted: per row, a set of columns (red) or a mapping column -> "fail" | "warn" | "good"."""
    frame = pd.DataFrame(rows)

    def level(i: int, name: str) -> str:
        flag = flags[i]
        if isinstance(flag, Mapping):
            return TINTS.get(flag.get(name), "")
        return SUSPECT if name in flag else ""

    def tint(column: pd.Series) -> list[str]:
        return [level(i, column.name) for i in range(len(column))]

    numeric = [c for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c])]
    formats = {
        c: (lambda v: rounded(v, 0)) if c.startswith("ESS") else (lambda v: rounded(v, digits))
        for c in numeric
    }
    return frame.style.apply(tint).format(formats, na_rep="–")


def rounded(value, digits: int = 3) -> str:
    """A table number at its precision: counts, ESS (``digits`` 0) and numbers of more than
    ``digits`` integer digits as integers (1,234, not 1.23e+03), others to ``digits``
    significant figures."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if digits == 0:
        return f"{round(value):,}"
    if (float(value).is_integer() and abs(value) >= 1) or abs(value) >= 10**digits:
        return f"{round(value):,}"
    return f"{value:.{digits}g}"


def number(value, digits: int = 4) -> str:
    """A number for a metric tile, which cuts what does not fit with an ellipsis: ``digits``
    significant figures, in short scientific notation where the plain form runs long
    (0.0002694 -> 2.694e-4, 12345678 -> 1.235e7); "–" when missing or not finite."""
    value = _number(value)
    if value is None:
        return "–"
    text = f"{value:.{digits}g}"
    if "e" in text or len(text.lstrip("-")) > digits + 2:  # longer than digits, "." and a 0
        mantissa, exponent = f"{value:.{digits - 1}e}".split("e")
        text = f"{float(mantissa):g}e{int(exponent)}"
    return text


def _number(value) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _extreme(values, pick) -> float | None:
    finite = [float(v) for v in values or () if v is not None and math.isfinite(float(v))]
    return pick(finite) if finite else None
