"""Observables computed alongside a run's chains: the LLC (``"llc"``), the posterior-predictive
metrics of the kept draws (``"predictive"``), TATi's thermodynamic averages (``"thermo"``) and
the per-step ESS of random projections (``"ess"``).

An observable (an ``Observer``) sees the run at four points (and may add per-step arrays to the
records with ``annotate``, called on each block before the recorder keeps it): ``start`` (before
the chains exist: it may choose where they start, e.g. train to w0, or return the start it is
given), ``block`` (every block of steps, on the device, no host sync), ``flush`` (with the
records: one row of live signals per flush, in the store's "flushes" series) and ``summary`` (at
the end). The run loop knows nothing of what they compute.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from landscapes import ParamError, Target
from runs.spec import ESS_PROJECTIONS, RunSpec, SpecError, resolve_w0, target_facts
from runs.store import Store
from samplers import Kernel, diagnostics, llc, predictive
from samplers.training import random_init, train

EVAL_POINTS = 8192  # the fixed data subset on which the live MALA diagnostic evaluates U
TRAIN_REPORT_S = 0.5
Report = Callable[[dict], bool]  # a training's progress to the run's; True: stop (a cancel)


class Observer(ABC):
    """An observable, built as ``Observer(spec, target, kernel, store, run_id)``. The run loop
    calls its hooks in this order: ``start`` once, before the chains exist; ``annotate`` then
    ``block`` on every block of steps (on the device, no host sync); ``flush`` with every flush
    of the records; ``summary`` at the end. ``start``, ``annotate`` and ``flush`` do nothing
    unless an observable says otherwise; ``block`` and ``summary`` are each observable's own."""

    needs_positions = False  # every step's position, whether or not the run records them

    def start(
        self, chains: int, device: torch.device, report: Report, position: Tensor | None = None
    ) -> Tensor:
        """[C, d]: where the chains start; ``position``, the start so far, unchanged."""
        return position

    def annotate(self, first_step: int, info) -> dict[str, torch.Tensor]:
        """Per-step arrays [T, C, ...] to record with the block's records: none."""
        return {}

    @abstractmethod
    def block(self, first_step: int, info) -> None:
        """What it takes from a block of steps, on the device (no host sync)."""

    def flush(self, done: int, state, write: bool = True) -> None:  # noqa: B027 (optional hook)
        """Nothing live: what it computes comes at the end (``write`` False: a resumed run
        replaying steps whose rows the store holds)."""

    @abstractmethod
    def summary(self, records: dict[str, np.ndarray]) -> dict:
        """Its result for the run's summary; ``records``: the losses after the burn-in."""


