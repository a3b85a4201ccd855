"""VI via resolution of singularities (samplers/vi.py, reference 004): the sources against
scipy's distributions, quadrature and Monte Carlo; the flow's log|det| against autograd's
Jacobian; section 5(A)'s table, slopes and bound against the reference and a second quadrature."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from jobs.worker import torch_threads
from samplers import vi

F64 = torch.float64
Z_SE = 5.0  # Monte Carlo tolerance in standard errors: fixed seeds, so deterministic anyway

# Three coordinates that cover h < 0 (a pole at 0), h = 0 and h > 0, and k below and above 1.
LAM, K, BETA = [0.5, 1.0, 2.5], [0.6, 2.0, 1.0], [2.0, 3.0, 0.5]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Every test here is small torch work, which a second thread slows down many times on a
    2-core machine (jobs.worker.torch_threads); the count is restored after the module."""
    with torch_threads(1):
        yield


def _gg(lam=LAM, k=K, beta=BETA, **kw):
    return vi.GeneralizedGamma(lam, k, beta, dtype=F64, **kw)


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _scipy_abs(j):
    """|xi_j| ~ scipy's gengamma(a = lambda, c = 2k, scale = beta^(-1/2k)): V = |xi|^(2k) is
    Gamma(lambda, rate beta), the paper's sampling recipe."""
    return stats.gengamma(a=LAM[j], c=2 * K[j], scale=BETA[j] ** (-1 / (2 * K[j])))


# -- (a) sources ------------------------------------------------------------------------------


def test_gamma_draws_are_torch_gamma_rsample_draws_from_the_generator():
    # rsample runs Gamma.rsample seeded by a draw from the caller's generator: that seed on
    # the global RNG gives Gamma(lambda, beta).rsample's draws exactly, so the law is torch's,
    # and the global RNG is left as it was.
    q = _gg()
    before = torch.random.get_rng_state()
    xi = q.rsample(1000, _gen(7))
    assert torch.equal(torch.random.get_rng_state(), before)
    seed = int(torch.randint(2**62, (1,), generator=_gen(7)))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        v = torch.distributions.Gamma(q.lam, q.beta).rsample((1000,))
    assert torch.allclose(xi.abs(), v ** (1 / (2 * q.k)), rtol=1e-14, atol=0)
    assert torch.equal(xi, q.rsample(1000, _gen(7)))  # reproducible
    assert not torch.equal(xi, q.rsample(1000, _gen(8)))
    signs = (xi > 0).double().mean(0)  # a fair random sign: 1000 draws, SE 0.016
    assert ((signs - 0.5).abs() < Z_SE * 0.5 / math.sqrt(1000)).all()


def test_gamma_log_prob_entropy_and_moments_match_scipy_gengamma():
    q = _gg()
    x = torch.tensor([[0.03, 0.4, 1.7], [-0.9, -0.01, 2.5], [1.2, -1.3, -0.2]], dtype=F64)
    ref = sum(_scipy_abs(j).logpdf(x[:, j].abs().numpy()) - math.log(2) for j in range(3))
    assert q.log_prob(x).detach().numpy() == pytest.approx(ref, abs=1e-12)
    ref_h = sum(_scipy_abs(j).entropy() + math.log(2) for j in range(3))
    assert q.entropy().item() == pytest.approx(ref_h, abs=1e-10)
    for p in (1, 2, 3, 4):
        ref_m = [_scipy_abs(j).moment(p) for j in range(3)]
        assert q.moment(p).detach().numpy() == pytest.approx(ref_m, rel=1e-10)


def test_gamma_density_integrates_to_one_and_entropy_by_quadrature():
    # Independent of scipy's gengamma: 1-D quadrature of the module's own log_prob over R.
    for j in range(3):
        q = vi.GeneralizedGamma(LAM[j], K[j], BETA[j], dtype=F64)

        def dens(x, q=q):
            return math.exp(q.log_prob(torch.tensor([[x]], dtype=F64)).item())

        def neg_q_log_q(x, q=q):
            lp = q.log_prob(torch.tensor([[x]], dtype=F64)).item()
            return -math.exp(lp) * lp

        mass = 2 * sum(integrate.quad(dens, a, b, limit=200)[0] for a, b in ((0, 1), (1, np.inf)))
        ent = 2 * sum(
            integrate.quad(neg_q_log_q, a, b, limit=200)[0] for a, b in ((0, 1), (1, np.inf))
        )
        assert mass == pytest.approx(1.0, abs=1e-8)
        assert q.entropy().item() == pytest.approx(ent, abs=1e-7)


