"""``python -m bench vi``: reference 004 section 5(C) on the tanh network (samplers/vi.py).

1. The H = 1 n-scan: Psi = ELBO + n S_n after a fit of each source (nf_gamma_500_1_100,
   learned, and its baseline nf_gaussian_5_5e-2, fixed) at n in NS on nested data (the first n
   points of one n = 5000 dataset), beside the exact log Z_bar (``vi.log_z_bar_tanh1``), and the
   slope of -Psi against log n beside lambda = 1/2 and the regular value 1. Issue 43's goal: the
   whole scan within 10 minutes on the 2-core machine.
2. H = 2 and H = 4 at n = 5000, both sources (no exact log Z_bar there).

float64, CPU, one torch thread; prior (5, 100) as (mean, variance), i.e. sd 10; Adam at the
paper's rates, batch n / 10, M = 5 draws a step, final Psi with 100 draws and the analytic
entropy (``vi.fit``).
"""

from __future__ import annotations

import copy
import math
import time

import torch

from jobs.worker import torch_threads
from samplers import vi

F64 = torch.float64
NS, QUICK_NS = (500, 1000, 1500, 2000, 3000, 5000), (500, 1500, 5000)
EPOCHS, QUICK_EPOCHS = 300, 30
WIDE_HIDDEN = (2, 4)  # part 2, at n = N_MAX
N_MAX = 5000
PRIOR = (5.0, 10.0)  # reference 004's (5, 100) is (mean, variance)
GOAL_S = 600.0  # issue 43: the H = 1 scan within 10 minutes on the 2-core machine
LZ_SEEDS = tuple(range(10))  # the exact log Z_bar slope over datasets (quadrature only: cheap)
SOURCES = ("nf_gamma_500_1_100", "nf_gaussian_5_5e-2")
# Reference 004 section 3, Table 2 (tanh, w0 = 0, prior (5, 100), n = 5000, mean +- sd over 10
# runs, 2000 epochs): the mu0 = 5 rows, nf_gamma_500_1_100_True and nf_gaussian_5_5e-2.
PAPER = {
    576: ("-6842.81 +- 199.32", "-10974.67 +- 4667.23"),
    1024: ("-44768.74 +- 94773.50", "-182386.08 +- 155290.52"),
}


def _target(hidden: int, n: int, seed: int):
    import landscapes

    return landscapes.make("tanh", hidden=hidden, n=n, seed=seed, dtype="float64", device="cpu")


def nested(big, n: int):
    """The first n points of ``big``'s training data as a target of its own (same test data)."""
    t = copy.copy(big)
    t.x, t.y, t.n = big.x[:n], big.y[:n], n
    t.nbeta = n / math.log(n)
    return t


def sources(d: int, n: int) -> dict:
    return {
        SOURCES[0]: vi.GeneralizedGamma.paper_init(d, n, 500.0, 1.0, 100.0, dtype=F64),
        SOURCES[1]: vi.GaussianSource.like_gamma(d, 500.0, 100.0, dtype=F64),
    }


def fit_one(target, source, epochs: int, seed: int = 0) -> vi.FitResult:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # the flow's hidden layers
        flow = vi.Flow(source.dim).double()
    return vi.fit(
        target,
        source,
        flow,
        prior_mean=PRIOR[0],
        prior_std=PRIOR[1],
        epochs=epochs,
        batch_fraction=0.1,
        samples=5,
        generator=torch.Generator().manual_seed(seed + 1),
        final_samples=100,
    )


def _data(target):
    return target.x[:, 0].double().numpy(), target.y[:, 0].double().numpy()


def _psi(res: vi.FitResult) -> float:
    return math.nan if res.psi is None else res.psi


def _f(x: float, spec: str = ".2f") -> str:
    return "diverged" if x is None or not math.isfinite(x) else format(x, spec)


def scan(ns, epochs: int, seed: int = 0) -> dict:
    big = _target(1, max(ns), seed)
    rows = []
    tic = time.perf_counter()
    for n in ns:
        target = nested(big, n)
        x, y = _data(target)
        row = {"n": n, "log_z": vi.log_z_bar_tanh1(n, x, y, *PRIOR)}
        for name, source in sources(2, n).items():
            res = fit_one(target, source, epochs)
            row[name] = res
            print(
                f"  n {n} {name}: Psi {_f(_psi(res))} (log Z_bar {row['log_z']:.2f}), "
                f"{res.seconds:.1f} s{' DIVERGED' if res.diverged else ''}",
                flush=True,
            )
        rows.append(row)
    return {"rows": rows, "wall": time.perf_counter() - tic, "seed": seed}