class LLCObserver(Observer):
    """The local learning coefficient at w0, live: per-chain running estimates, the loss, the
    distance |w - w0| and the MALA acceptance of an SGLD step at every flush; the estimate with
    its health warnings at the end."""

    def __init__(self, spec: RunSpec, target: Target, kernel: Kernel, store: Store, run_id: str):
        self.spec, self.target, self.kernel = spec, target, kernel
        self.store, self.run_id = store, run_id
        self.nbeta = kernel.nbeta_for(target)
        self.gamma = float(kernel.params.get("localization", 0.0))
        self.flushes = store.records(run_id, "flushes")  # a resumed run's rows are kept

    # -- before the chains --------------------------------------------------------------------
    def start(
        self, chains: int, device: torch.device, report: Report, position: Tensor | None = None
    ) -> Tensor:
        """[C, d]: every chain at w0 (trained, the truth or an initialisation), in place of
        ``position`` (the start so far)."""
        spec, target, opts = self.spec, self.target, self.spec.llc
        g = torch.Generator(device=device).manual_seed(spec.seed + 104_729)  # not the chains'
        self.mode = resolve_w0(spec, target_facts(spec))
        self.training = None
        w0 = target.truth_point if self.mode == "truth" else random_init(target, g)
        if self.mode == "train":
            w0 = self._train(w0, g, report)
        self.w0 = w0.to(device=device, dtype=target.dtype)
        self.store.put_array(self.run_id, "w0", self.w0.cpu().numpy())
        w = self.w0[None]
        batch_size = self.kernel.params.get("batch_size")
        if opts.baseline == "minibatch" and target.n is not None:
            size = min(batch_size or 500, target.n)
            self.baseline = float(target.loss(w, target.sample_batch(g, size))[0])
        else:
            self.baseline = float(target.full_loss(w)[0])
        self.noise_ratio = None
        if self.kernel.minibatch:
            eps = float(self.kernel.params["step_size"])  # an SG kernel's: a number
            self.noise_ratio = llc.gradient_noise_ratio(
                target, self.w0, self.nbeta, eps, batch_size, g
            )
        self.eval_batch = None
        if target.n is not None and target.n > EVAL_POINTS:
            self.eval_batch = target.batch(
                torch.randperm(target.n, generator=g, device=device)[:EVAL_POINTS]
            )
        self.probe = g
        self.sum = torch.zeros(chains, dtype=torch.float64, device=device)
        self.count = 0
        self.since_flush = torch.zeros_like(self.sum)
        self.since_count = 0
        return self.w0.expand(chains, -1).clone()

    def _train(self, start: torch.Tensor, g: torch.Generator, report) -> torch.Tensor:
        opts, last = self.spec.llc, [0.0]
        checks: list[tuple[int, float]] = []

        def on_check(step: int, loss: float) -> bool:
            checks.append((step, loss))
            now = time.perf_counter()
            if now - last[0] >= TRAIN_REPORT_S or step == opts.train_steps:
                last[0] = now
                self.store.put_array(self.run_id, "train_loss", np.asarray(checks))
                progress = {"phase": "train", "steps_done": step}
                return report({**progress, "steps_total": opts.train_steps, "loss": loss})
            return False

        try:
            trained = train(
                self.target,
                start,
                optimizer=opts.train_optimizer,
                lr=opts.train_lr,
                steps=opts.train_steps,
                batch_size=opts.train_batch_size or (None if self.target.n <= 4096 else 512),
                patience=opts.train_patience,
                generator=g,
                on_check=on_check,
            )
        except ParamError as exc:
            field = "llc." + exc.field.replace(".", "_")  # train.lr -> llc.train_lr
            raise SpecError(field, str(exc).split(": ", 1)[1]) from None
        self.store.put_array(self.run_id, "train_loss", np.asarray(checks))
        self.training = {
            "optimizer": opts.train_optimizer,
            "lr": opts.train_lr,
            "steps": trained.steps,
            "stopped_early": trained.stopped_early,
            "cancelled": trained.cancelled,
            "loss": trained.loss,
        }
        return trained.w0

    # -- while the chains run -----------------------------------------------------------------
    def block(self, first_step: int, info) -> None:
        """Accumulate every step's excess loss L(w_t) - L(w0) after the burn-in, per chain, on
        the device: paired with w0's loss on the step's own batch where the kernel reports it
        (``samplers.llc.Paired``: same mean, far less noise), else against the baseline."""
        skip = max(0, self.spec.burn_in - first_step)
        loss = info.loss.double()
        center = info.scalars.get("center_loss")
        excess = loss - (self.baseline if center is None else center.double())
        self.sum += excess[skip:].sum(0)
        self.count += excess[skip:].shape[0]
        self.since_flush += loss.sum(0)
        self.since_count += loss.shape[0]

    def running(self) -> torch.Tensor:
        if not self.count:
            return torch.full_like(self.sum, math.nan)
        return self.nbeta * self.sum / self.count

    def flush(self, done: int, state, write: bool = True) -> None:
        """One row of live signals: step, running llc, mean loss since the last flush, distance
        |w - w0| and the MALA acceptance probability of a fresh SGLD step, per chain (not
        ``write``: a resumed run replaying steps whose rows the store holds; none written)."""
        if not self.since_count:
            return
        if not write:
            self.since_flush.zero_()
            self.since_count = 0
            return
        nan = torch.tensor(math.nan, dtype=torch.float64, device=self.sum.device)
        stuck = state.diverged
        distance = torch.linalg.vector_norm(state.position - state.center, dim=-1).double()
        accept = llc.sgld_acceptance(
            self.kernel, state, self.target, self.probe, self.eval_batch
        ).double()
        row = {
            "step": np.asarray([done - 1]),
            "llc": self.running(),
            "loss": self.since_flush / self.since_count,
            "distance": torch.where(stuck, nan, distance),
            "acceptance": torch.where(stuck, nan, accept),
        }
        row = {
            k: (v if isinstance(v, np.ndarray) else v[None].cpu().numpy()) for k, v in row.items()
        }
        self.store.append(self.run_id, self.flushes, row, series="flushes")
        self.flushes += 1
        self.since_flush.zero_()
        self.since_count = 0

    # -- at the end ------------------------------------------------------------------------------
    def summary(self, records: dict[str, np.ndarray]) -> dict:
        """The estimate and its health; ``records``: the losses after the burn-in."""
        target, dim = self.target, self.target.dim
        per_chain = self.running().cpu().numpy()
        est = llc.summarise(per_chain, self.count)
        losses = np.zeros((0, len(per_chain)))  # no records: a run cancelled at once
        if "loss" in records:  # paired where the kernel pairs: the excess the estimate averaged
            losses = llc.paired_losses(records, self.baseline)  # after the burn-in (runs.loop)
        spikes = llc.spikes(losses, self.baseline, self.nbeta, dim)
        flushes = self.store.read(self.run_id, series="flushes")
        acceptance = None
        if len(flushes.get("acceptance", ())):
            last = flushes["acceptance"][-1]
            acceptance = float(np.nanmean(last)) if np.isfinite(last).any() else None
        good = np.isfinite(per_chain)
        mean_loss = None
        if self.count and good.any():
            mean_loss = self.baseline + float((self.sum / self.count).cpu().numpy()[good].mean())
        out = {
            **est.as_dict(),
            "true": target.true_llc[0] if target.true_llc else None,
            "dim": dim,
            "nbeta": self.nbeta,
            "localization": self.gamma,
            "baseline": self.spec.llc.baseline,
            "baseline_loss": self.baseline,
            "w0": self.mode,
            "training": self.training,
            "mean_loss": mean_loss,
            "wbic": llc.wbic(mean_loss, target.n, self.nbeta),
            "noise_ratio": self.noise_ratio,
            "acceptance": acceptance,
            "spikes": int(spikes.sum()),
            "stationary": bool(len(losses)) and llc.stationary(losses, self.baseline, self.nbeta),
        }
        if hasattr(target, "llc_at"):  # normal crossings: the exact value at this temperature
            try:
                out["exact_at_nbeta"] = target.llc_at(self.nbeta)
            except ParamError:
                out["exact_at_nbeta"] = None
        out["warnings"] = llc.health(est, dim, spikes, self.noise_ratio, acceptance)
        return out