def test_gamma_samples_match_analytic_moments_and_entropy():
    q = _gg()
    xi = q.rsample(200_000, _gen(0))
    n = xi.shape[0]
    for p in (-0.3, 1.0, 2.0, 4.0):  # p > -2 k lambda = -0.6 on the first coordinate
        a = xi.abs() ** p
        se = a.std(0) / math.sqrt(n)
        assert ((a.mean(0) - q.moment(p)).abs() < Z_SE * se).all(), p
    se_mean = xi.std(0) / math.sqrt(n)
    assert (xi.mean(0).abs() < Z_SE * se_mean).all()  # the sign makes the law symmetric
    lq = q.log_prob(xi)
    assert (-lq.mean() - q.entropy()).abs() < Z_SE * lq.std() / math.sqrt(n)


def test_gamma_rsample_gradients_match_closed_form_and_common_random_numbers():
    """d/dtheta E sum_j c_j |xi_j|^p for theta = log lambda, log k, log beta. The pathwise
    (implicit) gradient of the Monte Carlo mean must match central differences of the closed-form
    moment within MC error (batches give the SE). For k and beta the draws are smooth in the
    parameter with common random numbers (the standard gammas depend on lambda only), so central
    differences of the MC mean itself must match autograd to rounding. For lambda they are not:
    torch's gamma sampler is a rejection sampler, and a shift of lambda changes which proposals
    are kept, so common random numbers only apply to k and beta."""
    c, p = torch.tensor([1.0, 0.7, 1.3], dtype=F64), 1.5

    def expected(q):
        return (c * q.moment(p)).sum()

    q = _gg()
    params = {"lam": q.log_lam, "k": q.log_k, "beta": q.log_beta}
    batches, size = 16, 8_000
    grads = {name: [] for name in params}
    for b in range(batches):
        f = (c * q.rsample(size, _gen(100 + b)).abs() ** p).sum(-1).mean()
        gs = torch.autograd.grad(f, list(params.values()))
        for name, g in zip(params, gs, strict=True):
            grads[name].append(g)
    h = 1e-5
    for name, param in params.items():
        g = torch.stack(grads[name])
        mean, se = g.mean(0), g.std(0) / math.sqrt(batches)
        fd = torch.zeros(3, dtype=F64)
        for j in range(3):
            with torch.no_grad():
                param[j] += h
                up = expected(q)
                param[j] -= 2 * h
                down = expected(q)
                param[j] += h
            fd[j] = (up - down) / (2 * h)
        assert ((mean - fd).abs() < Z_SE * se).all(), (name, mean, fd, se)
        assert (se < 0.05 * fd.abs()).all()  # the check has teeth: SE well below the value

    def mc_mean(seed=5):
        return (c * q.rsample(20_000, _gen(seed)).abs() ** p).sum(-1).mean()

    for param in (q.log_k, q.log_beta):
        (g,) = torch.autograd.grad(mc_mean(), param)
        for j in range(3):
            with torch.no_grad():
                param[j] += h
                up = mc_mean()
                param[j] -= 2 * h
                down = mc_mean()
                param[j] += h
            assert ((up - down) / (2 * h)).item() == pytest.approx(g[j].item(), rel=1e-7)


def test_paper_init_holds_beta_one_at_n_and_the_flag_freezes():
    q = vi.GeneralizedGamma.paper_init(3, n=5000, lambda0=10.0, k0=5.0, beta0=100.0, dtype=F64)
    assert q.lam.tolist() == pytest.approx([1.0, 10.0, 10.0])
    assert q.k.tolist() == pytest.approx([5.0, 5.0, 5.0])
    assert q.beta.tolist() == pytest.approx([5000.0, 100.0, 100.0])
    (q.entropy() + q.moment(1.0).sum()).backward()
    assert q.log_beta.grad[0] == 0 and (q.log_beta.grad[1:] != 0).all()
    with torch.no_grad():
        q.log_beta.add_(1.0)  # an optimiser step cannot move beta_1
    assert q.beta[0].item() == 5000.0
    frozen = vi.GeneralizedGamma.paper_init(3, 5000, 10.0, 5.0, learn=False)
    assert not any(p.requires_grad for p in frozen.parameters())


