"""The eager step's shortcuts give what the plain formulations gave (issue 58): divergence
containment with masked_fill and cached field names, per-step Infos stacked at once, and the
targets' eager forms (the banana's gradient assembled with torch.cat, the polynomial's constants
kept), all to the last bit."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

import landscapes
import samplers
from samplers.base import Info, contain, stack_infos, stack_steps
from samplers.integrators import MHState


def _contain_as_written(old, new, loss, accepted, scalars):
    """samplers.base.contain as it was written before issue 58: torch.where throughout."""

    def finite(state):
        ok = torch.ones_like(state.diverged)
        for name in ("position", "U", "grad", "loss"):
            value = getattr(state, name)
            ok = ok & torch.isfinite(value.reshape(value.shape[0], -1)).all(-1)
        return ok

    diverged = old.diverged | ~finite(new) | ~torch.isfinite(loss)
    kept = {
        name: torch.where(
            diverged.reshape(-1, *[1] * (getattr(new, name).ndim - 1)),
            getattr(old, name),
            getattr(new, name),
        )
        for name in ("position", "U", "grad", "loss")
    }
    nan = torch.full_like(loss, math.nan)
    info = Info(
        loss=torch.where(diverged, nan, loss),
        accepted=torch.where(diverged, torch.zeros_like(accepted), accepted),
        diverged=diverged,
        scalars={k: torch.where(diverged, nan, v) for k, v in scalars.items()},
    )
    return replace(new, diverged=diverged, **kept), info


def _state(seed: int) -> MHState:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(6, 3, generator=g)
    return MHState(w, w.clone(), torch.zeros(6, dtype=torch.bool), w.sum(-1), w * 2, w[:, 0])


def test_containment_freezes_and_flags_as_the_plain_formulation():
    old, new = _state(0), _state(1)
    old.diverged[5] = True  # diverged before this step
    new.position[1, 2] = math.nan
    new.grad[2, 0] = math.inf
    loss = torch.randn(6)
    loss[3] = -math.inf
    accepted = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    scalars = {
        "kinetic": torch.randn(6),  # as the loss: masked_fill
        "wide": torch.randn(6, dtype=torch.float64),  # keeps its own, wider dtype
        "count": torch.arange(6),  # an integer: promoted to the loss's dtype, as torch.where does
    }
    frozen, info = contain(old, new, loss, accepted, scalars)
    want, want_info = _contain_as_written(old, new, loss, accepted, scalars)
    assert info.diverged.tolist() == [False, True, True, True, False, True]
    for name in ("position", "center", "diverged", "U", "grad", "loss"):
        torch.testing.assert_close(getattr(frozen, name), getattr(want, name), rtol=0, atol=0)
    assert type(frozen) is MHState
    for name in ("loss", "accepted", "diverged"):
        got, expected = getattr(info, name), getattr(want_info, name)
        assert got.dtype == expected.dtype
        torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)
    for name, value in want_info.scalars.items():
        assert info.scalars[name].dtype == value.dtype, name
        torch.testing.assert_close(info.scalars[name], value, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("trace", [False, True])
def test_per_step_infos_stack_as_stack_infos_stacks_them(trace):
    target = landscapes.make("banana", dtype="float64")
    kernel = samplers.make("hmc" if trace else "sgnht", step_size=0.05)
    g = torch.Generator().manual_seed(3)
    state = kernel.init(target.exact_sample(g, 5), target, g)
    noise = kernel.noise_for(state, target, g).take(7)
    infos = []
    for t in range(7):
        state, info = kernel.step(state, target, {k: v[t] for k, v in noise.items()}, trace)
        info.position = state.position
        infos.append(info)
    got, want = stack_steps(infos), stack_infos(infos)
    for name in ("loss", "accepted", "diverged", "position", "proposal", "path"):
        a, b = getattr(got, name), getattr(want, name)
        assert (a is None) == (b is None), name
        if a is not None:
            assert a.shape[:2] == (7, 5)
            torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    assert got.scalars.keys() == want.scalars.keys()
    for name, value in want.scalars.items():
        torch.testing.assert_close(got.scalars[name], value, rtol=0, atol=0)


def test_the_bananas_eager_gradient_is_its_compiled_form():
    target = landscapes.make("banana", dtype="float64")
    w = target.exact_sample(torch.Generator().manual_seed(0), 9)
    loss, grad = target.loss_and_grad(w)
    r0, r1, s0, s1 = target._whitened(w)
    g0, g1 = target.pullback(w[:, :1], w[:, 1:], s0, s1)
    mask = torch.arange(2) == 0  # the compiled form's column mask
    assert torch.equal(grad, torch.where(mask, g0, g1))
    assert torch.equal(loss, target._energy(r0, r1, s0, s1))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_polynomials_kept_constants_give_its_plain_loss_and_gradient(dtype):
    target = landscapes.make("polynomial", powers=(2, 0, 1, 3), n=300, seed=4, dtype=dtype)
    target = target.first(200)  # the data changed: its moments are recomputed
    w = torch.randn(5, 4, generator=torch.Generator().manual_seed(1)).to(target.dtype)
    w[0, 1] = 0.0  # a zero coordinate: no division anywhere
    loss, grad = target.loss_and_grad(w)
    m = target._moments((target.x, target.y))
    xx, xy, yy = m[..., 0, 0], m[..., 0, 1], m[..., 1, 1]
    terms = w**target.powers
    coef = terms.prod(-1)
    torch.testing.assert_close(loss, coef * (coef * xx - 2 * xy) + yy, rtol=0, atol=0)
    ones = torch.ones_like(coef)[:, None]
    before = torch.cat([ones, terms[:, :-1]], 1).cumprod(1)
    after = torch.cat([terms[:, 1:], ones], 1).flip(1).cumprod(1).flip(1)
    p = target.powers
    slope = torch.where(p > 0, p * w ** (p - 1).clamp(min=0), 0)
    want = (2 * (coef * xx - xy))[:, None] * slope * before * after
    torch.testing.assert_close(grad, want, rtol=0, atol=0)