class PredictiveObserver(Observer):
    """Posterior-predictive metrics (``samplers.predictive``: ensemble log p, accuracy, ECE,
    confidence, input curvature) of the run's kept draws on the target's test set.

    The kept draws are the records' after the burn-in: steps with step % thin == 0 and step >=
    burn_in, of every chain, read from the block's positions (the run loop passes full ones
    whenever record.positions is not "none", which the spec requires). ``block`` adds them to
    per-chain sums on the device (no host sync); ``summary`` combines the chains that had not
    diverged by the run's end, as the run's other averages do. A resumed run replays from
    step 0 with a new observer, so each draw counts once."""

    def __init__(self, spec: RunSpec, target: Target, kernel: Kernel, store: Store, run_id: str):
        self.spec, self.target = spec, target
        self.first = math.ceil(spec.burn_in / spec.thin) * spec.thin  # the first kept step
        kept = len(range(self.first, spec.steps, spec.thin))
        # the curvature's draws spread over the kept draws the run will make
        self.sums = predictive.Accumulator(target, "test", spec.chains, kept * spec.chains)
        self.diverged: torch.Tensor | None = None

    def block(self, first_step: int, info) -> None:
        if info.position is None:
            raise SpecError("record.positions", "the 'predictive' observable needs positions")
        steps, thin = info.loss.shape[0], self.spec.thin
        kept = max(first_step, self.first)
        row = -(-kept // thin) * thin - first_step  # the block's first kept step
        if row < steps:
            self.sums.add(info.position[row::thin])  # [k, C, d]
        self.diverged = info.diverged[-1].clone()  # the chains diverged so far (sticky)

    def flush(self, done: int, state, write: bool = True) -> None:
        """Nothing live: the metrics come at the end."""

    def summary(self, records: dict[str, np.ndarray]) -> dict:
        """samplers.predictive.KEYS over the chains that had not diverged."""
        keep = None if self.diverged is None else ~self.diverged
        return self.sums.result(keep)


class ThermoObserver(Observer):
    """TATi's thermodynamic averages (Heber et al. 2020, Sec. 3.1) over every step after the
    burn-in, per chain on the device: the virial w . grad U(w), whose mean is d T for a confining U
    (the virial theorem: it costs one full-data gradient a step, at the step's position), and, for
    kernels with a momentum, the kinetic energy |p|^2 / 2, whose mean is d T / 2. U is the energy
    the kernel samples, exp(-U / T) (nbeta L, the prior, the localisation), T the kernel's
    temperature (1 where it has none). The summary gives each as the mean over the chains that did
    not diverge, its SE over those chains, the exact value and the relative error: what the
    integrator-order study (studies.order) plots against the step size."""

    needs_positions = True  # every step's, whether or not the run records them
    ROWS = 1 << 16  # positions whose gradient is taken at once (x the data's points a row)

    def __init__(self, spec: RunSpec, target: Target, kernel: Kernel, store: Store, run_id: str):
        self.spec, self.target, self.kernel = spec, target, kernel
        self.temperature = float(getattr(kernel, "temperature", 1.0))
        self.sums: dict[str, torch.Tensor] = {}
        self.count = 0
        self.diverged: torch.Tensor | None = None

    def start(self, chains, device, report, position=None):
        self.center = position  # the kernel's localisation centre is the chains' start
        return position

    def block(self, first_step: int, info) -> None:
        skip = max(0, self.spec.burn_in - first_step)
        w = info.position[skip:]  # [T, C, d]
        self.diverged = info.diverged[-1].clone()
        if not len(w):
            return
        steps, chains, dim = w.shape
        per = max(1, self.ROWS // (chains * max(1, self.target.n or 1)))  # steps per gradient
        virial = []
        for first in range(0, steps, per):
            x = w[first : first + per].reshape(-1, dim)
            centre = Centre(self.center.repeat(len(x) // chains, 1))
            grad = self.kernel.energy(x, centre, self.target, None).grad
            virial.append((x * grad).sum(-1).reshape(-1, chains))
        values = {"virial": torch.cat(virial)}
        if "kinetic" in info.scalars:
            values["kinetic"] = info.scalars["kinetic"][skip:]
        for name, value in values.items():
            total = value.double().sum(0)
            self.sums[name] = self.sums[name] + total if name in self.sums else total
        self.count += steps

    def flush(self, done: int, state, write: bool = True) -> None:
        """Nothing live: the averages come at the end."""

    def summary(self, records: dict[str, np.ndarray]) -> dict:
        dim, temp = self.target.dim, self.temperature
        keep = None if self.diverged is None else (~self.diverged).cpu().numpy()
        out: dict = {"temperature": temp, "steps": self.count, "dim": dim}
        for name, exact in (("virial", dim * temp), ("kinetic", dim * temp / 2)):
            if name not in self.sums or not self.count:
                out[name] = None
                continue
            per_chain = (self.sums[name] / self.count).cpu().numpy()
            per_chain = per_chain[keep & np.isfinite(per_chain)]
            mean = float(per_chain.mean()) if len(per_chain) else math.nan
            se = (
                float(per_chain.std(ddof=1) / math.sqrt(len(per_chain)))
                if len(per_chain) > 1
                else math.nan
            )
            out[name] = {
                "mean": mean,
                "se": se,
                "exact": exact,
                "error": (mean - exact) / exact,
                "error_se": se / exact,
                "chains": len(per_chain),
            }
        out["diverged_chains"] = 0 if keep is None else int((~keep).sum())
        return out


class ESSObserver(Observer):
    """Hron et al.'s mixing measure (2022, Sec. 4.1.2): every step's theta (the model's own
    parameters, also under repriorisation) and, on networks with test data, its predictions
    f_theta(X_test) (flattened over points x outputs), each projected on PROJECTIONS fixed random
    directions N(0, I) / sqrt(D) drawn from the seed. The projections are recorded with the records
    ("theta_projections", "f_projections", [draws, C, k]), so the live page and the summary read the
    same numbers: the per-step ESS (TFP's truncation, ``diagnostics.ess_per_step``) of each
    projection, averaged over chains, then its min / mean / max over projections."""

    needs_positions = True
    PROJECTIONS = ESS_PROJECTIONS
    NAMES = ("theta_projections", "f_projections")

    def __init__(self, spec: RunSpec, target: Target, kernel: Kernel, store: Store, run_id: str):
        self.spec, self.target, self.store, self.run_id = spec, target, store, run_id
        g = torch.Generator().manual_seed(spec.seed + 15_485_863)  # not the chains' stream
        k = self.PROJECTIONS
        like = {"dtype": target.dtype, "device": target.device}
        self.theta_dirs = (torch.randn(target.dim, k, generator=g) / math.sqrt(target.dim)).to(
            **like
        )
        self.x_test = getattr(target, "x_test", None)
        self.f_dirs = None
        if self.x_test is not None and len(self.x_test) and hasattr(target, "apply"):
            outputs = target.apply(torch.zeros(1, target.dim, **like), self.x_test)
            width = outputs[0].numel()
            self.f_dirs = (torch.randn(width, k, generator=g) / math.sqrt(width)).to(**like)
        self.diverged: torch.Tensor | None = None

    def annotate(self, first_step: int, info) -> dict[str, torch.Tensor]:
        """[T, C, k] projections of the block's theta (and predictions)."""
        theta = info.position  # [T, C, d]: theta, mapped by the run loop
        out = {"theta_projections": theta @ self.theta_dirs}
        if self.f_dirs is not None:
            steps, chains, dim = theta.shape
            with torch.no_grad():
                f = self.target.apply(theta.reshape(-1, dim), self.x_test)
            out["f_projections"] = f.reshape(steps, chains, -1) @ self.f_dirs
        return out

    def block(self, first_step: int, info) -> None:
        self.diverged = info.diverged[-1].clone()

    def flush(self, done: int, state, write: bool = True) -> None:
        """Nothing more: the projections went out with the records."""

    def summary(self, records: dict[str, np.ndarray]) -> dict:
        burn = math.ceil(self.spec.burn_in / self.spec.thin)
        kept = self.store.read(self.run_id, since=burn, names=list(self.NAMES))
        keep = None if self.diverged is None else (~self.diverged).cpu().numpy()
        out = {"projections": self.PROJECTIONS, "thin": self.spec.thin}
        for name, key in zip(self.NAMES, ("theta", "f"), strict=True):
            out[key] = diagnostics.projection_ess(kept[name], keep) if name in kept else None
        return out


class Centre:
    """The one field of a kernel's state its energy reads (the localisation centre)."""

    def __init__(self, center: torch.Tensor):
        self.center = center


OBSERVERS = {
    "llc": LLCObserver,
    "predictive": PredictiveObserver,
    "thermo": ThermoObserver,
    "ess": ESSObserver,
}
