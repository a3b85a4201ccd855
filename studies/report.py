"""What the pages compute, headless: the density a 2-D run is drawn on, the exact tails and
moments a run is compared against, the Playground's diagnostics table (which
``python -m jobs show ID --diagnostics`` prints), the Compare page's row per sampler with its
cells' flags, and the Networks page's LLC tables.

Plain functions of a run's record, its records and its target; nothing here imports Streamlit
or caches (the app caches what it calls, in ``ui.truths``).
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable

import numpy as np
import torch

import landscapes
import samplers
from landscapes import ParamError
from runs import verdict
from runs.budget import is_sampling
from runs.spec import SpecError
from runs.store import FINAL, RunRecord, Store
from runs.verdict import EXACT_DRAWS, EXACT_SEED, targets_exact
from samplers import diagnostics
from samplers import llc as llc_math
from studies import sweep as sweeps

POTENTIALS = [name for name, spec in landscapes.REGISTRY.items() if spec.kind == "potential"]
NAMES = ["step", "position", "loss", "accepted", "diverged"]  # the records a run's views read
GRID = 161  # grid points per axis of the density contours
# Draws behind histograms, tails and KS: an even subsample beyond this (the statistics' Monte
# Carlo error at 10^5 draws is below what the figures show; a 4096-chain run has 10^7).
MAX_STAT = 100_000
# Draws a potential page's run keeps by default (thin chosen to fit): ~0.35 GB in the store for
# a 2-D target, and what a live view can fetch as it streams. Every step of 4096 chains would
# be 200 MB/s to write and to read back, which no page needs to draw a histogram or a trace.
AUTO_DRAWS = 20_000_000
GROUP_SECONDS = 5.0  # runs of one Run click (Compare) are created within this of each other
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


def compare_row(record: RunRecord, data: dict, sample, exact, coord: int, label: str, tail) -> dict:
    """The Compare page's row of one sampler on coordinate ``coord``: its summary's acceptance,
    ESS and R-hat, the tail ESS ``tail``, KS of ``sample`` against the exact draws."""
    summary, coords = record.summary or {}, final_coordinates(record)
    ks = None
    if exact is not None and sample is not None and sample.size:
        ks = float(diagnostics.ks_distance(sample[..., coord].ravel(), exact[:, coord])[0])
    diverged = data.get("diverged")
    return {
        "sampler": sampler_label(record.spec),
        "status": record.status,
        "step size": record.spec["sampler"]["params"].get("step_size"),
        "acceptance": summary.get("acceptance"),
        f"ESS bulk ({label})": coords["ess_bulk"][coord] if coords else None,
        f"ESS tail ({label})": tail[coord] if coords and tail else None,
        f"R-hat ({label})": coords["rhat"][coord] if coords else None,
        f"KS to exact ({label})": ks,
        "diverged chains": summary.get(
            "diverged_chains", int(diverged[-1].sum()) if diverged is not None else 0
        ),
        "seconds": summary.get("seconds"),
        "verdict": (summary.get("verdict") or {}).get("status"),
    }


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


def budget_key(spec: dict) -> str:
    """What must agree for two runs to be compared: the target and the budget."""
    keep = ("target", "chains", "steps", "burn_in", "thin", "seed", "dtype")
    return json.dumps({k: spec.get(k) for k in keep}, sort_keys=True)


# Samplers whose chains are one coupled ensemble that Compare sizes on its own ("walkers"), with
# its default size: EQN's B_i is the covariance of the other walkers, so its walker count is a
# hyperparameter of the sampler, not the comparison's budget (TATi's runs use 8 to 16).
WALKERS = {"eqn": 8}


def same_budget(a: dict, b: dict) -> bool:
    """Whether runs of specs ``a`` and ``b`` can be compared (``budget_key``), the chains of an
    ensemble sized on its own (``WALKERS``) aside."""
    if {a.get("sampler", {}).get("name"), b.get("sampler", {}).get("name")} & set(WALKERS):
        a, b = {**a, "chains": None}, {**b, "chains": None}
    return budget_key(a) == budget_key(b)


# Samplers whose runs are told apart by one parameter besides the name: Compare offers each
# value as its own entry ("sgrld · monge") and labels runs with it.
VARIANTS = {"sgrld": "metric"}


def sampler_label(spec: dict) -> str:
    """A run's sampler as the pages name it: "sgrld · monge" where the sampler has a variant
    parameter (``VARIANTS``), else its name."""
    name = spec["sampler"]["name"]
    value = spec["sampler"].get("params", {}).get(VARIANTS.get(name, ""))
    return f"{name} · {value}" if value is not None else name


def sampler_entries() -> dict[str, tuple[str, dict]]:
    """Compare's sampler choices, label -> (sampler, fixed parameters): every sampler of the
    registry, a sampler with a variant parameter once per value ("sgrld · monge")."""
    entries: dict[str, tuple[str, dict]] = {}
    for name, spec in samplers.REGISTRY.items():
        variant = VARIANTS.get(name)
        for fixed in [{variant: v} for v in spec.param(variant).choices] if variant else [{}]:
            entries[sampler_label({"sampler": {"name": name, "params": fixed}})] = (name, fixed)
    return entries


def run_labels(records) -> dict[str, str]:
    """Run id -> ``sampler_label``, unique within ``records``: a label two runs share gets
    each run's id appended (two clicks of Run all within GROUP_SECONDS make one group)."""
    labels = {r.id: sampler_label(r.spec) for r in records}
    counts = {label: list(labels.values()).count(label) for label in labels.values()}
    return {i: f"{label} ({i})" if counts[label] > 1 else label for i, label in labels.items()}