def test_gaussian_source_against_scipy_and_as_a_special_gamma():
    q = vi.GaussianSource(3, mean=[0.0, 0.5, -1.0], var=[1.0, 0.2, 2.0], dtype=F64)
    ref = [stats.norm(m, math.sqrt(v)) for m, v in ((0.0, 1.0), (0.5, 0.2), (-1.0, 2.0))]
    x = torch.tensor([[0.1, -0.3, 2.0], [1.5, 0.5, -1.0]], dtype=F64)
    lp = sum(r.logpdf(x[:, j].numpy()) for j, r in enumerate(ref))
    assert q.log_prob(x).numpy() == pytest.approx(lp, abs=1e-12)
    assert q.entropy().item() == pytest.approx(sum(r.entropy() for r in ref), abs=1e-12)
    for p in (0, 2, 4, 6):
        assert q.moment(p).numpy() == pytest.approx([r.moment(p) for r in ref], rel=1e-12)
    with pytest.raises(ValueError, match="even"):
        q.moment(3)
    xi = q.rsample(100_000, _gen(1))
    assert torch.equal(xi, q.rsample(100_000, _gen(1)))
    se = xi.std(0) / math.sqrt(xi.shape[0])
    assert ((xi.mean(0) - q.mean).abs() < Z_SE * se).all()
    assert not any(p.requires_grad for p in q.parameters())  # fixed unless learn=True
    g = vi.GaussianSource.like_gamma(2, lambda0=10.0, beta0=100.0)
    assert g.mean.tolist() == pytest.approx([0.1, 0.1]) and g.var.tolist() == pytest.approx(
        [1e-3, 1e-3]
    )
    # lambda = 1/2, k = 1, beta = 1/(2 v) is N(0, v): the gen-gamma family contains the
    # centred Gaussians, which is why its sup Psi is never below the Gaussian's at mean 0.
    v = torch.tensor([0.3, 2.0], dtype=F64)
    gg = vi.GeneralizedGamma(0.5, 1.0, 1 / (2 * v), dtype=F64)
    n01 = vi.GaussianSource(2, 0.0, v, dtype=F64)
    assert gg.entropy().item() == pytest.approx(n01.entropy().item(), abs=1e-12)
    assert gg.moment(4.0).tolist() == pytest.approx(n01.moment(4).tolist(), rel=1e-12)


# -- (b) the flow ---------------------------------------------------------------------------


