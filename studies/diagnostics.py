"""What the Playground computes, headless: the density a 2-D run is drawn on, the exact tails and
moments a run is compared against, and its diagnostics table (which
``python -m jobs show ID --diagnostics`` prints), with the cells the verdict's rules call suspect
(Compare's rows use them too).

Plain functions of a run's record, its records and its target; nothing here imports Streamlit
or caches (the app caches what it calls, in ``ui.truths``).
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import torch

import landscapes
from landscapes import ParamError
from runs import verdict
from runs.budget import is_sampling
from runs.spec import SpecError
from runs.store import FINAL, RunRecord, Store
from runs.verdict import EXACT_DRAWS, EXACT_SEED, targets_exact
from samplers import diagnostics

POTENTIALS = [name for name, spec in landscapes.REGISTRY.items() if spec.kind == "potential"]
# the records a run's views read (``divergent``: NUTS's, where it has them)
NAMES = ["step", "position", "loss", "accepted", "diverged", "divergent"]
GRID = 161  # grid points per axis of the density contours
# Draws behind histograms, tails and KS: an even subsample beyond this (the statistics' Monte
# Carlo error at 10^5 draws is below what the figures show; a 4096-chain run has 10^7).
MAX_STAT = 100_000
# Draws a potential page's run keeps by default (thin chosen to fit): ~0.35 GB in the store for
# a 2-D target, and what a live view can fetch as it streams. Every step of 4096 chains would
# be 200 MB/s to write and to read back, which no page needs to draw a histogram or a trace.
AUTO_DRAWS = 20_000_000
KS_COLUMN = "KS bound (α = 0.001)"


# -- targets and their truths ------------------------------------------------------------------


def params_json(spec: dict) -> str:
    """A run's target parameters as the key the app caches targets under."""
    return json.dumps(spec["target"]["params"], sort_keys=True)


def target_of(name: str, params: str) -> landscapes.Target | ParamError:
    """The target on the CPU in float64, for closed-form evaluations only (or its error)."""
    try:
        return landscapes.make(name, device="cpu", dtype="float64", **json.loads(params))
    except ParamError as exc:
        return exc


def model_stand_in(store: Store, record: RunRecord) -> SimpleNamespace:
    """What the table needs of a ``model`` run's target once its factory file is gone: d (the
    summary's; else the projection basis's rows, or the recorded positions' width) and
    coordinates named w0, w1, ..., with no truths."""
    dim = (record.summary or {}).get("dim")
    if dim is None:
        basis = store.get_array(record.id, "projection")
        position = store.read(record.id, names=["position"]).get("position")
        dim = basis.shape[0] if basis is not None else 0 if position is None else position.shape[-1]
    dim = int(dim)
    return SimpleNamespace(
        name="model",
        dim=dim,
        layout={"w": (dim,)},
        bounds=None,
        exact_sample=None,
        marginals={},
        mean=None,
        cov=None,
    )


def exact_draws(target: landscapes.Target) -> np.ndarray | None:
    """EXACT_DRAWS draws of the target's exact sampler (fixed seed), or None without one."""
    if target.exact_sample is None:
        return None
    return target.exact_sample(torch.Generator().manual_seed(EXACT_SEED), EXACT_DRAWS).numpy()


def labels_of(target: landscapes.Target) -> list[str]:
    """One name per coordinate: x, y for a typed formula, else from the target's layout."""
    if target.name == "custom":
        return ["x", "y"][: target.dim] if target.dim <= 2 else [f"w{i}" for i in range(target.dim)]
    out = []
    for key, shape in target.layout.items():
        size = math.prod(shape)
        out += [key] if size == 1 else [f"{key}{i}" for i in range(size)]
    return out


def is_playground_run(spec: dict) -> bool:
    """A run the Playground draws: a sampler on a 2-D potential without observables."""
    target = spec["target"]
    return (
        is_sampling(spec)
        and target["name"] in POTENTIALS
        and not spec.get("observables")
        and target["params"].get("dim", 2) == 2
        and len(target["params"].get("k", (0, 0))) == 2
    )


