"""``python -m bench vi``: the VI paper's Sec. 7 experiment, small, on the tanh network (the
scaled-down test of docs/methods/vi.md), as a user runs it.

Each n-scan is ``python -m jobs sweep vi`` in a subprocess with a fresh store: the background
worker pool (one single-threaded fit per core), nested data (the first n points of one
n = max(n) dataset), both sources (nf_gamma_500_1_100, learned; nf_gaussian_5_5e-2, fixed),
prior (5, 100) as (mean, variance), 300 epochs, Adam at the paper's rates, batch n / 10, M = 5,
final Psi from 100 draws with the analytic entropy, float64. While it runs, the bench reads the
sweep's ETA from the store every few seconds (what the app shows), to say how good it was.

1. H = 1 over NS, beside the exact log Z_bar (quadrature): the issue's goal is the whole scan
   within 10 minutes on the 2-core machine; the slope of -Psi against log n beside lambda = 1/2.
2. H = 2 and H = 4 over the same n (no exact log Z_bar there), the true lambda for context.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from samplers import vi

NS, QUICK_NS = (500, 1000, 1500, 2000, 3000, 5000), (500, 1500, 5000)
EPOCHS, QUICK_EPOCHS = 300, 30
HIDDEN = (1, 2, 4)
PRIOR = (5.0, 10.0)  # the VI paper's (5, 100) is (mean, variance)
GOAL_S = 600.0  # issue 43: the H = 1 scan within 10 minutes on the 2-core machine
LZ_SEEDS = tuple(range(10))  # the exact log Z_bar slope over datasets (quadrature only: cheap)
SOURCES = ("gamma", "gaussian")
NAMES = {"gamma": "nf_gamma_500_1_100", "gaussian": "nf_gaussian_5_5e-2"}
POLL_S = 5.0
# The VI paper's Table 2 (tanh, w0 = 0, prior (5, 100), n = 5000, mean +- sd over 10
# runs, 2000 epochs): the mu0 = 5 rows, nf_gamma_500_1_100_True and nf_gaussian_5_5e-2.
PAPER = {
    576: ("-6842.81 +- 199.32", "-10974.67 +- 4667.23"),
    1024: ("-44768.74 +- 94773.50", "-182386.08 +- 155290.52"),
}
ROOT = Path(__file__).resolve().parents[1]


def sweep(hidden: int, ns, epochs: int) -> dict:
    """One n-scan through the CLI, timed, with the ETAs the store showed along the way."""
    from runs.store import Store
    from studies import registry

    home = tempfile.mkdtemp(prefix="basin-bench-vi-")
    env = {**os.environ, "BASIN_HOME": home}
    command = [
        sys.executable, "-m", "jobs", "sweep", "vi", "--target", "tanh",
        "--target-param", f"hidden={hidden}", "--ns", ",".join(map(str, ns)),
        "--source", ",".join(SOURCES), "--vi-param", f"epochs={epochs}", "--json",
    ]  # fmt: skip
    tic = time.perf_counter()
    proc = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    etas = []  # (seconds since the start, the ETA shown then)
    store = None
    while proc.poll() is None:
        time.sleep(POLL_S)
        try:
            store = store or Store(home)
            (s,) = store.list_sweeps()
            eta = registry.results(store, s["id"])["eta_s"]
        except (ValueError, OSError, KeyError):
            continue  # not created yet
        if eta:
            etas.append((time.perf_counter() - tic, eta))
    wall = time.perf_counter() - tic
    out = json.loads(proc.stdout.read())
    return {"hidden": hidden, "wall": wall, "result": out, "etas": etas}


def _psi(result: dict, source: str, n: int) -> float | None:
    (cell,) = [c for c in result["cells"] if c["source"] == source and c["n"] == n]
    return cell["psi"]


def _less(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _f(x, spec: str = ".2f") -> str:
    return "-" if x is None or not math.isfinite(x) else format(x, spec)


def eta_error(s: dict) -> str:
    """The ETA shown at about a quarter and half of the wall time against the time it took."""
    parts = []
    for fraction in (0.25, 0.5):
        near = [e for e in s["etas"] if e[0] >= fraction * s["wall"]]
        if near:
            at, eta = near[0]
            parts.append(f"at {at:.0f} s it said {eta:.0f} s, {s['wall'] - at:.0f} s were left")
    return "; ".join(parts) or "no ETA read"


def checks(scans: list[dict]) -> list[str]:
    """The checks of docs/methods/vi.md on every scan: Psi finite, Psi <= log Z_bar (+ 3
    Monte Carlo SEs) where it is known, the objective improved (the verdicts' not_improving),
    and nf_gamma >= nf_gaussian at mu0 = 5, a row failing only beyond 2 combined SEs."""
    cells = [(s["hidden"], c) for s in scans for c in s["result"]["cells"]]
    finite = [c for _, c in cells if c["psi"] is not None and math.isfinite(c["psi"])]
    bound = [(h, c) for h, c in cells if c["log_z_bar"] is not None and c["psi"] is not None]
    above = [(h, c["n"]) for h, c in bound if c["psi"] > c["log_z_bar"] + 3 * c["psi_se"]]
    worse = [
        (h, c["n"])
        for h, c in cells
        if any(s["code"] == "not_improving" for s in (c["verdict"] or {}).get("signals", []))
    ]
    rows, losses = 0, []
    for s in scans:
        for n in sorted({c["n"] for c in s["result"]["cells"]}):
            g, q = (
                next(c for c in s["result"]["cells"] if c["source"] == src and c["n"] == n)
                for src in SOURCES
            )
            if g["psi"] is None or q["psi"] is None:
                continue
            rows += 1
            se = math.hypot(g["psi_se"], q["psi_se"])
            if g["psi"] < q["psi"]:
                beyond = "beyond" if q["psi"] - g["psi"] > 2 * se else "within"
                losses.append(
                    f"H = {s['hidden']} n = {n} by {q['psi'] - g['psi']:.2f} ({beyond} 2 SE)"
                )
    return [
        f"{len(finite)} of {len(cells)} Psi finite",
        f"{len(bound) - len(above)} of {len(bound)} below the exact log Z_bar"
        + (f" (above: {above})" if above else ""),
        f"{len(cells) - len(worse)} of {len(cells)} objectives improved"
        + (f" ({worse})" if worse else ""),
        f"nf_gamma >= nf_gaussian in {rows - len(losses)} of {rows} rows"
        + (f" (not: {', '.join(losses)})" if losses else ""),
    ]


def log_z_slopes(ns) -> list[float]:
    import landscapes

    out = []
    for seed in LZ_SEEDS:
        big = landscapes.make("tanh", hidden=1, n=max(ns), seed=seed, dtype="float64")
        lz = []
        for n in ns:
            t = big.first(n)
            x, y = t.x[:, 0].numpy(), t.y[:, 0].numpy()
            lz.append(vi.log_z_bar_tanh1(n, x, y, *PRIOR))
        out.append(vi.slope(ns, lz))
    return out


def scan_lines(scans: list[dict], ns, epochs: int, lz_slopes: list[float]) -> list[str]:
    lines = [
        f"Each n-scan: `python -m jobs sweep vi --target tanh --target-param hidden=H --ns "
        f"{','.join(map(str, ns))} --source gamma,gaussian --vi-param epochs={epochs} --json` "
        "(a fresh store, the default worker pool: one single-threaded fit per core). Nested "
        "data (the first n points of one dataset of max(n), seed 0), float64, prior (5, 100) = "
        "N(5, 10^2); batch n/10, M = 5, Adam (1e-3 flow and k, 1e-1 lambda and beta); final "
        "Psi = ELBO + n S_n from 100 draws and the analytic entropy. nf_gamma_500_1_100: lambda "
        "= (1, 500, ...), k = 1, beta = (n, 100, ...), learned (beta_1 fixed at n); "
        "nf_gaussian_5_5e-2: N(5, 0.05), fixed. log Z_bar: exact for H = 1 (quadrature).",
        "",
    ]
    for s in scans:
        r, h = s["result"], s["hidden"]
        lam = r["true_lc"]
        lines += [
            f"**H = {h}** (d = {2 * h}, true lambda = {lam['lambda']:.3f}, m = {lam['m']}): "
            f"{s['wall']:.0f} s wall for {len(r['cells'])} fits.",
            "",
            f"| n | Psi {NAMES['gamma']} | Psi {NAMES['gaussian']} | gamma - gaussian | "
            "log Z_bar (exact) | gap to log Z_bar (gamma / gaussian) |",
            "|---:|---:|---:|---:|---:|---|",
        ]
        for n in ns:
            g, q = _psi(r, "gamma", n), _psi(r, "gaussian", n)
            (cell,) = [c for c in r["cells"] if c["source"] == "gamma" and c["n"] == n]
            lz = cell["log_z_bar"]
            diff = None if g is None or q is None else g - q
            gaps = "-" if lz is None else f"{_f(_less(lz, g))} / {_f(_less(lz, q))}"
            lines.append(f"| {n} | {_f(g)} | {_f(q)} | {_f(diff)} | {_f(lz)} | {gaps} |")
        slopes = r["slopes"]
        text = ", ".join(
            f"{NAMES[k]} {_f(v['slope'], '.3f')} +- {_f(v['slope_se'], '.3f')}"
            for k, v in slopes.items()
            if v
        )
        exact = r["log_z_bar_fit"]
        lines += [
            "",
            f"Slope of -Psi against log n: {text}"
            + (f"; the exact -log Z_bar's: {exact['slope']:.3f}" if exact else "")
            + f". The scan's flags: {len(r['flags'])}"
            + ("" if not r["flags"] else " (" + "; ".join(f["message"] for f in r["flags"]) + ")")
            + f". ETA: {eta_error(s)}.",
            "",
        ]
    h1 = next(s for s in scans if s["hidden"] == 1)
    g1 = h1["result"]["slopes"]["gamma"]
    lines += [
        "Checks (docs/methods/vi.md), computed: " + "; ".join(checks(scans)) + "; the H = 1 "
        "slope of nf_gamma in [0.4, 1.0] (an upper bound on lambda = 0.5; a suggested, "
        f"unvalidated band): {_f(g1['slope'], '.3f')}, "
        f"{'in' if 0.4 <= g1['slope'] <= 1.0 else 'outside'} the band.",
        "",
        f"The exact log Z_bar's own slope over the same n varies between datasets (seeds "
        f"{LZ_SEEDS[0]}-{LZ_SEEDS[-1]}: {min(lz_slopes):.2f} to {max(lz_slopes):.2f}, mean "
        f"{sum(lz_slopes) / len(lz_slopes):.2f}), and the m = 2 log log n term bends it at "
        "these n: one scan's slope is indicative only.",
        "",
        f"H = 1 wall time {h1['wall']:.0f} s; goal (issue 43) <= {GOAL_S:.0f} s: "
        f"{'met' if h1['wall'] <= GOAL_S else 'missed'}.",
        "",
        "The paper's numbers (its Table 2: tanh, w0 = 0, prior (5, 100), "
        "n = 5000, 2000 epochs, mean +- sd over 10 runs) are at H = 576 and 1024, d = 1152 and "
        "2048: not reproducible on this machine and not comparable with the small H above (Psi "
        "scales with d). The mu0 = 5 rows, for context:",
        "",
        f"| H | {NAMES['gamma']}_True (paper) | {NAMES['gaussian']} (paper) |",
        "|---:|---:|---:|",
        *(f"| {h} | {g} | {q} |" for h, (g, q) in PAPER.items()),
        "",
        "At mu0 = 5 the paper's gamma rows beat its Gaussian ones at both widths, as here; its "
        "Psi lie far below -lambda log n + (m - 1) log log n (-100.06 at H = 576, -134.13 at "
        "H = 1024), so the paper shows neither tightness nor recovery of lambda.",
    ]
    return lines


def run(quick: bool) -> dict:
    ns = QUICK_NS if quick else NS
    epochs = QUICK_EPOCHS if quick else EPOCHS
    tic = time.perf_counter()
    scans = []
    for hidden in HIDDEN:
        print(f"H = {hidden}: n in {ns}, {epochs} epochs, both sources ...", flush=True)
        scans.append(sweep(hidden, ns, epochs))
        print(f"  {scans[-1]['wall']:.0f} s", flush=True)
    lz_slopes = log_z_slopes(ns)
    lines = scan_lines(scans, ns, epochs, lz_slopes)
    print()
    print("\n".join(lines))
    total = time.perf_counter() - tic
    walls = {s["hidden"]: s["wall"] for s in scans}
    print(f"\n(whole bench {total:.0f} s)")
    return {"lines": lines, "walls": walls, "total_s": total, "epochs": epochs}
