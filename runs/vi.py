"""The ``vi`` run kind and the ``vi`` sweep (reference 004, ``samplers.vi``).

A vi run fits one normalizing flow on a generalized-gamma source (or a fixed Gaussian) to a
target's posterior by maximising Psi = ELBO + n S_n, in the background like any run: each
epoch's mean objective goes to the store's records (``objective``), so a page draws the curve
live, and the summary holds the final full-data Psi with its Monte Carlo error, the exact
log Z_bar where Basin knows it (the bound Psi cannot pass) and the target's true learning
coefficient. A resumed run replays: the fit is the same from the same seed, and only the
epochs the store lacks are written.

The ``vi`` sweep is the n-scan: one vi run per n (and per source); the slope of -Psi against
log n estimates lambda_vb >= lambda, an upper bound on the learning coefficient (reference 004
eq 6). On a network the scan is nested: one dataset of max(n) points (the target's own seed
parameter; the sweep's seed seeds the fits), each
fit on its first n points, so the fits differ in n and not in their noise draws (the exact
log Z_bar's slope over independent datasets scattered by several units on the H = 1 tanh net).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
import torch

from runs.spec import RunSpec, build_target
from runs.store import Progress, Store
from samplers import vi

FLUSH_SECONDS = 0.5  # epochs reach the store (and the live curve) at least this often
CONVERGED_WINDOW = 0.1  # the curve's last 10% of epochs against the 10% before
SOURCES = ("gamma", "gaussian")
NAMES = {"gamma": "nf_gamma", "gaussian": "nf_gaussian"}  # reference 004's names


def noise_sd(spec: RunSpec) -> float:
    """The regression noise sd the likelihood reads (``vi.log_likelihood_scale``): the spec's,
    else the target's own (polynomial's noise_std, ntk-fcn's sigma), else 1 (tanh, rrr, dln)."""
    if spec.vi.sigma is not None:
        return spec.vi.sigma
    params = spec.target.params
    return float(params.get("noise_std") or params.get("sigma") or 1.0)


def sample_size(spec: RunSpec) -> int:
    """n: the points fitted (``vi.points``, else the data's), or a potential's own n
    (normal-crossing's E = n K), else 1."""
    return int(spec.vi.points or spec.target.params.get("n") or 1)


def make_source(spec: RunSpec, d: int, dtype, device) -> torch.nn.Module:
    """nf_gamma_lambda0_k0_beta0 (learned, beta_1 fixed at n) or nf_gaussian with the same
    Gamma(lambda0, beta0) mean and variance (fixed): reference 004 section 5(C)."""
    o = spec.vi
    if o.source == "gamma":
        n = sample_size(spec)
        source = vi.GeneralizedGamma.paper_init(d, n, o.lambda0, o.k0, o.beta0, dtype=dtype)
    else:
        source = vi.GaussianSource.like_gamma(d, o.lambda0, o.beta0, dtype=dtype)
    return source.to(dtype=dtype, device=device)


def exact_log_z_bar(target, spec: RunSpec) -> float | None:
    """log Z_bar where Basin knows it exactly: the H = 1 tanh net (quadrature,
    ``vi.log_z_bar_tanh1``) and the product normal crossing under an N(0, I) prior
    (``vi.log_z_bar_k``, section 5(A)); None elsewhere."""
    o = spec.vi
    std = math.sqrt(o.prior_variance)
    if spec.target.name == "tanh" and spec.target.params.get("hidden") == 1:
        x = target.x[:, 0].double().cpu().numpy()
        y = target.y[:, 0].double().cpu().numpy()
        return vi.log_z_bar_tanh1(target.n, x, y, o.prior_mean, std, noise_sd(spec))
    if (
        spec.target.name == "normal-crossing"
        and target.form == "product"
        and (o.prior_mean, o.prior_variance) == (0.0, 1.0)
    ):
        return vi.log_z_bar_k(target.sample_size, target.k)
    return None