def log_z_slopes(ns) -> list[float]:
    out = []
    for seed in LZ_SEEDS:
        big = _target(1, max(ns), seed)
        lz = [vi.log_z_bar_tanh1(n, *_data(nested(big, n)), *PRIOR) for n in ns]
        out.append(vi.slope(ns, lz))
    return out


def wide(epochs: int, n: int = N_MAX, seed: int = 0) -> list[dict]:
    rows = []
    for hidden in WIDE_HIDDEN:
        target = _target(hidden, n, seed)
        row = {"hidden": hidden, "true": target.true_llc}
        for name, source in sources(2 * hidden, n).items():
            res = fit_one(target, source, epochs)
            row[name] = res
            print(
                f"  H {hidden} {name}: Psi {_f(_psi(res))}, {res.seconds:.1f} s"
                f"{' DIVERGED' if res.diverged else ''}",
                flush=True,
            )
        rows.append(row)
    return rows


def scan_lines(s: dict, epochs: int, lz_slopes: list[float]) -> list[str]:
    rows = s["rows"]
    ns = [r["n"] for r in rows]
    lines = [
        f"H = 1 n-scan (reference 004 section 5(C)): tanh, w0 = 0, nested data (the first n "
        f"points of one n = {max(ns)} dataset, seed {s['seed']}), float64, CPU, 1 torch thread; "
        f"prior (5, 100) = N(5, 10^2); {epochs} epochs, batch n/10, M = 5, Adam (1e-3 flow and "
        "k, 1e-1 lambda and beta); final Psi = ELBO + n S_n from 100 draws and the analytic "
        "entropy. nf_gamma_500_1_100: lambda = (1, 500), k = 1, beta = (n, 100), learned "
        "(beta_1 fixed at n); nf_gaussian_5_5e-2: N(5, 0.05), fixed. log Z_bar: exact "
        "(quadrature, ``vi.log_z_bar_tanh1``), the bound Psi <= log Z_bar.",
        "",
        f"| n | Psi {SOURCES[0]} | Psi {SOURCES[1]} | log Z_bar (exact) | gamma - gaussian | "
        "gap to log Z_bar (gamma / gaussian) | s (gamma / gaussian) |",
        "|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        g, q = _psi(r[SOURCES[0]]), _psi(r[SOURCES[1]])
        lines.append(
            f"| {r['n']} | {_f(g)} | {_f(q)} | {r['log_z']:.2f} | {_f(g - q)} | "
            f"{_f(r['log_z'] - g)} / {_f(r['log_z'] - q)} | "
            f"{r[SOURCES[0]].seconds:.1f} / {r[SOURCES[1]].seconds:.1f} |"
        )
    slopes = {}
    for name in SOURCES:
        psi = [_psi(r[name]) for r in rows]
        slopes[name] = vi.slope(ns, psi) if all(math.isfinite(p) for p in psi) else math.nan
    lz = vi.slope(ns, [r["log_z"] for r in rows])
    band = lambda v: "in" if 0.4 <= v <= 1.0 else "outside"  # noqa: E731
    lines += [
        "",
        "Slope of -Psi against log n (least squares over the scan's n; it estimates lambda_vb "
        ">= lambda, so it is an upper bound on lambda; reference 004's suggested band for H = 1, "
        "an unvalidated estimate: [0.4, 1.0]):",
        "",
        "| | slope | band [0.4, 1.0] |",
        "|---|---:|---|",
        *(
            f"| -Psi {name} | {_f(slopes[name], '.3f')} | "
            f"{band(slopes[name]) if math.isfinite(slopes[name]) else '-'} |"
            for name in SOURCES
        ),
        f"| -log Z_bar (exact, this dataset) | {lz:.3f} | {band(lz)} |",
        "| true lambda (H = 1, m = 2) | 0.500 | |",
        "| regular value d/2 | 1.000 | |",
        "",
        f"One dataset: the exact log Z_bar's own slope over the same n varies between datasets "
        f"(seeds {LZ_SEEDS[0]}-{LZ_SEEDS[-1]} here: {min(lz_slopes):.2f} to "
        f"{max(lz_slopes):.2f}, mean {sum(lz_slopes) / len(lz_slopes):.2f}; quoted elsewhere "
        "as 0.28-0.70), and the m = 2 log log n term bends it at these n, so the Psi slopes "
        "are indicative only.",
        "",
        f"Wall time of the whole scan ({len(ns)} values of n x 2 sources, exact log Z_bar "
        f"included): {s['wall']:.0f} s; goal (issue 43) <= {GOAL_S:.0f} s: "
        f"{'met' if s['wall'] <= GOAL_S else 'missed'}.",
    ]
    return lines


def wide_lines(rows: list[dict], epochs: int, n: int = N_MAX) -> list[str]:
    lines = [
        f"H = 2 and H = 4 at n = {n} (seed 0), both sources, {epochs} epochs, otherwise as the "
        "scan (d = 2H; nf_gamma_500_1_100: lambda = (1, 500, ...), beta = (n, 100, ...)). No "
        "exact log Z_bar at H > 1; the true lambda for context.",
        "",
        f"| H | d | true lambda (m) | Psi {SOURCES[0]} | Psi {SOURCES[1]} | gamma - gaussian | "
        "s (gamma / gaussian) |",
        "|---:|---:|---|---:|---:|---:|---|",
    ]
    for r in rows:
        g, q = _psi(r[SOURCES[0]]), _psi(r[SOURCES[1]])
        lam, m = r["true"]
        lines.append(
            f"| {r['hidden']} | {2 * r['hidden']} | {lam:.3f} ({m}) | {_f(g)} | {_f(q)} | "
            f"{_f(g - q)} | {r[SOURCES[0]].seconds:.1f} / {r[SOURCES[1]].seconds:.1f} |"
        )
    lines += [
        "",
        "The paper's numbers (reference 004 section 3, Table 2: tanh, w0 = 0, prior (5, 100), "
        "n = 5000, 2000 epochs, mean +- sd over 10 runs) are at H = 576 and 1024, d = 1152 and "
        "2048: not reproducible on this machine, and not comparable with the small H above "
        "(Psi scales with d). The mu0 = 5 rows, for context only:",
        "",
        f"| H | {SOURCES[0]}_True (paper) | {SOURCES[1]} (paper) |",
        "|---:|---:|---:|",
        *(f"| {h} | {g} | {q} |" for h, (g, q) in PAPER.items()),
        "",
        "The reference's claim to check at mu0 = 5 (section 5(C)): nf_gamma >= nf_gaussian; in "
        "its tables the mu0 = 5 gamma rows beat G5 at both widths, and every reported Psi lies "
        "far below -lambda log n + (m - 1) log log n (-100.06 at H = 576, -134.13 at H = 1024), "
        "so the paper shows neither tightness nor recovery of lambda.",
    ]
    return lines


def run(quick: bool, wide_epochs: int | None = None) -> dict:
    ns = QUICK_NS if quick else NS
    epochs = QUICK_EPOCHS if quick else EPOCHS
    wide_epochs = wide_epochs or epochs
    tic = time.perf_counter()
    with torch_threads(1):
        print(f"H = 1 n-scan: n in {ns}, {epochs} epochs, both sources", flush=True)
        s = scan(ns, epochs)
        print(f"(scan: {s['wall']:.0f} s)", flush=True)
        lz_slopes = log_z_slopes(ns)
        print(f"\nH = 2, 4 at n = {N_MAX}, {wide_epochs} epochs:", flush=True)
        tic_wide = time.perf_counter()
        w = wide(wide_epochs)
        wide_s = time.perf_counter() - tic_wide
    lines = [*scan_lines(s, epochs, lz_slopes), "", *wide_lines(w, wide_epochs)]
    print()
    print("\n".join(lines))
    total = time.perf_counter() - tic
    print(f"\n(scan {s['wall']:.0f} s, H = 2 and 4 {wide_s:.0f} s; whole bench {total:.0f} s)")
    return {
        "lines": lines,
        "scan_s": s["wall"],
        "wide_s": wide_s,
        "total_s": total,
        "epochs": epochs,
    }