def density_grid(target: landscapes.Target, nbeta: float, temperature: float, bounds=None) -> dict:
    """-U = -(nbeta L + prior) / T on a GRID x GRID grid over ``bounds`` (default: the
    target's)."""
    (x0, x1), (y0, y1) = target.bounds if bounds is None else bounds
    xs, ys = np.linspace(x0, x1, GRID), np.linspace(y0, y1, GRID)
    yy, xx = np.meshgrid(ys, xs, indexing="ij")
    w = torch.from_numpy(np.stack([xx.ravel(), yy.ravel()], -1))
    with torch.no_grad():
        # A custom formula may be constant in w: broadcast to one value per grid point.
        energy = torch.broadcast_to(nbeta * target.loss(w) + target.prior_energy(w), (len(w),))
    return {"xs": xs, "ys": ys, "log_density": (-energy / temperature).reshape(GRID, GRID).numpy()}


def exact_tail(target: landscapes.Target, exact: np.ndarray | None, i: int, t: float):
    """P(w_i < t) by quadrature of the closed-form marginal, else from exact draws."""
    if i in target.marginals:
        import scipy.integrate  # lazily: it costs ~1 s to import

        def pdf(x: float) -> float:
            return math.exp(float(target.marginals[i](torch.tensor([x], dtype=torch.float64))))

        return scipy.integrate.quad(pdf, -np.inf, t)[0]
    return None if exact is None else float(np.mean(exact[:, i] < t))


def exact_moments(target: landscapes.Target, exact: np.ndarray | None, i: int) -> tuple:
    """Mean and sd of coordinate i: the target's closed forms, else from exact draws."""
    if target.mean is not None and target.cov is not None:
        return float(target.mean[i]), math.sqrt(float(target.cov[i, i]))
    if exact is not None:
        return float(exact[:, i].mean()), float(exact[:, i].std(ddof=1))
    return None, None


def default_tails(target: landscapes.Target) -> list[float]:
    """The Playground's tail thresholds t: a third of the way across each plotted axis."""
    if target.dim != 2 or target.bounds is None:
        return []
    return [round(lo + (hi - lo) / 3, 2) for lo, hi in target.bounds]


# -- a run's draws and its diagnostics -------------------------------------------------------


def burn_records(spec: dict) -> int:
    """Records that fall in the burn-in (the store keeps every thin-th step)."""
    return math.ceil(spec["burn_in"] / spec["thin"])