def comparisons(runs: list) -> list[list]:
    """Runs created together (one Run click) on one potential and budget, without observables,
    of at least two samplers (``sampler_label``), newest group first."""

    def keep(spec: dict) -> bool:
        return (
            is_sampling(spec)
            and spec["target"]["name"] in POTENTIALS
            and not spec.get("observables")
        )

    groups = run_groups(runs, keep)
    return [g for g in groups if len({sampler_label(r.spec) for r in g}) >= 2]


def run_groups(runs: list, keep: Callable[[dict], bool]) -> list[list]:
    """Runs whose spec ``keep`` accepts, created together (one Run click: within
    GROUP_SECONDS of the previous one) on one target and budget, newest group first."""
    groups: list[list] = []
    for run in sorted(runs, key=lambda r: r.created):
        if not keep(run.spec):
            continue
        last = groups[-1][-1] if groups else None
        if (
            last is not None
            and all(same_budget(r.spec, run.spec) for r in groups[-1])
            and run.created - last.created < GROUP_SECONDS
        ):
            groups[-1].append(run)
        else:
            groups.append([run])
    return list(reversed(groups))


# Compare's IAT per direction: the widest directions, of the last records of the first chains
# (a live view recomputes it every poll), on targets of up to IAT_MAX_DIM coordinates.
IAT_DIRECTIONS = 10
IAT_RECORDS = 2000
IAT_CHAINS = 32
IAT_MAX_DIM = 200
PCA_DRAWS = 20_000  # draws per run behind the PCA's covariance (an even subsample)


