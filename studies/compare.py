"""What the Compare page computes, headless: its row per sampler with the cells the verdict's
rules flag, which runs make one comparison (one Run click, one target and budget), how runs are
labelled, and the IAT along the target's widest directions (Heber et al. 2020, eq. 8,
Fig. 10).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable

import numpy as np

import samplers
from runs.budget import is_sampling
from runs.store import RunRecord
from samplers import diagnostics
from studies.diagnostics import POTENTIALS, final_coordinates

GROUP_SECONDS = 5.0  # runs of one Run click (Compare) are created within this of each other
# Nested sampling (runs.nested), a run kind of its own: Compare runs it beside the kernels at its
# own settings (live points, stop), on the comparison's target and seed, and reads its resampled
# draws (``runs.nested.equal_weight_draws``) as it reads a kernel's chains.
NESTED = "nested"


def is_nested(spec: dict) -> bool:
    return spec.get("kind") == NESTED


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


def nested_row(record: RunRecord, draws, exact, coord: int, label: str) -> dict:
    """``compare_row``'s columns for a nested run, from its summary and its resampled ``draws``
    ([n, d]): no step, acceptance, chains or R-hat; its evidence and energy evaluations."""
    summary = record.summary or {}
    ks = None
    if exact is not None and draws is not None and draws.size:
        ks = float(diagnostics.ks_distance(draws[:, coord], exact[:, coord])[0])
    evidence = None
    if "log_z" in summary:
        evidence = f"{summary['log_z']:.3f} ± {summary['log_z_error']:.3f}"
        if summary.get("exact_log_z") is not None:
            evidence += f" (exact {summary['exact_log_z']:.3f})"
    return {
        "sampler": NESTED,
        "status": record.status,
        f"KS to exact ({label})": ks,
        "seconds": summary.get("seconds"),
        "verdict": (summary.get("verdict") or {}).get("status"),
        "log Z": evidence,
        "energy evaluations": summary.get("evaluations"),
    }


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
    ensemble sized on its own (``WALKERS``) aside; a nested run has no chains or steps: its
    target and seed."""
    if is_nested(a) or is_nested(b):
        return all(a.get(k) == b.get(k) for k in ("target", "seed"))
    if {a.get("sampler", {}).get("name"), b.get("sampler", {}).get("name")} & set(WALKERS):
        a, b = {**a, "chains": None}, {**b, "chains": None}
    return budget_key(a) == budget_key(b)


# Samplers whose runs are told apart by one parameter besides the name: Compare offers each
# value as its own entry ("sgrld · monge") and labels runs with it.
VARIANTS = {"sgrld": "metric"}


def sampler_label(spec: dict) -> str:
    """A run's sampler as the pages name it: "sgrld · monge" where the sampler has a variant
    parameter (``VARIANTS``), else its name; a nested run "nested"."""
    if is_nested(spec):
        return NESTED
    name = spec["sampler"]["name"]
    value = spec["sampler"].get("params", {}).get(VARIANTS.get(name, ""))
    return f"{name} · {value}" if value is not None else name


def sampler_entries() -> dict[str, tuple[str, dict]]:
    """Compare's sampler choices, label -> (sampler, fixed parameters): every sampler of the
    registry, a sampler with a variant parameter once per value ("sgrld · monge"), then
    nested sampling (``NESTED``)."""
    entries: dict[str, tuple[str, dict]] = {}
    for name, spec in samplers.REGISTRY.items():
        variant = VARIANTS.get(name)
        for fixed in [{variant: v} for v in spec.param(variant).choices] if variant else [{}]:
            entries[sampler_label({"sampler": {"name": name, "params": fixed}})] = (name, fixed)
    entries[NESTED] = (NESTED, {})
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
            (is_sampling(spec) or is_nested(spec))
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
    along each of the target's k widest directions (Heber et al. 2020, eq. 8, Fig. 10).

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
