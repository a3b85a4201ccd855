"""RMSProp-SGLD (pSGLD; Hitchcock & Hoogland 2025, Alg. 3), and the preconditioner Adam-SGLD shares.

Notation as in the paper: eps = step_size, g = minibatch mean loss gradient (raw: no nbeta, no
prior), grad U = nbeta g + localization (w - w0) + prior, eta = the step's N(0, I) draw (``xi``).
Typos fixed (docs/methods/local-sampling.md): eps_t[i] uses v_hat[i]; bias corrections use the
exponent t + 1; v starts at 1.

RMSProp- and Adam-SGLD precondition with a metric G(w) = diag(eps_t) that changes with the chain,
and Langevin dynamics in such a metric needs the drift correction Gamma_i = sum_j dG_ij/dw_j to
sample exp(-U). The papers (and devinterp) drop it, and so do these kernels, so they are biased: on
the quadratic test of docs/methods/local-sampling.md (E[nbeta L] = 1.4988) RMSProp-SGLD gives 1.661
at eps = 1e-6 and 1.756 at 3e-7, Adam-SGLD 1.624 at 1e-6 (tests/test_kernels.py pins these). The
bias grows as the step shrinks, the opposite of a discretisation error, so a smaller step does not
remove it. Runs with them carry the warning ``DROPPED_GAMMA``.

``sgrld`` with ``metric=rmsprop`` (Yu et al.) is a different estimator of the same kind of
metric, kept apart on purpose: it adapts on g = grad U / n (nbeta, localization and prior
included), starts V at 0 without bias correction, and steps with h n G^-1 g, sqrt(2h) G^-1/2.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from .base import Kernel, State
from .integrators import all_accepted, overdamped
from .spec import EMA_RATE, P000, SG, STABILITY, KernelSpec, Param, aligned, kernel_spec

DROPPED_GAMMA = (
    "this preconditioned kernel drops the metric's divergence term (Gamma), as the papers do, so "
    "it samples a biased law even at small steps (the bias grows as the step shrinks: on the "
    "reference quadratic, E[nbeta L] = 1.66 at step 1e-6 and 1.76 at 3e-7 against 1.50); an LLC "
    "from it can be off by 10-20%: compare with sgld"
)


@dataclass
class PreconditionerState(State):
    v: Tensor  # [C, d] EMA of the squared gradient
    t: Tensor  # [C, 1] steps taken: a tensor, so a compiled chunk carries the exponent
    m: Tensor | None = None  # [C, d] EMA of the gradient (Adam)


def preconditioned(eps: float, state: PreconditionerState, b: float, a: float) -> Tensor:
    """[C, d] eps / (sqrt(v_hat) + a) with the state's v (bias-corrected as a step would, from
    t = 1: before any step v is the initial 1)."""
    v_hat = state.v / (1 - b ** state.t.clamp(min=1))
    return eps / (v_hat.sqrt() + a)


def preconditioned_spec(name: str, algorithm: int, rates: list[Param], **declared) -> KernelSpec:
    """A preconditioned SGLD's declaration: an sgmcmc kernel of Hitchcock & Hoogland
    (their Alg. ``algorithm``) taking SGLD's hyperparameters, the stability constant a, then its EMA
    ``rates``; ``declared``: the rest of ``kernel_spec``'s (equation, text)."""
    paper = f"{P000}, Alg. {algorithm}"
    return kernel_spec(name, "sgmcmc", paper, [*SG, STABILITY, *rates], **declared)


class Preconditioned(Kernel):
    """What RMSProp- and Adam-SGLD share: a per-coordinate step eps_t adapted on minibatches of
    the raw loss gradient (v starts at 1, t at 0). The metric's divergence term Gamma is
    dropped, as the papers do (``DROPPED_GAMMA``): the chains sample a biased law, and the bias
    grows as the step shrinks (module doc)."""

    uses_loss_grad = True  # it adapts on grad L
    minibatch = True
    caveats = {"dropped_gamma": DROPPED_GAMMA}

    def start(self, state, target, generator):
        w = state.position
        return PreconditionerState(
            **vars(state), v=torch.ones_like(w), t=w.new_zeros(w.shape[0], 1)
        )


class RMSPropSGLD(Preconditioned):
    """v = b v + (1-b) g^2,  v_hat = v / (1 - b^(t+1)),  eps_t = eps / (sqrt(v_hat) + a),
    Delta w = -(eps_t/2) grad U + sqrt(eps_t) eta                              (Alg. 3).
    Gamma dropped, biased as the step shrinks (``Preconditioned``)."""

    SPEC = preconditioned_spec(
        "rmsprop-sgld",
        3,
        [Param("b", "float", 0.99, "EMA rate b of the squared gradient", *EMA_RATE)],
        equation=aligned(
            r"v_t = b\,v_{t-1} + (1 - b)\,g_t^2,\quad v_{-1} = 1",
            r"\hat v_t = v_t / (1 - b^{\,t+1}),\quad \varepsilon_t = \varepsilon \,/\,"
            r"(\sqrt{\hat v_t} + a)",
            r"w_{t+1} = w_t - \tfrac{\varepsilon_t}{2} \odot \nabla U(w_t)"
            r" + \sqrt{\varepsilon_t} \odot \eta_t",
        ),
        text="Preconditioned SGLD (pSGLD, Li et al. 2016), Alg. 3 of the local posterior sampling "
        "benchmark (Hitchcock & Hoogland): a per-coordinate step size eps_t from an RMSProp "
        "average of the squared raw loss gradient, so flat directions take long steps and "
        "steep ones short steps. Typos fixed as the benchmark's reference notes say (eps_t[i] "
        "uses v_hat[i], bias correction with exponent t+1, v starts at 1). The drift term of "
        "the changing metric (Gamma) is dropped, as in the paper, so the chain samples a biased "
        "law that a smaller step does not fix: on the benchmark's quadratic (E[nβL] = 1.50) it "
        "gives 1.66 at step 1e-6 and 1.76 at 3e-7. Runs with it carry a warning.",
    )

    def update(self, state, target, batch, noise):
        e = self.energy(state.position, state, target, batch)
        t = state.t + 1
        v = self.b * state.v + (1 - self.b) * e.loss_grad**2
        v_hat = v / (1 - self.b**t)
        eps_t = self.step_size / (v_hat.sqrt() + self.a)
        w = overdamped(state.position, e.grad, eps_t, noise["xi"])
        return replace(state, position=w, v=v, t=t), e.loss, all_accepted(state)

    def langevin_step(self, state):
        return preconditioned(self.step_size, state, self.b, self.a)