def iat_by_direction(target, runs: dict, burn: int, exact: bool, k: int = IAT_DIRECTIONS) -> dict:
    """Compare's "IAT per direction": how many steps each run takes to forget where it was,
    along each of the target's k widest directions (reference 003 section 3, Fig. 10).

    ``runs``: label -> (position [records, C, d], diverged [records, C], thin), as the store
    records them. The directions are the eigenvectors of the target's covariance where it
    knows it and every run samples the target itself (``exact``), else the PCA of the runs'
    own draws after burn-in: the eigenvectors of their sample covariances (chains pooled, at
    most PCA_DRAWS draws a run, finite ones only) averaged with their draws as weights, one set
    that every run is read along; the coordinate axes, of variance NaN, where no run has a
    finite one. Largest variance first: the slow directions of exp(-U) are the wide ones. Per
    run: the last IAT_RECORDS records after burn-in of its first IAT_CHAINS chains that never
    diverged, ``diagnostics.iat_per_direction`` (the mean over chains of each chain's IAT)
    times thin, so in steps. Returns {"variance": [k], "directions": [d, k], "source",
    "iat": label -> [k] or None (fewer than 4 such records)}."""
    kept = {}
    for label, (position, diverged, thin) in runs.items():
        good = ~np.asarray(diverged[-1], bool) if len(diverged) else np.ones(0, bool)
        x = np.asarray(position[burn:], dtype=float)[:, good]
        kept[label] = (np.moveaxis(x, 0, 1), thin)  # [C, records, d]
    cov = None if target.cov is None else target.cov.detach().cpu().numpy().astype(float)
    source = "the target's covariance"
    if not exact or cov is None:
        covs = []
        for x, _ in kept.values():
            pooled = x.reshape(-1, x.shape[-1])
            pooled = pooled[:: max(1, -(-len(pooled) // PCA_DRAWS))]
            if len(pooled) > 1:
                with np.errstate(all="ignore"):
                    c = np.cov(pooled, rowvar=False).reshape(x.shape[-1], x.shape[-1])
                if np.isfinite(c).all():
                    covs.append((c, len(pooled)))
        if covs:
            cov = np.average([c for c, _ in covs], axis=0, weights=[n for _, n in covs])
        else:
            cov = np.eye(target.dim)
        source = "the runs' own draws (PCA)" if covs else "the coordinate axes (no draws yet)"
    variance, vectors = np.linalg.eigh(cov)
    order = np.argsort(variance)[::-1][:k]
    variance, vectors = variance[order], vectors[:, order]
    if source.startswith("the coordinate axes"):
        variance = np.full(len(order), np.nan)
    iats = {}
    for label, (x, thin) in kept.items():
        x = x[:IAT_CHAINS, -IAT_RECORDS:]
        if x.shape[0] == 0 or x.shape[1] < 4:
            iats[label] = None
            continue
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a blown-up chain: its IAT is NaN
            iats[label] = diagnostics.iat_per_direction(x, vectors) * thin
    return {"variance": variance, "directions": vectors, "source": source, "iat": iats}


# -- networks and the LLC ----------------------------------------------------------------------


# The registry's step size (1e-3) suits potentials; with nbeta = n / log n a network needs a
# far smaller one. Localization 1 is the RunSpec's LLC default, passed explicitly here since
# the widget always sends a value.
SAMPLER_DEFAULTS = {"step_size": 1e-5, "localization": 1.0}
# Where a network's true LLC is known, the step size at which SGLD's estimate lands near it in
# the Networks page's default run (4 chains x 2,000 steps, seeds 0 and 1: dln 11.9/12.6 of 12
# from its truth, rrr 8.05/7.84 of 8, polynomial 0.24/0.21 of 0.25, tanh 0.95/0.86 of 1). At
# 1e-5 every DLN chain diverges (reference 000: stable up to 1e-6) and the polynomial's and
# tanh's barely move (0.04 of 0.25, 0.36 of 1). SGHMC and SGNHT land near the truth at the same
# steps, except SGHMC on the polynomial, where 1 and 2 of the 4 chains diverged (seeds 0, 1; the
# page says so).
# model: a start for a user's network (the digits MLP's checkpoints read a flat, finite curve at
# 1e-5, examples/train_digits.py); the Calibrate tab checks it for any other model
STEP_SIZES = {"dln": 1e-7, "rrr": 1e-4, "polynomial": 1e-3, "tanh": 1e-3, "model": 1e-5}


def default_step_size(target_name: str, sampler: landscapes.Spec) -> float:
    """The network's step size; times ``a`` for RMSProp- and Adam-SGLD, whose step
    eps / (sqrt(v) + a) grows to eps / a where the loss gradient is small, as near w0: their
    largest step is then SGLD's. At SGLD's own step the same default run gave 13.5/13.8 of 12
    (dln), 17.4/16.7 of 8 (rrr), ~5,000 of 0.25 (polynomial) and 3.9 of 1 (tanh) for RMSProp,
    16.7/17.6, 20.8/21.4, 0.40/0.45 and 3.4/3.1 for Adam; at a x it, RMSProp 12.7/13.3,
    7.8/7.6, 0.21/0.27, 0.75/0.71 and Adam 12.9/12.0, 8.1/8.6, 0.14/0.55, 0.76/0.74: no
    estimate above d/2, no diverged chain, one loss-spike flag (RMSProp, polynomial, seed 0)."""
    step_size = STEP_SIZES.get(target_name, SAMPLER_DEFAULTS["step_size"])
    a = next((p.default for p in sampler.params if p.name == "a"), None)
    return step_size * a if a else step_size


# The DLN starts at its generating point, as the DLN benchmark's runs do: Adam's w0 on 100,000
# points stops above the minimum the chains then find: lambda-hat came out at -6 to -11.
W0_DEFAULTS = {"dln": "truth", "model": "truth"}  # a model: its own (checkpoint) weights


def network_facts(name: str, params: dict) -> dict:
    """d, n, the default nbeta, whether a true w0 and the true LLC are known, the classes of a
    classification network (None for regression), or {"error": ...}
    for parameters its builder refuses: from ``landscapes.facts``, parameter arithmetic that
    builds nothing, so a page never holds a network (11 x 5000 typed widths grew the app's
    server by 2 GB when it built the target to read these)."""
    try:
        facts = landscapes.facts(name, params)
    except ParamError as exc:
        return {"error": str(exc), "field": exc.field}
    keys = ("dim", "n", "nbeta", "truth", "true_llc", "multiplicity", "classes")
    return {key: facts[key] for key in keys}


def llc_runs(store: Store) -> list[RunRecord]:
    """LLC runs that belong to no sweep, newest first."""
    swept = {c["run_id"] for s in store.list_sweeps() for c in s["cells"]}
    return [r for r in store.list() if "llc" in r.spec.get("observables", ()) and r.id not in swept]


def latest_llc(store: Store, target: dict) -> RunRecord | None:
    """The newest completed LLC run on ``target``'s network (its name, and its parameters
    other than n), for the VI scan to show beside its slope; None when there is none."""
    spec = landscapes.REGISTRY[target["name"]]

    def others(params: dict) -> dict:  # completed with the defaults: a sweep stores what was given
        full = spec.validate({**params, "n": spec.defaults()["n"]})
        return {k: v for k, v in full.items() if k != "n"}

    same = others(target["params"])
    for record in store.list("completed"):
        t = record.spec["target"]
        llc_ = ((record.summary or {}).get("observables") or {}).get("llc")
        if llc_ and t["name"] == target["name"] and others(t["params"]) == same:
            return record
    return None


def vi_rows(cells: list[dict]) -> dict:
    """The VI scan's table: one row per fit, with its verdict."""
    fmt = lambda v: None if v is None else round(v, 3)  # noqa: E731
    return {
        "n": [c["n"] for c in cells],
        "source": [c["source"] for c in cells],
        "status": [c["status"] for c in cells],
        "epochs": [f"{c['epochs']}/{c['epochs_total']}" for c in cells],
        "Ψ": [fmt(c["psi"]) for c in cells],
        "SE": [fmt(c["psi_se"]) for c in cells],
        "log Z̄ (exact)": [fmt(c["log_z_bar"]) for c in cells],
        "verdict": [(c["verdict"] or {}).get("status", "") for c in cells],
    }


def llc_warnings_so_far(record: RunRecord, flushes: dict, dim: int) -> list[dict]:
    """The health checks the summary will make, on the latest flush of a running LLC run
    (none before its burn-in ends, nor once it has ended)."""
    step = flushes.get("step")
    if record.status in FINAL or step is None or not len(step):
        return []
    if step[-1] < record.spec["burn_in"]:
        return []
    last = flushes["acceptance"][-1]
    acceptance = float(np.nanmean(last)) if np.isfinite(last).any() else None
    return llc_math.health(llc_math.summarise(flushes["llc"][-1], 0), dim, acceptance=acceptance)


def llc_details(est: dict) -> dict:
    """A finished LLC run's estimate as the Networks page's quantity -> value table."""
    training = est.get("training") or {}
    details = {
        "λ̂ mean": est["mean"],
        "SE": est["se"],
        "SD": est["std"],
        "chains (diverged)": f"{est['chains']} ({est['nan_chains']})",
        "draws per chain": est["draws"],
        "nβ": est["nbeta"],
        "localization γ": est["localization"],
        "w0": est["w0"],
        "baseline L_n(w0)": est["baseline_loss"],
        "baseline": est["baseline"],
        "MALA acceptance of an SGLD step": est["acceptance"],
        "gradient noise / injected noise": est["noise_ratio"],
        "WBIC": est["wbic"],
        "training steps": training.get("steps"),
    }
    if training.get("cancelled"):
        details["training steps"] = f"{training['steps']} (cancelled)"
    shown = [
        "–" if v is None else f"{v:.6g}" if isinstance(v, float) else str(v)
        for v in details.values()
    ]
    return {"quantity": list(details), "value": shown}


def pending_cells(
    store: Store, sweep: dict, result: dict, nbeta_default: float, read: Callable
) -> list[dict]:
    """A calibration's cells not among its finished ``result`` (``calibration_results``):
    running (their live curve, the mean over finite chains of ``read(run_id)``, the run's
    flushes so far) or queued/failed."""
    finished = {c["run_id"] for c in result["cells"]}
    out = []
    for cell in sweep["cells"]:
        if cell["run_id"] in finished:
            continue
        try:
            status = store.get(cell["run_id"]).status
        except KeyError:
            continue
        curve = {}
        data = read(cell["run_id"])
        if len(data.get("step", ())):
            mean = {k: _finite_mean(data[k]).tolist() for k in ("llc", "distance", "acceptance")}
            step = data["step"].tolist()
            curve = {"step": step, "flush_step": step, **mean}
        nbeta = cell["nbeta"] if cell["nbeta"] is not None else nbeta_default
        out.append({**cell, "status": status, "nbeta_value": nbeta, "curve": curve})
    return out


def _finite_mean(values) -> np.ndarray:
    """Per row of [T, chains] (or [T]), the mean over the finite chains; NaN where none is."""
    x = np.asarray(values, dtype=float)
    x = x[:, None] if x.ndim == 1 else x
    good = np.isfinite(x)
    count = good.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(good, x, 0).sum(1) / count
    mean[count == 0] = np.nan
    return mean


def sweep_done(store: Store, sweep: dict) -> bool:
    """Whether every run of ``sweep`` has ended (or was deleted)."""
    progress = sweeps.progress(store, sweep)
    return progress["done"] == progress["runs"]


def calibration_rows(cells: list[dict]) -> dict:
    """A calibration's finished cells as the Networks page's table (columns of values)."""
    return {
        "step size": [c["step_size"] for c in cells],
        "nβ": [c["nbeta_value"] for c in cells],
        "λ̂": [c["llc"] for c in cells],
        "SE": [c["se"] for c in cells],
        "acceptance": [c["acceptance"] for c in cells],
        "flags": [", ".join(c["flags"]) or "stable" for c in cells],
    }


# -- posterior-predictive metrics ------------------------------------------------------------

PREDICTIVE_LINES = (  # summary key -> what it is, for the plain-text output
    ("log_p", "ensemble log p(y | x) per point"),
    ("mean_single_log_p", "mean of single draws' log p(y | x) per point, <= log_p"),
    ("accuracy", "of the draw-averaged probabilities"),
    ("ece", "expected calibration error, 30 bins"),
    ("confidence", "mean top-label probability"),
    ("curvature", "input-space |lambda_max| / (|grad| + 1e-6), Srinivas et al."),
)


def predictive_lines(block: dict) -> list[str]:
    """The "predictive" observable's summary (``samplers.predictive.KEYS``) as text, a line a
    metric: what ``python -m jobs run`` and ``show`` print without --json."""
    draws, split = block.get("draws") or 0, block.get("split", "test")
    lines = [f"predictive: {draws} draws on the {split} set"]
    for key, what in PREDICTIVE_LINES:
        value = block.get(key)
        shown = "n/a" if value is None else f"{value:.6g}"
        if key == "curvature" and value is not None:
            what += f", {block.get('curvature_draws')} draws"
        lines.append(f"predictive.{key}: {shown}  ({what})")
    return lines


# What each metric means, for the Networks page's table (reference 001, section 3).
PREDICTIVE_TABLE = (  # summary key -> name, meaning
    (
        "log_p",
        "ensemble log p",
        "(1/N) Σ_n log((1/S) Σ_s p(y_n | x_n, θ_s)) on the test set: "
        "the posterior predictive's log-likelihood per point (higher is better)",
    ),
    (
        "mean_single_log_p",
        "mean single-draw log p",
        "each draw's own log p(y | x) per point, "
        "averaged over draws; below the ensemble's by how much the draws disagree",
    ),
    ("accuracy", "accuracy", "of the argmax of the draw-averaged probabilities"),
    (
        "ece",
        "ECE",
        "expected calibration error: |accuracy − confidence| in 30 equal-width bins "
        "of the top-label confidence, weighted by the bins' shares (0: calibrated)",
    ),
    ("confidence", "confidence", "mean top-label probability of the averaged prediction"),
    (
        "curvature",
        "curvature",
        "|λ_max(∇²ₓ ℓ)| / (‖∇ₓ ℓ‖ + 1e-6), derivatives in the input, on "
        "10% of the test set (Srinivas et al.): an unusual value flags a bad sampler",
    ),
    ("draws", "draws", "posterior draws averaged (kept steps × chains that did not diverge)"),
)


def predictive_rows(block: dict) -> dict:
    """The "predictive" observable's summary as the Networks page's table: metric, value and
    what it means, a row a metric (values as text, "–" where there is none)."""
    names, shown, meaning = [], [], []
    for key, name, what in PREDICTIVE_TABLE:
        value = block.get(key)
        if key == "curvature" and value is not None:
            what += f" ({block.get('curvature_draws')} draws)"
        names.append(name)
        shown.append(
            "–" if value is None else f"{value:.6g}" if isinstance(value, float) else str(value)
        )
        meaning.append(what)
    return {"metric": names, "value": shown, "meaning": meaning}


# -- the funnel (reference 001, section 2.1; the protocol is studies.funnel) --------------------

# Where a tail statistic is suspect: off the truth by more than a relative or absolute
# tolerance, or (v min) never below the true 1% quantile. Colour, not a test: 32 chains x 2e5
# steps of a correct sampler land within these (the reference's KS at 16 x 1e5 is noisier).
FUNNEL_TOLERANCE = {
    "v sd": ("relative", 0.1),
    "v q01": ("relative", 0.1),
    "v min": ("above", "v q01"),
    "P(v<-5)": ("absolute", 0.03),
    "P(v<-10)": ("absolute", 0.03),
    "KS vs N(0,80)": ("absolute", 0.05),
    "θ1 sd": ("relative", 0.1),
}
FUNNEL_PAPER = "paper (1 chain × 2e6 steps)"


def is_funnel_run(spec: dict) -> bool:
    """A run of reference 001's funnel protocol (``studies.funnel.spec``): SGRLD on the softplus
    funnel from the protocol's start."""
    from studies import funnel  # lazily: scipy.stats costs ~1 s to import

    return (
        is_sampling(spec)
        and spec["target"]["name"] == funnel.TARGET["name"]
        and spec["sampler"]["name"] == "sgrld"
        and spec.get("start") == list(funnel.START)
        and not spec.get("observables")
    )


def funnel_tails(store: Store, run_id: str, burn: int) -> dict:
    """``studies.funnel.tails`` of every kept draw of a run (after the burn-in, chains that never
    diverged)."""
    from studies import funnel

    data = store.read(run_id, names=["position", "diverged"])
    if "position" not in data:
        return dict.fromkeys(funnel.COLUMNS)
    kept = data["position"][burn:, ~data["diverged"][-1]]
    return funnel.tails(kept[..., -1], kept[..., 0])


def funnel_suspect(column: str, value) -> bool:
    """Whether a tail statistic is far from the truth (``FUNNEL_TOLERANCE``)."""
    from studies import funnel

    if value is None or not math.isfinite(value):
        return False
    how, tolerance = FUNNEL_TOLERANCE[column]
    if how == "above":
        return value > funnel.TRUTH[tolerance]
    off = abs(value - funnel.TRUTH[column])
    return off > (tolerance * abs(funnel.TRUTH[column]) if how == "relative" else tolerance)


def funnel_rows(basin: list[tuple[str, str, dict]], metrics=None) -> tuple[list[dict], list]:
    """The Funnel page's tail table and its suspect cells: the truth, then each (metric,
    source, tails) of ``basin`` followed by the paper's reproduced row of that metric (once),
    then the paper's rows of ``metrics`` (default: all of them) not shown yet. Returns (rows,
    per row the columns ``funnel_suspect`` flags)."""
    from studies import funnel

    rows = [{"metric": "truth", "source": "N(0, 80); θ1 | v ~ N(2, sp(v))", **funnel.TRUTH}]
    paper = {m: dict(zip(funnel.COLUMNS, v, strict=True)) for m, v in funnel.REFERENCE.items()}

    def paper_row(metric: str) -> None:
        if metric in paper:
            rows.append({"metric": metric, "source": FUNNEL_PAPER, **paper.pop(metric)})

    for metric, source, tails in basin:
        rows.append({"metric": metric, "source": source, **dict.fromkeys(funnel.COLUMNS), **tails})
        paper_row(metric)
    for metric in funnel.REFERENCE if metrics is None else metrics:
        paper_row(metric)
    flags = [[c for c in funnel.COLUMNS if funnel_suspect(c, row[c])] for row in rows]
    return rows, flags


def funnel_theta1_density(target: landscapes.Target, edges) -> np.ndarray:
    """theta_1's exact density averaged over each bin, (F(b) - F(a)) / (b - a) from the
    target's CDF: its marginal has a cusp at mu, which a pdf sampled at bin centres misses."""
    edges = np.asarray(edges, dtype=float)
    with torch.no_grad():
        cdf = target.x_cdf(torch.from_numpy(edges)).numpy()
    return np.diff(cdf) / np.diff(edges)
