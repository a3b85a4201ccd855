"""The ``vi`` run kind and the ``vi`` sweep (docs/methods/vi.md, ``samplers.vi``).

A vi run fits one normalizing flow on a generalized-gamma source (or a fixed Gaussian) to a
target's posterior by maximising Psi = ELBO + n S_n, in the background like any run: each
epoch's mean objective goes to the store's records (``objective``), so a page draws the curve
live, and the summary holds the final full-data Psi with its Monte Carlo error, the exact
log Z_bar where Basin knows it (the bound Psi cannot pass) and the target's true learning
coefficient. Its epochs run on the run loop's clock (``runs.pace``: flushes, progress, cancels)
and its verdict is the verdict system's (``runs.verdict.judge_fit``). A resumed run replays: the
fit is the same from the same seed, and only the epochs the store lacks are written.

The ``vi`` sweep is the n-scan: one vi run per n (and per source); the slope of -Psi against log n
estimates lambda_vb >= lambda, an upper bound on the learning coefficient (the VI paper's eq. 6 and
App. E). On a network the scan is nested: one dataset of max(n) points (the target's own seed
parameter; the sweep's seed seeds the fits), each fit on its first n points, so the fits differ in n
and not in their noise draws (the exact log Z_bar's slope over independent datasets scattered by
several units on the H = 1 tanh net).
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from runs import verdict
from runs.build import build_target
from runs.pace import Pace, append_unstored
from runs.spec import RunSpec, VIOptions
from runs.store import Store
from samplers import vi

SOURCES = ("gamma", "gaussian")
NAMES = {"gamma": "nf_gamma", "gaussian": "nf_gaussian"}  # the VI paper's names
# the vi options ``samplers.vi.fit`` takes under their own names (``fit_options``)
FIT_FIELDS = (
    "epochs", "batch_fraction", "samples", "lr_flow", "lr_k", "lr_lambda_beta", "final_samples",
)  # fmt: skip


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
    Gamma(lambda0, beta0) mean and variance (fixed): the VI paper's Sec. 7."""
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
    (``vi.log_z_bar_k``, the normal-crossing check of docs/methods/vi.md); None elsewhere."""
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


def fit_options(o: VIOptions) -> dict:
    """``samplers.vi.fit``'s options from a run's: the prior's sd from its variance, the rest by
    name."""
    named = o.model_dump(include=set(FIT_FIELDS))
    return {"prior_mean": o.prior_mean, "prior_std": math.sqrt(o.prior_variance), **named}


def fit_run(spec: RunSpec, store: Store, run_id: str, pace: Pace, started: float) -> dict:
    """Fit ``spec`` into ``store`` under ``run_id`` on the run loop's clock (``runs.loop.execute``
    starts every run kind); the summary (status completed, or cancelled when ``pace`` said so
    between epochs). A diverged fit completes with its curve up to the divergence and a failing
    verdict."""
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
    records = EpochRecords(store, run_id)
    pace.begin()  # the first epoch

    def on_epoch(epoch: int, value: float) -> bool:
        records.keep(value)
        if pace.late() or epoch == o.epochs:
            records.flush()
            pace.flushed(epoch, report=True)
        return pace.stop()

    res = vi.fit(
        target,
        source,
        flow,
        **fit_options(o),
        generator=generator,
        on_epoch=on_epoch,
        sigma=noise_sd(spec),
    )
    records.flush()
    summary = _summary(spec, run_id, target, source, res, started)
    summary["verdict"] = verdict.judge_fit(summary, res.curve)
    return summary


class EpochRecords:
    """A fit's records: each epoch's mean objective ("epoch" from 1, "objective"), appended at
    each flush; a resumed run replays its epochs and writes only those the store lacks."""

    def __init__(self, store: Store, run_id: str):
        self.store, self.run_id = store, run_id
        self.stored = store.records(run_id)  # a resumed run replays these epochs unwritten
        self.pending: list[float] = []
        self.written = 0

    def keep(self, value: float) -> None:
        self.pending.append(value)

    def flush(self) -> None:
        if not self.pending:
            return
        first, n = self.written, len(self.pending)
        parts = {
            "epoch": [np.arange(first + 1, first + n + 1, dtype=np.int32)],
            "objective": [np.array(self.pending, dtype=np.float64)],
        }
        self.written = append_unstored(
            self.store, self.run_id, "records", first, parts, self.stored
        )
        self.pending = []


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