def even_sample(
    position: np.ndarray, diverged: np.ndarray, burn: int, limit: int = MAX_STAT
) -> tuple[np.ndarray, int, int]:
    """(sample [records, chains, d], every, total): one record in ``every`` after the burn-in,
    of the chains that never diverged, at most ``limit`` draws, out of ``total`` such draws.

    Only the kept records are copied, so a view of a long run costs the same at its millionth
    draw as at its first."""
    good = ~diverged[-1]
    total = max(0, len(position) - burn) * int(good.sum())
    every = max(1, -(-total // limit))
    return position[burn::every][:, good], every, total


def ks_bound(ess: float | None, drawn: int, exact: int) -> float | None:
    """The KS distance bound (alpha = 0.001) for ``drawn`` of a run's draws, an even subsample,
    against ``exact`` exact draws; None without a usable ESS. The run's ESS counts all of its
    draws, and a subsample of them holds at most as many effective draws as it has draws: a
    long, well-mixed run's ESS passed as is made the bound too tight for the sample tested."""
    if ess is None or not np.isfinite(ess) or ess <= 0 or drawn < 1:
        return None
    return diagnostics.ks_bound(min(ess, drawn), exact)


def auto_thin(chains: int, steps: int) -> int:
    """The smallest thin that keeps at most AUTO_DRAWS draws."""
    return max(1, -(-chains * steps // AUTO_DRAWS))


def final_coordinates(record: RunRecord) -> dict:
    """ESS bulk and R-hat per coordinate from a finished run's summary, else {}."""
    return ((record.summary or {}).get("coordinates") or {}) if record.status in FINAL else {}


def tail_ess(store: Store, run_id: str, burn: int) -> list[float] | None:
    """ESS of the 5% and 95% quantiles per coordinate of a finished run (not in its summary)."""
    data = store.read(run_id, names=["position", "diverged"])
    if "position" not in data or data["position"].shape[0] - burn < 4:
        return None
    draws = np.moveaxis(data["position"][burn:, ~data["diverged"][-1]], 0, 1)
    if not draws.shape[0]:
        return None
    k = diagnostics.diagnosed_chains(*draws.shape[:2])  # the chains the summary's ESS used
    return np.atleast_1d(diagnostics.ess_tail(draws[:k].astype(float))).tolist()


def metrics(record: RunRecord, data: dict, every: int, total: int) -> dict:
    """The numbers above the Playground's table: acceptance (the summary's, else live, on the
    records the table uses), diverged chains, draws after burn-in, seconds."""
    summary = record.summary or {}
    good = ~data["diverged"][-1]
    acceptance, accepted = summary.get("acceptance"), data.get("accepted")
    if acceptance is None and accepted is not None and total:  # live, until the summary
        acceptance = float(accepted[burn_records(record.spec) :: every][:, good].mean())
    return {
        "acceptance": acceptance,
        "mh": accepted is not None,
        "diverged chains": int((~good).sum()),
        "draws after burn-in": total,
        "seconds": summary.get("seconds"),
    }


def diagnostics_rows(
    record: RunRecord,
    target: landscapes.Target,
    exact: np.ndarray | None,
    sample: np.ndarray,
    tails: list,
    tail: list[float] | None = None,
) -> list[dict]:
    """The Playground's diagnostics table, a row per coordinate: moments, the tail P(w_i < t),
    KS against the exact draws with its bound, ESS and R-hat. ``sample`` [draws, d] is the even
    subsample, ``exact`` the exact draws (None where the run samples another density), ``tail``
    the tail ESS (``tail_ess``); ESS bulk and R-hat are the summary's, once the run ended."""
    truths = targets_exact(record.spec["sampler"]["params"])
    coords = final_coordinates(record)
    rows = []
    for i, label in enumerate(labels_of(target)):
        x, t = sample[..., i].ravel(), tails[i] if i < len(tails) else None
        ks = ks_limit = None
        if exact is not None and x.size:
            ks = float(diagnostics.ks_distance(x, exact[:, i])[0])
            ks_limit = ks_bound(coords["ess_bulk"][i] if coords else None, x.size, len(exact))
        exact_p = exact_tail(target, exact, i, t) if truths and t is not None else None
        mean, sd = exact_moments(target, exact, i) if truths else (None, None)
        rows.append(
            {
                "coordinate": label,
                "mean": float(x.mean()) if x.size else None,
                "exact mean": mean,
                "sd": float(x.std(ddof=1)) if x.size > 1 else None,
                "exact sd": sd,
                "t": t,
                "P(< t)": float(np.mean(x < t)) if x.size and t is not None else None,
                "exact P(< t)": exact_p,
                "KS distance": ks,
                KS_COLUMN: ks_limit,
                "ESS bulk": coords["ess_bulk"][i] if coords else None,
                "ESS tail": tail[i] if coords and tail else None,
                "R-hat": coords["rhat"][i] if coords else None,
            }
        )
    return rows


def diagnostics_table(store: Store, run_id: str, tails: list | None = None) -> dict:
    """What the Playground shows of run ``run_id`` under its figures: {"metrics", "rows"}, from
    the store (``tails``: the thresholds t, default ``default_tails``). A SpecError naming the
    run where it has no positions of its target's coordinates to diagnose."""
    record = store.get(run_id)
    spec = record.spec
    target = target_of(spec["target"]["name"], params_json(spec))
    if isinstance(target, ParamError) and spec["target"]["name"] == "model":
        target = model_stand_in(store, record)  # its factory is gone: its records still read
    if isinstance(target, ParamError):
        raise SpecError("id", f"run {run_id}: {target}")
    data = store.read(run_id, names=NAMES)
    position = data.get("position")
    if position is None or not len(position) or position.shape[-1] != target.dim:
        what = "no records yet" if position is None or not len(position) else "projected positions"
        raise SpecError("id", f"run {run_id} has {what} to diagnose (status {record.status})")
    burn = burn_records(spec)
    draws, every, total = even_sample(position, data["diverged"], burn)
    exact = exact_draws(target) if targets_exact(spec["sampler"]["params"]) else None
    tail = tail_ess(store, run_id, burn) if final_coordinates(record) else None
    sample = draws.reshape(-1, target.dim)
    rows = diagnostics_rows(
        record, target, exact, sample, default_tails(target) if tails is None else tails, tail
    )
    return {"metrics": metrics(record, data, every, total), "rows": rows}


def divergent_draws(data: dict, burn: int, most: int = 2000) -> np.ndarray | None:
    """[m, d] the draws after ``burn`` records whose step had a divergent transition (NUTS's
    ``divergent`` records; None where the run has none), at most ``most`` of them."""
    flags = data.get("divergent")
    if flags is None or "position" not in data:
        return None
    hit = np.nan_to_num(flags[burn:]) > 0.5
    draws = data["position"][burn:][hit]
    return draws[:: max(1, len(draws) // most)]


def adapted_line(summary: dict | None) -> str | None:
    """What a step_size auto run's warm-up settled on (samplers.warmup), in one line, or None."""
    adapted = (summary or {}).get("adapted")
    if not adapted:
        return None
    stopped = "" if adapted.get("finished", True) else " (stopped inside the warm-up)"
    if "L" in adapted:  # MCLMC's tuner (samplers.mclmc_tune)
        return (
            f"Tuner ({adapted['warmup']} steps, aiming at Var[E]/d "
            f"{adapted['desired_energy_var']:g}){stopped}: step {adapted['step_size']:.3g}, "
            f"L {adapted['L']:.3g}; both fixed after it."
        )
    inv_mass, coupled = adapted["inverse_mass"], ""
    if inv_mass and isinstance(inv_mass[0], list):  # dense: its diagonal and its correlations
        matrix = np.asarray(inv_mass, dtype=float)
        sd = np.sqrt(np.diag(matrix))
        inv_mass = list(np.diag(matrix))
        rho = np.abs(matrix / np.outer(sd, sd) - np.eye(len(sd)))
        coupled = f", correlations up to {rho.max():.2f}"
    if len(inv_mass) <= 4:
        metric = ", ".join(f"{v:.3g}" for v in inv_mass)
    else:
        metric = f"{min(inv_mass):.3g} to {max(inv_mass):.3g} over {len(inv_mass)} coordinates"
    step = f"step {adapted['step_size']:.3g}"
    if "step_range" in adapted:  # adapt: chain, each chain its own
        lo, hi = adapted["step_range"]
        step = f"each chain its own: step {adapted['step_size']:.3g} (median; {lo:.3g} to {hi:.3g})"
        metric = f"{metric} (the chains' mean)"
    return (
        f"Warm-up ({adapted['warmup']} steps, aiming at acceptance {adapted['target_accept']:g})"
        f"{stopped}: {step}, inverse metric ({adapted['metric']}) "
        f"{metric}{coupled}; both fixed after it."
    )


def diagnostics_text(table: dict) -> str:
    """``diagnostics_table`` as ``python -m jobs show ID --diagnostics`` prints it: the
    Playground's numbers above its table, then the table."""
    facts = table["metrics"]
    acceptance = _cell(facts["acceptance"]) if facts["mh"] else "no MH step"
    head = (
        f"acceptance {acceptance}  diverged chains {facts['diverged chains']}  "
        f"draws after burn-in {facts['draws after burn-in']:,}  seconds {_cell(facts['seconds'])}"
    )
    return f"{head}\n{table_text(table['rows'])}"


def table_text(rows: list[dict]) -> str:
    """Rows as an aligned plain-text table (4 significant digits, '-' for none)."""
    if not rows:
        return ""
    shown = [[_cell(v) for v in row.values()] for row in rows]
    heads = list(rows[0])
    widths = [max(len(h), *(len(r[j]) for r in shown)) for j, h in enumerate(heads)]
    lines = [heads, *shown]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in lines)


def _cell(value) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def cell_flags(row: dict, sampler: str | None = None) -> dict[str, str]:
    """The cells of a diagnostics or comparison row that the verdict's rules call suspect:
    column -> "warn" | "fail" (and the verdict cell itself, "good" included)."""
    flags = {}
    for column, value in row.items():
        if value is None or (isinstance(value, str) and column != "verdict"):
            continue
        if column == "verdict":
            flags[column] = value
        elif column.startswith("R-hat") and value > verdict.RHAT_WARN:
            flags[column] = "fail" if value > verdict.RHAT_FAIL else "warn"
        elif column.startswith("ESS bulk") and value < verdict.MIN_ESS:
            flags[column] = "warn"
        elif column == "KS distance" and row.get(KS_COLUMN) is not None:
            if value > row[KS_COLUMN]:
                flags[column] = "fail"
        elif column == "diverged chains" and value:
            flags[column] = "fail"
        elif column == "acceptance" and sampler in verdict.ACCEPTANCE:
            lo, hi = verdict.ACCEPTANCE[sampler]
            if not lo <= value <= hi:
                flags[column] = "fail" if value < lo / 3 else "warn"
    return flags