def true_lc(target) -> dict | None:
    """The target's known learning coefficient lambda (and multiplicity m), or None."""
    truth = getattr(target, "true_llc", None)
    if truth is None:
        return None
    if isinstance(truth, tuple):
        return {"lambda": float(truth[0]), "m": int(truth[1])}
    return {"lambda": float(truth), "m": None}


def execute(
    spec: RunSpec,
    store: Store,
    run_id: str,
    should_stop: Callable[[], bool] = lambda: False,
    on_progress: Callable[[Progress], None] | None = None,
) -> dict:
    """Fit ``spec`` into ``store`` under ``run_id``; the summary (status completed, or
    cancelled when ``should_stop`` said so between epochs). A diverged fit completes with its
    curve up to the divergence and a failing verdict."""
    started = time.perf_counter()
    o = spec.vi
    target, _ = build_target(spec)
    if o.points is not None:
        target = target.first(o.points)
    dtype, device = target.dtype, target.device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(spec.seed)  # the flow's hidden layers, from the seed alone
        flow = vi.Flow(target.dim, layers=o.layers, hidden=o.hidden).to(dtype=dtype, device=device)
    source = make_source(spec, target.dim, dtype, device)
    generator = torch.Generator(device=device).manual_seed(spec.seed)
    stored = store.records(run_id)  # a resumed run replays these epochs unwritten
    pending: list[float] = []
    written = 0
    last_flush = fit_started = time.perf_counter()

    def flush() -> None:
        nonlocal written, last_flush
        first = written
        new = [(first + i, v) for i, v in enumerate(pending) if first + i >= stored]
        if new:
            epochs = np.array([e + 1 for e, _ in new], dtype=np.int32)
            values = np.array([v for _, v in new], dtype=np.float64)
            store.append(run_id, new[0][0], {"epoch": epochs, "objective": values})
        written += len(pending)
        pending.clear()
        last_flush = time.perf_counter()

    def on_epoch(epoch: int, value: float) -> bool:
        pending.append(value)
        now = time.perf_counter()
        if now - last_flush >= FLUSH_SECONDS or epoch == o.epochs:
            flush()
            rate = epoch / (now - fit_started)
            p = Progress(epoch, o.epochs, rate, (o.epochs - epoch) / rate, "fit")
            store.set_progress(run_id, p.as_dict())
            if on_progress:
                on_progress(p)
        return should_stop()

    res = vi.fit(
        target,
        source,
        flow,
        prior_mean=o.prior_mean,
        prior_std=math.sqrt(o.prior_variance),
        epochs=o.epochs,
        batch_fraction=o.batch_fraction,
        samples=o.samples,
        lr_flow=o.lr_flow,
        lr_k=o.lr_k,
        lr_lambda_beta=o.lr_lambda_beta,
        generator=generator,
        on_epoch=on_epoch,
        sigma=noise_sd(spec),
        final_samples=o.final_samples,
    )
    flush()
    summary = _summary(spec, run_id, target, source, res, started)
    summary["verdict"] = judge(summary, res.curve)
    return summary


def _summary(spec: RunSpec, run_id: str, target, source, res: vi.FitResult, started) -> dict:
    final = res.final
    terms = None
    if final is not None:
        terms = {
            name: None if getattr(final, name) is None else float(getattr(final, name))
            for name in ("log_lik", "n_k", "log_prior", "log_det", "entropy", "n_s")
        }
    with torch.no_grad():
        fitted = {
            name: getattr(source, name).detach().cpu().double().tolist()
            for name in (("lam", "k", "beta") if spec.vi.source == "gamma" else ("mean", "var"))
        }
    log_z = exact_log_z_bar(target, spec)
    return {
        "run_id": run_id,
        "kind": "vi",
        "status": "cancelled" if res.stopped else "completed",
        "target": spec.target.name,
        "source": NAMES[spec.vi.source],
        "n": target.n or sample_size(spec),
        "dim": target.dim,
        "epochs": res.epochs,
        "optimizer_steps": res.steps,
        "seconds": time.perf_counter() - started,
        "sampling_seconds": res.seconds,  # the fit's (the CLI's field name for a run's work)
        "psi": res.psi,
        "elbo": res.elbo,
        "objective": None if final is None else float(final.value),
        "objective_se": None if final is None else final.se,
        "terms": terms,
        "log_z_bar": log_z,
        "true_lc": true_lc(target),
        "diverged": res.diverged,
        "diverged_epoch": res.diverged_epoch,
        "fitted_source": fitted,
        "compiled": False,
        "observables": {},
        "warnings": [],
    }


