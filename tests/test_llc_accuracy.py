"""LLC estimates on normal crossings against exact finite-n values by quadrature
(docs/methods/vi.md): the value nbeta (E[L] - L(0)) converges to at t = n is t E_t[K], computed by
``NormalCrossing.llc_at``, independently of any sampler.

SGLD and RMSProp-SGLD are biased by O(eps) at a finite step, so each estimate is Richardson-
extrapolated from steps eps and eps/2 (2 lambda(eps/2) - lambda(eps)); the tolerance is four
standard errors of that combination (chains are independent) plus 2% for the O(eps^2) remainder
(on the quadratic parts the bias is exactly 1 / (1 - eps k / 4), whose remainder at these steps
is under 1%).

Both steps run as one eager run of 2 x CHAINS chains (``lams``): each half reads the draws a
CHAINS-chain run from seed 0 reads and steps at its own step size, so each estimate is the one
its own run would give (to float rounding), at the per-step cost of one small run and without
the two compiles (~8 s each) the compiled path paid per step size; tests/test_compiled_agree.py
checks that compiled and eager runs agree.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from repeated_noise import Repeated

import landscapes
import samplers
from samplers import llc
from samplers.base import Noise

CHAINS = 128


def lams(sampler: str, k, form: str, n: int, step_sizes, steps: int, **params):
    """The LLC estimate at each of ``step_sizes`` and the target, from one eager run of CHAINS
    chains per size: each size's chains read the draws of a CHAINS-chain run from seed 0
    (``Repeated``) and step at that size (a per-chain step: it broadcasts in ``overdamped``, and
    in RMSProp-SGLD's eps_t)."""
    target = landscapes.make("normal-crossing", k=k, form=form, n=n, device="cpu", dtype="float64")
    g = torch.Generator().manual_seed(0)
    kernel = samplers.make(sampler, step_size=step_sizes[0], **params)
    sizes = len(step_sizes)
    state = kernel.init(target.w0.expand(CHAINS * sizes, -1).clone(), target, g)
    noise = Noise(kernel.draws(target, CHAINS, target.dim), g, state.position.dtype)
    eps = torch.tensor(step_sizes, dtype=state.position.dtype).repeat_interleave(CHAINS)
    kernel.step_size = eps[:, None].expand(-1, target.dim)  # [sizes x CHAINS, d]
    _, info = kernel.run(state, target, Repeated(noise, CHAINS, sizes), steps)
    estimates = []
    for loss in info.loss.numpy().reshape(steps, sizes, CHAINS).transpose(1, 0, 2):
        estimates.append(llc.estimate(loss, 0.0, 1.0, burn_in=steps // 4))
        assert estimates[-1].nan_chains == 0
    return estimates, target


CASES = [
    ((1,), "product"),  # d = 1: w^2, regular
    ((1, 2), "product"),  # d = 2: w1^2 w2^4, lambda 1/4
    ((1, 1, 1), "sum"),  # d = 3: regular, lambda 3/2
    ((1, 2, 1, 2), "sum"),  # d = 4: lambda 1/2 + 1/4 + 1/2 + 1/4
]


def check(sampler, k, form, eps, steps, **params):
    (coarse, fine), target = lams(sampler, k, form, 1000, (eps, eps / 2), steps, **params)
    extrapolated = 2 * fine.mean - coarse.mean
    se = (4 * fine.se**2 + coarse.se**2) ** 0.5
    exact = target.llc_at(1.0)
    assert abs(extrapolated - exact) < 4 * se + 0.02 * exact, (extrapolated, exact, se)


@pytest.mark.slow
@pytest.mark.parametrize("k, form", CASES)
def test_sgld_llc_matches_quadrature(k, form):
    check("sgld", k, form, 2e-4, 16_000)


@pytest.mark.slow
@pytest.mark.parametrize("k, form", CASES)
def test_rmsprop_sgld_llc_matches_quadrature(k, form):
    # b close to 1: pSGLD has no Gamma (divergence) term, so it is exact only when its
    # preconditioner varies slowly against the mixing time; at b = 0.99 it tracks the chain's
    # own excursions and biases the estimate up (by 20-150% here, growing as eps shrinks).
    check("rmsprop-sgld", k, form, 2e-3, 16_000, b=0.9999)


@pytest.mark.slow
def test_llc_orders_normal_crossings_like_their_rlcts():
    # lambda(w1^2 w2^6) = 1/6 < lambda(w1^2 w2^4) = 1/4 < lambda(w1^2) = 1/2 < lambda(w1^2+w2^2) = 1
    potentials = [((1, 3), "product"), ((1, 2), "product"), ((1, 0), "product"), ((1, 1), "sum")]
    estimates = [lams("sgld", k, form, 1000, (1e-4,), 8000)[0][0] for k, form in potentials]
    for low, high in itertools.pairwise(estimates):
        assert low.mean + 3 * low.se < high.mean - 3 * high.se