def _random_flow(d, seed):
    """nn.Linear's default initialisation, seeded without touching the global RNG's state: a
    flow far from the identity."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return vi.Flow(d, identity_init=False).double()


@pytest.mark.parametrize("d", [1, 2, 3, 5])
def test_flow_log_det_is_the_jacobian_log_det_and_the_inverse_inverts(d):
    flow = _random_flow(d, seed=d)
    xi = torch.randn(4, d, generator=_gen(d), dtype=F64) * 1.5
    w, logdet = flow(xi)
    for i in range(4):
        jac = torch.autograd.functional.jacobian(lambda x: flow(x[None])[0][0], xi[i])
        sign, ref = torch.linalg.slogdet(jac)
        assert sign.item() == 1.0
        assert logdet[i].item() == pytest.approx(ref.item(), abs=1e-10)
    back, inv_logdet = flow.inverse(w)
    assert torch.allclose(back, xi, atol=1e-12, rtol=0)
    assert torch.allclose(inv_logdet, -logdet, atol=1e-12, rtol=0)
    assert (w - xi).abs().max() > 1e-2  # not trivially the identity


def test_couplings_keep_the_masked_half_and_masks_alternate():
    flow = _random_flow(5, seed=0)
    u = torch.randn(3, 5, generator=_gen(0), dtype=F64)
    for layer, coupling in enumerate(flow.couplings):
        keep = [j for j in range(5) if (j + layer) % 2 == 0]
        move = [j for j in range(5) if (j + layer) % 2 == 1]
        v, _ = coupling(u)
        assert torch.equal(v[:, keep], u[:, keep])
        assert ((v[:, move] - u[:, move]).abs() > 0).all()


def test_flow_in_one_dimension_is_a_learnable_affine_map():
    # With d = 1, two couplings keep the coordinate and two condition on nothing: an affine map.
    flow = _random_flow(1, seed=3)
    xi = torch.linspace(-3, 3, 7, dtype=F64)[:, None]
    w, logdet = flow(xi)
    slopes = (w[1:] - w[:-1]) / (xi[1:] - xi[:-1])
    assert torch.allclose(slopes, slopes[0].expand_as(slopes), atol=1e-12, rtol=0)
    assert torch.allclose(logdet, slopes[0].log().expand_as(logdet), atol=1e-12, rtol=0)
    assert slopes[0].item() != pytest.approx(1.0, abs=1e-3)


def test_identity_init_starts_at_the_identity_and_still_learns():
    flow = vi.Flow(3).double()
    xi = torch.randn(6, 3, generator=_gen(2), dtype=F64)
    w, logdet = flow(xi)
    assert torch.equal(w, xi) and torch.equal(logdet, torch.zeros(6, dtype=F64))
    ((w - 1.0) ** 2).sum().add(logdet.sum()).backward()
    last = [c.t[-1].weight.grad for c in flow.couplings] + [
        c.s[-1].weight.grad for c in flow.couplings
    ]
    assert all(g is not None and g.abs().sum() > 0 for g in last)


# -- (c) section 5(A): K = w1^2 w2^4, N(0, I) prior, identity resolution -----------------------

KS = (1, 2)
NS = (1e2, 1e3, 1e4, 1e5, 1e6)
# Reference 004 section 5(A): n -> (log Z_bar_K, sup Psi Gaussian-MF, sup Psi gen-gamma-MF).
TABLE = {
    1e2: (-1.1118, -1.4658, -1.4219),
    1e3: (-1.6095, -2.0279, -1.9818),
    1e4: (-2.1411, -2.5991, -2.5523),
    1e5: (-2.6919, -3.1734, -3.1263),
    1e6: (-3.2535, -3.7486, -3.7015),
}


@pytest.fixture(scope="module")
def scan(_one_thread):
    return {
        n: (vi.log_z_bar_k(n, KS), vi.sup_psi("gaussian", n, KS), vi.sup_psi("gamma", n, KS))
        for n in NS
    }


def _other_order_log_z(n):
    """log Z_bar_K by 2-D quadrature in the other order: w2 (the quartic one) inside, w1 outside,
    no closed form, each split where its factor turns off."""

    def f(w2, w1):
        return math.exp(-n * w1**2 * w2**4 - 0.5 * (w1 * w1 + w2 * w2)) / (2 * math.pi)

    def inner(w1):
        s = (n * w1 * w1) ** -0.25 if w1 > 0 else 40.0
        cuts = sorted({0.0, *(c * s for c in (0.1, 1, 10) if c * s < 40), 40.0})
        return sum(
            integrate.quad(f, a, b, args=(w1,), epsabs=0, epsrel=1e-11, limit=200)[0]
            for a, b in itertools.pairwise(cuts)
        )

    cuts = [0.0, 0.1 / math.sqrt(n), 1 / math.sqrt(n), 10 / math.sqrt(n), 1.0, 40.0]
    total = sum(
        integrate.quad(inner, a, b, epsabs=0, epsrel=1e-11, limit=200)[0]
        for a, b in itertools.pairwise(cuts)
    )
    return math.log(4 * total)


def test_log_z_bar_by_quadrature_against_a_second_method():
    for n in (1e2, 1e4, 1e6):
        assert vi.log_z_bar_k(n, KS) == pytest.approx(_other_order_log_z(n), abs=1e-9)
        # the same K with the coordinates swapped runs the numeric inner path (k = 2 inside)
        assert vi.log_z_bar_k(n, (2, 1)) == pytest.approx(vi.log_z_bar_k(n, KS), abs=1e-9)
    assert vi.log_z_bar_k(50.0, (1,)) == pytest.approx(-0.5 * math.log(101.0), abs=1e-14)


def test_table_of_reference_004_section_5a(scan):
    for n, (log_z, (gauss, _), (gamma, _)) in scan.items():
        assert (log_z, gauss, gamma) == pytest.approx(TABLE[n], abs=1e-3), n


def test_psi_never_exceeds_log_z_and_gen_gamma_beats_gaussian(scan):
    for n, (log_z, (gauss, _), (gamma, _)) in scan.items():
        assert gauss <= log_z + 1e-6 and gamma <= log_z + 1e-6
        assert gamma > gauss
        if n >= 1e4:
            assert gamma - gauss == pytest.approx(0.047, abs=0.002)
    # the bound holds for every q, not only the maximiser: a few arbitrary sources
    for lam, k, beta in ((1.0, 1.0, 1.0), ([1.0, 0.3], 2.0, [1e4, 3.0]), (0.2, 0.5, 0.1)):
        q = vi.GeneralizedGamma(lam, k, [beta] * 2 if np.isscalar(beta) else beta, dtype=F64)
        assert vi.psi_normal_crossing(q, 1e4, KS).item() <= scan[1e4][0]


def test_slopes_over_large_n_are_the_rlct(scan):
    big = [n for n in NS if n >= 1e4]
    exact = vi.slope(big, [scan[n][0] for n in big])
    gauss = vi.slope(big, [scan[n][1][0] for n in big])
    gamma = vi.slope(big, [scan[n][2][0] for n in big])
    assert (exact, gauss, gamma) == pytest.approx((0.2416, 0.2496, 0.2495), abs=1e-3)
    for s in (exact, gauss, gamma):
        assert abs(s - 0.25) < 0.02
    # the helper is the least-squares slope: check on a line with known slope
    assert vi.slope([1e2, 1e3, 1e4], [-3 - 0.3 * math.log(n) for n in (1e2, 1e3, 1e4)]) == (
        pytest.approx(0.3, abs=1e-12)
    )


def test_optimum_shape_and_closed_form_psi_against_monte_carlo(scan):
    """At n = 1e4 the gen-gamma optimum is Gaussian on w1 (lambda 1/2, k 1) and exp(-beta xi^4)
    on w2 (lambda 1/4 = the RLCT, k 2 = K's), beta_2 about n/2. Its closed-form Psi must equal a
    Monte Carlo Psi through the (identity) flow: E[-nK(G xi) + log phi(G xi) + log|G'| - log q]."""
    n = 1e4
    _, gamma_src = scan[n][2]
    assert gamma_src.lam.tolist() == pytest.approx([0.5, 0.25], abs=0.01)
    assert gamma_src.k.tolist() == pytest.approx([1.0, 2.0], abs=0.02)
    assert gamma_src.beta[1].item() == pytest.approx(n / 2, rel=0.02)
    flow = vi.Flow(2).double()
    for psi, source in (scan[n][1], scan[n][2]):
        with torch.no_grad():
            xi = source.rsample(200_000, _gen(11))
            w, logdet = flow(xi)
            log_phi = -0.5 * (w**2).sum(-1) - math.log(2 * math.pi)
            terms = -n * w[:, 0] ** 2 * w[:, 1] ** 4 + log_phi + logdet - source.log_prob(xi)
        se = terms.std().item() / math.sqrt(terms.numel())
        assert abs(terms.mean().item() - psi) < Z_SE * se
        assert se < 0.01


def test_a_regular_k_is_fitted_exactly_by_both_families():
    # K = w^2 with an N(0, 1) prior: the posterior is N(0, 1/(1 + 2n)), inside both families,
    # so sup Psi must reach log Z_bar = -log(1 + 2n)/2 exactly: a check on the optimiser itself.
    n = 1e3
    exact = -0.5 * math.log(1 + 2 * n)
    assert vi.log_z_bar_k(n, (1,)) == pytest.approx(exact, abs=1e-12)
    for family in ("gaussian", "gamma"):
        assert vi.sup_psi(family, n, (1,))[0] == pytest.approx(exact, abs=1e-8)
