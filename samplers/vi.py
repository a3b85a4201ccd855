"""Variational inference via resolution of singularities (docs/methods/vi.md): sources, flow,
Psi_K.

A variational posterior over w is w = G(xi), xi ~ q, with q a mean-field *source* and G a
normalizing flow, a learned resolution map (the paper's Sec. 6). Its objective is the
normalized ELBO Psi(q, G) = -E_q n K_n(G(xi)) - KL(q || phi(G) |G'|) <= log Z_bar(n) (eq 2).

The family (sources and flow) is in ``samplers.flows``, the exact values (the normal-crossing
check's closed form and quadratures, the tanh net's log Z_bar) in ``samplers.vi_exact``; this
module, the fit, re-exports both, so ``samplers.vi`` is the one name to import.

On a target (``landscapes``), as in the paper's Sec. 7: ``log_likelihood_scale`` reads a target's
loss as sum_i log p(y_i | x_i, w) (a Gaussian of sd ``sigma`` for regression, the cross-entropy for
classification, the energy itself for a potential); ``psi_estimate`` is the Monte Carlo
Psi = E_q[-n K_n(G xi)] + E_q[log phi(G xi) + log|G'(xi)|] + H(q) with the draws as the target's
chains, on all n points or unbiased on a minibatch; ``fit`` trains it with the paper's Adam groups
and minibatches and returns the per-epoch curve and the final full-data Psi; ``log_z_bar_tanh1``
is the exact log Z_bar of the H = 1 tanh net, the bound Psi cannot pass. The prior
phi = N(prior_mean, prior_std^2 I) takes a standard deviation: the paper's pairs (5, 100) and
(0, 1) are (mean, variance), so (5, 100) is prior_std = 10.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from .flows import LOG_2PI, Flow, GaussianSource, GeneralizedGamma
from .vi_exact import log_z_bar_k, log_z_bar_tanh1, psi_normal_crossing, slope, sup_psi

__all__ = [
    "FitResult",
    "Flow",
    "GaussianSource",
    "GeneralizedGamma",
    "LogLikelihood",
    "PsiEstimate",
    "epoch_batches",
    "fit",
    "log_likelihood_scale",
    "log_normal",
    "log_z_bar_k",
    "log_z_bar_tanh1",
    "param_groups",
    "psi_estimate",
    "psi_normal_crossing",
    "slope",
    "sup_psi",
]


@dataclass(frozen=True)
class LogLikelihood:
    """How a target's loss becomes the log-likelihood of its data:

        sum_i log p(y_i | x_i, w) = -count * (scale * loss(w) + offset),

    with ``loss`` the target's mean per-sample loss (``count`` = n) or a potential's energy
    (``count`` = 1). ``kind`` says which reading applies (``log_likelihood_scale``)."""

    kind: str  # "gaussian", "categorical" or "energy"
    count: int
    scale: float
    offset: float

    def __call__(self, target, w: Tensor, batch=None) -> Tensor:
        """[C]: sum_i log p(y_i | x_i, w) at ``w: [C, d]`` (any dtype; cast to the target's and
        back, differentiably). On a minibatch the loss is the batch's mean, so n times it is
        (n / B) sum over the batch: an unbiased estimate of the full sum."""
        x = w.to(dtype=target.dtype, device=target.device)
        loss = target.full_loss(x) if batch is None else target.loss(x, batch)
        return (-self.count * (self.scale * loss + self.offset)).to(w.dtype)


def log_likelihood_scale(target, sigma: float = 1.0) -> LogLikelihood:
    """Basin's losses read as log-likelihoods (targets carry no noise scale, landscapes.base):

    - regression networks (squared error summed over the ``out`` outputs, averaged over the
      n points, no 1/(2 sigma^2)): y ~ N(f_w(x), sigma^2 I), so
      sum_i log p = -(n out / 2) log(2 pi sigma^2) - n L_n(w) / (2 sigma^2). ``sigma`` is the
      noise sd the data were drawn with: 1 for tanh, rrr and dln; pass polynomial's
      ``noise_std``;
    - classification networks (mean cross-entropy): sum_i log p = -n L_n(w);
    - potentials (``n`` None, the energy is the loss): the energy read as -sum_i log p itself,
      sum_i log p = -E(w). For normal-crossing, E = n K(w) with K(w0) = 0, so Psi is the
      deterministic Psi_K of the normal-crossing check; its ELBO is that of exp(-E) phi (no
      constant)."""
    if target.n is None:
        return LogLikelihood("energy", 1, 1.0, 0.0)
    task = getattr(target, "task", None)
    if task == "classification":
        return LogLikelihood("categorical", target.n, 1.0, 0.0)
    if task == "regression":
        if not sigma > 0:
            raise ValueError(f"sigma must be > 0, got {sigma}")
        log_norm = 0.5 * target.y.shape[-1] * math.log(2 * math.pi * sigma**2)  # per point
        return LogLikelihood("gaussian", target.n, 1 / (2 * sigma**2), log_norm)
    raise ValueError(f"{target.name}: no likelihood reading for a target with n but no task")


def log_normal(w: Tensor, mean, std) -> Tensor:
    """[C]: log N(w; mean, std^2 I), ``mean`` and ``std`` scalars or [d]."""
    mean, std = (torch.as_tensor(v, dtype=w.dtype, device=w.device) for v in (mean, std))
    z = (w - mean) / std
    return (-0.5 * (LOG_2PI + z * z) - std.log().expand_as(w)).sum(-1)


@dataclass
class PsiEstimate:
    """One Monte Carlo estimate (``psi_estimate``); tensors keep their graph for training.

    psi = -n_k + log_prior + log_det + entropy     (None where the target has no w0)
    elbo = log_lik + log_prior + log_det + entropy, and psi = elbo + n_s on the full data.
    ``value`` is what ``fit`` maximises and plots: psi, or the ELBO where psi is None."""

    value: Tensor
    psi: Tensor | None
    elbo: Tensor
    log_lik: Tensor  # E_q sum_i log p(y_i | x_i, G(xi)), n / B times the batch's sum
    n_k: Tensor | None  # E_q n K_n(G(xi)), on the same points at G(xi) and at w0
    log_prior: Tensor  # E_q log phi(G(xi))
    log_det: Tensor  # E_q log|G'(xi)|
    entropy: Tensor  # H(q), analytic
    n_s: float | None  # n S_n = -sum_i log p(y_i | x_i, w0), full data only (batch None)
    # Monte Carlo standard error of ``value`` over the draws (the entropy is exact); on all n
    # points only (the final estimate): a minibatch step would pay a host sync for nothing
    se: float | None


def psi_estimate(
    target,
    source: nn.Module,
    flow: nn.Module,
    prior_mean,
    prior_std,
    samples: int,
    generator: torch.Generator | None,
    batch=None,
    sigma: float = 1.0,
) -> PsiEstimate:
    """Psi = E_q[-n K_n(G(xi))] + E_q[log phi(G(xi)) + log|G'(xi)|] + H(q) (the paper's eqs. 2-3)
    over ``samples`` draws xi ~ q, the draws batched as the target's chains. phi = N(prior_mean,
    prior_std^2 I): the paper's prior pairs such as (5, 100) are (mean, VARIANCE), so
    (5, 100) is prior_std = 10 (the paper's code takes --prior_dist "mean and variance").

    n K_n(w) = sum_i [log p(y_i | x_i, w0) - log p(y_i | x_i, w)] (``log_likelihood_scale``),
    both terms on the same ``batch`` (None: all n points), so the w0 term cancels the data's
    noise and a minibatch estimate stays unbiased. Without a truth w0 there is no n S_n: psi is
    None and ``value`` is the ELBO. A prior the target defines itself (normal-crossing's
    prior_std, an MLP's) is not used: phi is this one."""
    if not (torch.as_tensor(prior_std) > 0).all():
        raise ValueError(f"prior_std must be > 0, got {prior_std}")
    lik = log_likelihood_scale(target, sigma)
    xi = source.rsample(samples, generator)
    w, log_det = flow(xi)
    w0 = None if target.w0 is None else target.w0.to(w)[None]
    log_lik_all = lik(target, w if w0 is None else torch.cat([w, w0]), batch)
    log_lik = log_lik_all[:samples]
    log_prior = log_normal(w, prior_mean, prior_std)
    entropy = source.entropy().to(w)
    rest = log_prior.mean() + log_det.mean() + entropy
    se = None
    if batch is None:
        per_draw = (log_lik if w0 is None else log_lik - log_lik_all[samples]) + log_prior
        per_draw = per_draw + log_det
        se = per_draw.detach().std().item() / math.sqrt(samples) if samples > 1 else math.inf
    elbo = log_lik.mean() + rest
    psi = n_k = n_s = None
    if w0 is not None:
        n_k = (log_lik_all[samples] - log_lik).mean()
        psi = -n_k + rest
        if batch is None:
            n_s = -log_lik_all[samples].item()
    return PsiEstimate(
        psi if psi is not None else elbo,
        psi,
        elbo,
        log_lik.mean(),
        n_k,
        log_prior.mean(),
        log_det.mean(),
        entropy,
        n_s,
        se,
    )


@dataclass
class FitResult:
    """``curve``: per epoch, the mean of its minibatch estimates of Psi (the ELBO without w0).
    ``psi``, ``elbo``, ``n_s``: the final full-data estimate with ``final_samples`` draws and the
    analytic entropy (None when the fit diverged). ``epochs``: completed epochs. ``diverged``:
    a non-finite objective or gradient, or an update that left the source degenerate (lambda, k
    or beta at 0 or inf), stopped the fit in epoch ``diverged_epoch`` (1-based); that step's
    update is not kept, so the parameters are the last usable ones. ``stopped``: the
    ``on_epoch`` callback asked to stop."""

    curve: list[float]
    psi: float | None
    elbo: float | None
    n_s: float | None
    final: PsiEstimate | None
    epochs: int
    steps: int
    diverged: bool = False
    diverged_epoch: int | None = None
    stopped: bool = False
    seconds: float = 0.0


def param_groups(source: nn.Module, flow: nn.Module, lr_flow, lr_k, lr_lambda_beta) -> list[dict]:
    """Adam's groups (the paper's Sec. 7): the flow's weights and k at 1e-3, lambda and
    beta (a learned Gaussian's mean and log variance too) at 1e-1; frozen parameters left out."""
    k = [p for name, p in source.named_parameters() if name == "log_k" and p.requires_grad]
    other = [p for name, p in source.named_parameters() if name != "log_k" and p.requires_grad]
    weights = [p for p in flow.parameters() if p.requires_grad]
    groups = [(weights, lr_flow), (k, lr_k), (other, lr_lambda_beta)]
    return [{"params": params, "lr": lr} for params, lr in groups if params]


def epoch_batches(target, batch_fraction: float, generator: torch.Generator) -> list:
    """One epoch's minibatches: a random permutation of the n points cut into batches of
    round(n * batch_fraction) (the last one may be smaller), drawn without replacement. A
    potential has no data: round(1 / batch_fraction) full evaluations (batch None), so an
    epoch is as many steps as on a network."""
    if not 0 < batch_fraction <= 1:
        raise ValueError(f"batch_fraction must be in (0, 1], got {batch_fraction}")
    if target.n is None:
        return [None] * max(1, round(1 / batch_fraction))
    size = max(1, round(target.n * batch_fraction))
    order = torch.randperm(target.n, generator=generator).to(target.device)
    return [target.batch(index) for index in order.split(size)]


def _finite(value: Tensor, params: list[Tensor]) -> bool:
    """The objective and every gradient finite: safe to step (one check, one host sync)."""
    grads = [p.grad.reshape(-1) for p in params if p.grad is not None]
    return bool(torch.isfinite(torch.cat([value.reshape(1).detach(), *grads])).all())


def _usable(source: nn.Module, params: list[Tensor]) -> bool:
    """The source's parameters finite and its entropy too: lambda, k and beta (exp of the
    stored logs) are neither 0 nor inf, so it can still be sampled. (An Adam step from finite
    gradients moves each weight by at most about its learning rate: the flow stays finite.)"""
    with torch.no_grad():
        finite = bool(torch.isfinite(torch.cat([p.reshape(-1) for p in params])).all())
        return finite and bool(torch.isfinite(source.entropy()))


def _adam_step(optimiser, value: Tensor, params: list[Tensor], source: nn.Module, own) -> bool:
    """One Adam step up ``value``; False, with nothing kept, when the objective or a gradient is
    not finite or the update left the source degenerate (``own``: its learnable parameters)."""
    if torch.isfinite(value):
        (-value).backward()
    if not _finite(value, params):
        return False
    last = parameters_to_vector(params).detach()  # one copy, to undo a bad step
    optimiser.step()
    if own and not _usable(source, own):  # e.g. beta = exp(log beta) overflowed
        with torch.no_grad():
            vector_to_parameters(last, params)
        return False
    return True


def fit(
    target,
    source: nn.Module,
    flow: nn.Module,
    *,
    prior_mean,
    prior_std,
    epochs: int,
    batch_fraction: float = 0.1,
    samples: int = 5,
    lr_flow: float = 1e-3,
    lr_k: float = 1e-3,
    lr_lambda_beta: float = 1e-1,
    generator: torch.Generator,
    on_epoch=None,
    sigma: float = 1.0,
    final_samples: int = 100,
) -> FitResult:
    """Maximise Psi (the ELBO without w0) over the flow and the source's learnable parameters
    with Adam (``param_groups``), ``samples`` draws per step on minibatches of n *
    ``batch_fraction`` without replacement (the paper's Sec. 7: M = 5, n / 10, so 10 steps
    an epoch). ``on_epoch(epoch, value) -> bool`` sees each epoch's mean objective (a live curve)
    and stops the fit by returning True. A NaN or Inf objective or gradient, or an update that
    leaves the source degenerate, stops it with ``diverged`` set; nothing raises. The end: Psi
    on all n points with ``final_samples`` draws and the analytic entropy (the paper's
    final evaluation, Sec. 7). One host sync a step (the finiteness check): CPU-sized work."""
    start = time.perf_counter()
    groups = param_groups(source, flow, lr_flow, lr_k, lr_lambda_beta)
    params = [p for g in groups for p in g["params"]]
    own = [p for p in source.parameters() if p.requires_grad]  # what a step can make degenerate
    optimiser = torch.optim.Adam(groups, foreach=True)  # one kernel per group: ~1 ms a step less
    curve: list[float] = []
    steps, diverged_epoch, stopped = 0, None, False
    for epoch in range(1, epochs + 1):
        total, count = 0.0, 0
        for batch in epoch_batches(target, batch_fraction, generator):
            optimiser.zero_grad()
            value = psi_estimate(
                target, source, flow, prior_mean, prior_std, samples, generator, batch, sigma
            ).value
            if not _adam_step(optimiser, value, params, source, own):
                diverged_epoch = epoch
                break
            steps += 1
            total, count = total + value.item(), count + 1
        if diverged_epoch is not None:
            break
        curve.append(total / count)
        if on_epoch is not None and on_epoch(epoch, curve[-1]):
            stopped = True
            break
    final = None
    if diverged_epoch is None:
        with torch.no_grad():
            final = psi_estimate(
                target, source, flow, prior_mean, prior_std, final_samples, generator, None, sigma
            )
        if not torch.isfinite(final.value):
            diverged_epoch, final = len(curve), None
    return FitResult(
        curve,
        psi=None if final is None or final.psi is None else final.psi.item(),
        elbo=None if final is None else final.elbo.item(),
        n_s=None if final is None else final.n_s,
        final=final,
        epochs=len(curve),
        steps=steps,
        diverged=diverged_epoch is not None,
        diverged_epoch=diverged_epoch,
        stopped=stopped,
        seconds=time.perf_counter() - start,
    )