def _signal(code: str, status: str, value, message: str, advice: str) -> dict:
    return {"code": code, "status": status, "value": value, "message": message, "try": advice}


def judge(summary: dict, curve: list[float]) -> dict:
    """A vi run's verdict from its own numbers: a divergence, a final objective above the
    exact log Z_bar (impossible: Psi <= log Z_bar, reference 004 eq 2) beyond 3 Monte Carlo
    SEs, a curve still rising in its last epochs, or a fit that ended below where it began."""
    signals = []
    if summary["diverged"]:
        signals.append(
            _signal(
                "diverged",
                "fail",
                summary["diverged_epoch"],
                f"the fit diverged in epoch {summary['diverged_epoch']} (a NaN or Inf objective "
                "or gradient, or a degenerate source); its parameters are the last finite ones",
                "smaller learning rates (vi.lr_lambda_beta, vi.lr_flow), or a prior closer to "
                "the data's scale",
            )
        )
    value, se, log_z = summary["objective"], summary["objective_se"], summary["log_z_bar"]
    if value is not None and log_z is not None and value > log_z + 3 * se:
        signals.append(
            _signal(
                "above_bound",
                "fail",
                value - log_z,
                f"Psi {value:.2f} is above the exact log Z_bar {log_z:.2f} by more than 3 "
                f"Monte Carlo SEs ({se:.2g}): the estimate cannot be right",
                "more final draws (vi.final_samples); report this run",
            )
        )
    n, d = summary.get("n"), summary.get("dim")
    loose = 0.5 * d * math.log(n) if n and d and n > 1 else None  # a regular model's log n term
    if value is not None and log_z is not None and loose and value < log_z - loose:
        signals.append(
            _signal(
                "far_below_bound",
                "warn",
                log_z - value,
                f"Psi {value:.4g} is {log_z - value:.3g} nats below the exact log Z_bar "
                f"{log_z:.4g}, more than (d/2) log n = {loose:.3g}: this fit is too poor for its "
                "value (or a slope) to say much",
                "more epochs, smaller learning rates, or the gamma source",
            )
        )
    window = max(1, int(CONVERGED_WINDOW * len(curve)))
    if len(curve) >= 20 and not summary["diverged"]:
        last, before = np.array(curve[-window:]), np.array(curve[-2 * window : -window])
        se_diff = math.sqrt(last.var(ddof=1) / len(last) + before.var(ddof=1) / len(before))
        rise = float(last.mean() - before.mean())
        if rise > 3 * se_diff:
            signals.append(
                _signal(
                    "not_converged",
                    "warn",
                    rise,
                    f"the objective still rose by {rise:.3g} over its last {window} epochs "
                    f"(more than 3 SEs, {se_diff:.2g}): Psi is below what this flow reaches",
                    "more epochs (vi.epochs)",
                )
            )
        first = np.array(curve[:window])
        se_drop = math.sqrt(last.var(ddof=1) / len(last) + first.var(ddof=1) / len(first))
        if last.mean() < first.mean() - 3 * se_drop:  # beyond the epochs' own noise
            signals.append(
                _signal(
                    "not_improving",
                    "fail",
                    float(last.mean() - first.mean()),
                    "the objective ended below where it began: the fit made things worse",
                    "smaller learning rates (vi.lr_lambda_beta, vi.lr_flow)",
                )
            )
    elif not summary["diverged"]:
        signals.append(
            _signal(
                "short",
                "warn",
                len(curve),
                f"{len(curve)} epochs are too few to tell whether the fit converged",
                "20 epochs or more (the reference trains 100-300 on small models)",
            )
        )
    order = {"good": 0, "warn": 1, "fail": 2}
    status = max((s["status"] for s in signals), key=order.get, default="good")
    return {"status": status, "signals": signals}
