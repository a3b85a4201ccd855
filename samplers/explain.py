"""Each kernel's update rule as implemented (LaTeX) and a paragraph saying what it does and
where it comes from, for the app's teaching views.

The equations are the ones ``samplers/sgmcmc.py``, ``mcmc.py``, ``nuts.py``, ``ensemble.py``
and ``splitting.py`` compute, not the papers' printed ones where those differ (reference 000
fixes the adaptive kernels' typos and SGHMC/SGNHT's temperature). Notation: eps = step_size,
g_t the raw minibatch mean loss gradient, eta_t ~ N(0, I) fresh noise, and every kernel
targets exp(-U) with ``POSTERIOR`` (a Gaussian prior is added where the target defines one).
"""

from __future__ import annotations

from .registry import REGISTRY

POSTERIOR = (
    r"U(w) = n\beta\, L(w) + \tfrac{\gamma}{2}\,\lVert w - w_0 \rVert^2,"
    r"\qquad \pi(w) \propto e^{-U(w)}"
)

_SGLD = r"w_{t+1} = w_t - \tfrac{\varepsilon}{2}\,\nabla U(w_t) + \sqrt{\varepsilon}\,\eta_t"
_GRAD_U = r"\nabla U(w_t) = n\beta\, g_t + \gamma\,(w_t - w_0)"
_MAPS = (
    r"A_h:\ w \leftarrow w + h\,p \qquad B_h:\ p \leftarrow p - h\,\nabla U(w) \\"
    r"O_h:\ p \leftarrow a\,p + \sqrt{T(1 - a^2)}\,R,\quad a = e^{-\gamma_f h}"
)
_SPLITTING_TEXT = (
    "Underdamped Langevin dynamics with a momentum p ~ N(0, T I), integrated by operator "
    "splitting as in the TATi paper (Heber, Trstanova & Leimkuhler 2020): A drifts the "
    "position, B kicks the momentum with the force, O is the exact Ornstein-Uhlenbeck "
    "thermostat (R ~ N(0, I) fresh noise) with friction gamma_f (the `friction` parameter, "
    "not the localization gamma). "
    "Letters are applied left to right, each with the step h divided by how often it occurs, "
    "and the scheme samples exp(-U/T) up to a step-size bias whose order depends on the "
    "letter order (BAOAB: second order, nearly exact on Gaussians). No accept/reject step."
)


def _aligned(*rows: str) -> str:
    return r"\begin{aligned}" + r" \\ ".join(rows) + r"\end{aligned}"


# name -> (LaTeX, paragraph); the paragraph's source is appended from the registry below.
_TEXT: dict[str, tuple[str, str]] = {
    "sgld": (
        _aligned(_SGLD, _GRAD_U),
        "Stochastic gradient Langevin dynamics (Welling & Teh 2011), Alg. 1 of the local "
        "posterior sampling benchmark (Hitchcock & Hoogland): an Euler-Maruyama step of the "
        "overdamped Langevin SDE whose drift is half the force and whose noise has variance "
        "eps, with the loss gradient taken on a minibatch (batch_size) when the target has "
        "data. There is no Metropolis correction, so a large step size biases the samples "
        "(too wide, or divergent), and minibatch gradient noise adds heat on top.",
    ),
    "ula": (
        _aligned(_SGLD, r"\nabla U(w_t) = n\beta\,\nabla L(w_t) + \gamma\,(w_t - w_0)"),
        "The unadjusted Langevin algorithm (Parisi 1981; eq. 2.3 of the local posterior "
        "sampling benchmark, Hitchcock & Hoogland): SGLD's update with the full-data gradient. "
        "It samples exp(-U) only as the step size goes to zero; at a finite step its "
        "stationary law is slightly off, which MALA's accept/reject step removes.",
    ),
    "rmsprop-sgld": (
        _aligned(
            r"v_t = b\,v_{t-1} + (1 - b)\,g_t^2,\quad v_{-1} = 1",
            r"\hat v_t = v_t / (1 - b^{\,t+1}),\quad \varepsilon_t = \varepsilon \,/\,"
            r"(\sqrt{\hat v_t} + a)",
            r"w_{t+1} = w_t - \tfrac{\varepsilon_t}{2} \odot \nabla U(w_t)"
            r" + \sqrt{\varepsilon_t} \odot \eta_t",
        ),
        "Preconditioned SGLD (pSGLD, Li et al. 2016), Alg. 3 of the local posterior sampling "
        "benchmark (Hitchcock & Hoogland): a per-coordinate step size eps_t from an RMSProp "
        "average of the squared raw loss gradient, so flat directions take long steps and "
        "steep ones short steps. Typos fixed as the benchmark's reference notes say (eps_t[i] "
        "uses v_hat[i], bias correction with exponent t+1, v starts at 1). The drift term of "
        "the changing metric (Gamma) is dropped, as in the paper, so the chain samples a biased "
        "law that a smaller step does not fix: on the benchmark's quadratic (E[nβL] = 1.50) it "
        "gives 1.66 at step 1e-6 and 1.76 at 3e-7. Runs with it carry a warning.",
    ),
    "adam-sgld": (
        _aligned(
            r"m_t = b_1 m_{t-1} + (1 - b_1)\,g_t,\quad m_{-1} = 0",
            r"v_t = b_2 v_{t-1} + (1 - b_2)\,g_t^2,\quad v_{-1} = 1",
            r"\hat m_t = \frac{m_t}{1 - b_1^{\,t+1}},\quad \hat v_t = \frac{v_t}{1 - b_2^{\,t+1}}",
            r"\varepsilon_t = \frac{\varepsilon}{\sqrt{\hat v_t} + a}",
            r"w_{t+1} = w_t - \tfrac{\varepsilon_t}{2} \odot \big(n\beta\,\hat m_t"
            r" + \gamma (w_t - w_0)\big)",
            r"\qquad\quad + \sqrt{\varepsilon_t} \odot \eta_t",
        ),
        "Adam-preconditioned SGLD (Kim et al. 2020), Alg. 2 of the local posterior sampling "
        "benchmark (Hitchcock & Hoogland): as RMSProp-SGLD, but the loss force is replaced by "
        "Adam's bias-corrected momentum m_hat of the raw gradient (m starts at 0, v at 1), "
        "while the localization pull and the noise stay as in SGLD. Like RMSProp-SGLD it drops "
        "the changing metric's Gamma term, as the paper does, and is biased even at small "
        "steps (1.62 against 1.50 on the benchmark's quadratic at step 1e-6); runs with it "
        "carry a warning.",
    ),
    "sghmc": (
        _aligned(
            r"p_{t+1} = p_t - \varepsilon\,\nabla U(w_t) - \alpha\,p_t"
            r" + \sqrt{2\alpha\varepsilon}\,\eta_t",
            r"w_{t+1} = w_t + p_{t+1},\quad p_0 \sim \mathcal{N}(0, \varepsilon I)",
        ),
        "Stochastic gradient Hamiltonian Monte Carlo (Chen et al. 2014), Alg. 4 of the local "
        "posterior sampling benchmark (Hitchcock & Hoogland): a momentum p with friction alpha "
        "and matching noise, so the chain coasts through flat regions instead of diffusing. "
        "Default 'corrected' form shown: force eps and the position moved by the new momentum, "
        "which samples exp(-U). variant='paper' uses the printed force eps/2 and the old "
        "momentum, which samples at twice the temperature (kept for comparison).",
    ),
    "sgnht": (
        _aligned(
            r"p_{t+1} = p_t - \varepsilon\,\nabla U(w_t) - \alpha_t\,p_t"
            r" + \sqrt{2\alpha_0\varepsilon}\,\eta_t",
            r"w_{t+1} = w_t + p_{t+1}",
            r"\alpha_{t+1} = \alpha_t + \lVert p_{t+1} \rVert^2 / d"
            r" - \frac{\varepsilon}{1 - \alpha_0 / 2}",
        ),
        "Stochastic gradient Nose-Hoover thermostat (Ding et al. 2014), Alg. 5 of the local "
        "posterior sampling benchmark (Hitchcock & Hoogland): SGHMC whose friction alpha_t is a "
        "dynamic variable that rises when the kinetic energy |p|^2/d exceeds its target and "
        "falls below it, absorbing unknown gradient noise. The target is eps / (1 - alpha_0/2), "
        "not the printed eps: that is |p|^2/d when the friction balances the injected noise "
        "(alpha = alpha_0) under this Euler step, and the printed eps runs ~5% cold at any "
        "step size. Default 'corrected' form shown "
        "(squared norm, new momentum, fixed diffusion alpha_0); variant='paper' uses the "
        "printed |p|/d with the old momentum and noise sqrt(2 alpha_t eps), which can diverge.",
    ),
    "mala": (
        _aligned(
            r"w' = w_t - \tfrac{\varepsilon}{2}\,\nabla U(w_t) + \sqrt{\varepsilon}\,\eta_t",
            r"w_{t+1} = w' \text{ with probability } A, \text{ else } w_t",
            r"A = \min\big(1,\ e^{\,U(w_t) - U(w') + \log q(w_t \mid w') - \log q(w' \mid w_t)}"
            r"\big)",
            r"\log q(b \mid a) = -\lVert b - a + \tfrac{\varepsilon}{2}\nabla U(a) \rVert^2"
            r" / (2\varepsilon)",
        ),
        "The Metropolis-adjusted Langevin algorithm (Roberts & Tweedie 1996), one of the "
        "optional extras of the local posterior sampling benchmark (Hitchcock & Hoogland, "
        "section 5): a ULA step used as a proposal and accepted or rejected by "
        "Metropolis-Hastings, so the chain samples exp(-U) exactly at any step size; too large a "
        "step shows as a low acceptance rate instead of a biased answer. Full-data gradients.",
    ),
    "rwmh": (
        _aligned(
            r"w' = w_t + \varepsilon\,\eta_t",
            r"w_{t+1} = w' \text{ with probability } A, \text{ else } w_t",
            r"A = \min\big(1,\ e^{\,U(w_t) - U(w')}\big)",
        ),
        "Random-walk Metropolis (Metropolis et al. 1953): a Gaussian proposal of scale eps "
        "around the current point, accepted with the ratio of target densities. It needs no "
        "gradient and is exact at any step, but explores by diffusion: in d dimensions the step "
        "must shrink like d^(-1/2) to keep a useful acceptance (about 0.23 is the classic "
        "optimum in high dimension).",
    ),
    "hmc": (
        _aligned(
            r"p_0 \sim \mathcal{N}(0, I),\quad (w, p) \leftarrow (w_t, p_0)",
            r"K \text{ times: } p \leftarrow p - \tfrac{\varepsilon}{2}\nabla U(w),"
            r"\ w \leftarrow w + \varepsilon\,p,",
            r"\qquad\qquad p \leftarrow p - \tfrac{\varepsilon}{2}\nabla U(w)",
            r"w_{t+1} = w \text{ with probability } A, \text{ else } w_t",
            r"A = \min\big(1,\ e^{\,H(w_t, p_0) - H(w, p)}\big)",
            r"H(w, p) = U(w) + \tfrac{1}{2}\lVert p \rVert^2",
        ),
        "Hamiltonian Monte Carlo (Duane et al. 1987; Neal 2011) as in the TATi paper (Heber, "
        "Trstanova & Leimkuhler 2020, eq. 15): a fresh momentum, K = leapfrog_steps "
        "velocity-Verlet steps along the Hamiltonian flow, then a Metropolis test on the energy "
        "error, so long moves are accepted as long as the integrator is accurate. By default "
        "(jitter) each chain draws K uniformly from 1..leapfrog_steps at every iteration: a "
        "fixed length K eps resonates when a mode's phase over the trajectory is near a "
        "multiple of pi, so the trajectory ends near its start or its mirror image and that "
        "mode barely mixes (a far start stays far). Set jitter off for the fixed-length "
        "textbook HMC with K = leapfrog_steps every time.",
    ),
    "nuts": (
        _aligned(
            r"p_0 \sim \mathcal{N}(0, I),\quad H = U(w) + \tfrac{1}{2}\lVert p \rVert^2,"
            r"\quad \text{tree } \mathcal{T} = \{(w_t, p_0)\}",
            r"\text{doubling } j:\ v_j = \pm 1,\ 2^j \text{ leapfrog steps of } v_j\,\varepsilon"
            r" \text{ from } \mathcal{T}\text{'s end on side } v_j",
            r"\text{stop if } \rho \cdot p^- \le 0 \text{ or } \rho \cdot p^+ \le 0"
            r" \text{ on any binary subtree},\ \rho = \textstyle\sum p",
            r"\text{sample } z \in \mathcal{T} \text{ with probability } \propto e^{-H(z)}"
            r"\ \text{(progressively)}",
        ),
        "The No-U-Turn Sampler (Hoffman & Gelman 2014) in its multinomial form (Betancourt "
        "2017), as Stan runs it with a unit mass matrix: HMC without a trajectory length. "
        "Each chain doubles its trajectory forwards or backwards in time (a coin flip a "
        "doubling) until the trajectory starts to turn back on itself, judged by the "
        "generalised U-turn criterion on every binary subtree, or until 2^max_depth points. "
        "The next state is drawn from all the trajectory's points with weights exp(-H): within "
        "a new subtree multinomially, and across the merge with min(1, W_new / W_old), which "
        "favours points far from the start. The construction is reversible, so the chain "
        "samples exp(-U) exactly at any step size; too large a step shows as a low accept_stat "
        "(the mean of min(1, exp(H0 - H)) over the new points) and as divergences (H - H0 > "
        "1000), which end a tree early, as in a funnel's neck. The step size is fixed here "
        "(Stan tunes it by dual averaging during warm-up).",
    ),
    "adaptive-mh": (
        _aligned(
            r"w' = w_t + L_t\,\eta_t,\quad L_t L_t^\top = C_t",
            r"C_t = \begin{cases} \varepsilon^2 I & t \le t_0 \\"
            r" s_d\,\mathrm{Cov}(w_0, \dots, w_{t-1}) + s_d\,\epsilon\,I & t > t_0"
            r" \end{cases},\quad s_d = 2.4^2 / d",
            r"w_{t+1} = w' \text{ with probability } \min\big(1,\ e^{\,U(w_t) - U(w')}\big),"
            r" \text{ else } w_t",
        ),
        "Adaptive Metropolis (Haario, Saksman & Tamminen 2001): random-walk Metropolis whose "
        "Gaussian proposal learns its shape from the chain's own history. For the first "
        "t0 = adapt_start steps it proposes with eps^2 I; after that, with the covariance of "
        "every point the chain has visited, scaled by s_d = 2.4^2 / d (the optimal random-walk "
        "scale for a Gaussian target) plus a small s_d epsilon I that keeps it nonsingular. "
        "Each chain keeps its own running mean and covariance, updated at every step by "
        "Welford's recursion, and takes a Cholesky factor of its C_t. The chain is no longer "
        "Markov, yet because the adaptation's changes shrink like 1/t its averages still "
        "converge to the target's (the paper's theorem); on a correlated target it ends up "
        "proposing along the correlation, where plain random-walk Metropolis crawls.",
    ),
    "reprior-lmc": (
        _aligned(
            r"m \leftarrow \sqrt{1 - \beta}\,m + \sqrt{\beta}\,\xi,\quad"
            r" \xi \sim \mathcal{N}(0, I)",
            r"m \leftarrow m - \tfrac{\varepsilon}{2}\nabla U(w),\ \ w' = w + \varepsilon\,m,"
            r"\ \ m' = m - \tfrac{\varepsilon}{2}\nabla U(w')",
            r"(w, m) \leftarrow (w', m') \text{ with probability } \min\big(1,\ "
            r"e^{\,H(w, m) - H(w', m')}\big), \text{ else } (w, -m)",
            r"\log \varepsilon \leftarrow \log \varepsilon + (t+1)^{-0.6}\,(a_t - a^\ast)"
            r" \quad (t < \text{warmup})",
        ),
        "Underdamped Langevin Monte Carlo as Hron, Novak, Pennington & Sohl-Dickstein ran it "
        "(002 Hron et al., wide BNNs have a simple weight posterior, Sec. 4): Hamiltonian Monte "
        "Carlo with one leapfrog step whose momentum is only partly refreshed each step "
        "(refresh beta), so it keeps moving in one direction across many steps. A Metropolis "
        "test on the energy error keeps it exact; a rejection flips the momentum (Horowitz), "
        "which undoes that persistence, so the step should be accepted often (about 0.9). "
        "With mh off every proposal is taken, as in the paper, whose acceptance probability "
        "then only measures the bias it keeps above 0.98. During the warm-up each chain "
        "adapts its step toward target_accept; afterwards the step is fixed. On ntk-fcn with "
        "parametrisation reprior it moves phi, where a wide network's posterior is nearly its "
        "N(0, I) prior, so the step can grow with the width.",
    ),
    "svgd": (
        _aligned(
            r"\phi(x_i) = \frac{1}{n}\sum_{j=1}^{n} \big[k(x_j, x_i)\,\nabla \log \pi(x_j)"
            r" + \nabla_{x_j} k(x_j, x_i)\big],\quad \nabla \log \pi = -\nabla U",
            r"x_i \leftarrow x_i + \varepsilon\,\phi(x_i)",
            r"k(x, y) = e^{-\lVert x - y \rVert^2 / h},\quad"
            r" h = \mathrm{med}\{\lVert x_i - x_j \rVert^2\} / \log(n + 1)",
        ),
        "Stein variational gradient descent (Liu & Wang 2016): the chains are one ensemble of "
        "n particles that move together, deterministically, along the direction phi that "
        "decreases the KL divergence from the particles' law to pi fastest among the functions "
        "of an RBF kernel's unit ball. The first term is gradient ascent on log pi averaged "
        "over nearby particles; the second pushes particles apart, so they spread over the "
        "target instead of collapsing to its mode (with one particle SVGD is gradient ascent). "
        "The bandwidth h follows the median heuristic of the authors' code. The particles are "
        "not independent draws: at a fixed point they cover the target more evenly than iid "
        "samples, with a small finite-n bias (variances a few percent low in 2-D at n = 200). "
        "A diverged particle is frozen and left out of the others' sums.",
    ),
    "eqn": (
        _aligned(
            r"p \leftarrow p - \tfrac{h}{2} B_i^\top \nabla U(w_i),\quad"
            r" w_i \leftarrow w_i + \tfrac{h}{2} B_i p",
            r"p \leftarrow a p + \sqrt{T(1 - a^2)}\,R,\quad"
            r" w_i \leftarrow w_i + \tfrac{h}{2} B_i p,\quad"
            r" p \leftarrow p - \tfrac{h}{2} B_i^\top \nabla U(w_i)",
            r"B_i = \operatorname{chol}\big(I + \eta\,\operatorname{cov}(w_{[i]})\big)",
        ),
        "Ensemble quasi-Newton (Leimkuhler, Matthews & Weare 2018) as in the TATi paper: the "
        "chains are walkers of one ensemble, and each runs BAOAB preconditioned by B_i, the "
        "Cholesky factor of I + eta times the covariance of the OTHER walkers. Where the "
        "ensemble is spread (a soft direction) B_i stretches the steps, so the slow modes of a "
        "stiff, anisotropic target mix many times faster at a step the stiff mode allows. B_i "
        "is frozen between rebuilds every covariance_every steps and never reads walker i, so "
        "the dynamics keep exp(-U/T) (the divergence term vanishes). eta = 0 or one walker is "
        "plain BAOAB. B is block-diagonal over the parameter tensors.",
    ),
    "baoab": (
        _aligned(r"\text{BAOAB:}\ \ B_{h/2}\,A_{h/2}\,O_h\,A_{h/2}\,B_{h/2}", _MAPS),
        _SPLITTING_TEXT + " BAOAB (Leimkuhler & Matthews) costs one gradient per step.",
    ),
    "gla1": (
        _aligned(r"\text{GLA1 (BAO):}\ \ B_h\,A_h\,O_h", _MAPS),
        _SPLITTING_TEXT + " GLA1 is a first-order geometric Langevin algorithm "
        "(Bou-Rabee & Owhadi 2010) in TATi's letter order.",
    ),
    "gla2": (
        _aligned(r"\text{GLA2 (BOBA):}\ \ B_{h/2}\,O_h\,B_{h/2}\,A_h", _MAPS),
        _SPLITTING_TEXT + " GLA2 is an O step inside velocity Verlet (TATi's code; the paper "
        "gives no formula).",
    ),
    "sgrld": (
        _aligned(
            r"w_{t+1} = w_t - h\,n\,G^{-1} \hat g_t + \sqrt{2h}\,G^{-1/2}\,\xi_t,"
            r"\qquad \hat g_t = \nabla U(w_t) / n",
            r"\text{rmsprop: } G = \mathrm{diag}(\sqrt{V_t} + \epsilon),\ "
            r"V_t = \lambda V_{t-1} + (1 - \lambda)\,\hat g_t^2",
            r"\text{monge: } G = I + \alpha^2 m_t m_t^\top,\ "
            r"m_t = \lambda m_{t-1} + (1 - \lambda)\,\hat g_t",
            r"\text{shampoo: } G^{-1} \hat g = H_1^{-1/4}\,\hat g\,H_2^{-1/4},\ "
            r"H_1 \leftarrow \lambda H_1 + (1 - \lambda)\,\hat g \hat g^\top,\ "
            r"H_2 \leftarrow \lambda H_2 + (1 - \lambda)\,\hat g^\top \hat g",
        ),
        "Stochastic gradient Riemannian Langevin dynamics (Yu, Hartmann, Williams & Klami): an "
        "Euler-Maruyama step of Langevin dynamics in a metric G built from the gradients seen so "
        "far, n the training-set size (1 for potentials; for networks the paper's learning rate "
        "is l = h n). identity is SGLD; rmsprop and wenzel are diagonal (wenzel: one scale per "
        "layer, refreshed once an epoch); monge (I + alpha^2 m m^T, rank one, at the cost of two "
        "inner products) and shampoo (Kronecker factors of a matrix parameter; on a potential "
        "the full-matrix H) are the paper's non-diagonal metrics, which reach further into a "
        "funnel's neck. Each statistic takes the current gradient before the metric is formed. "
        "The drift term Gamma(w) = div G^-1 is omitted, as in the paper, so every adaptive metric "
        "samples a biased law, even on a Gaussian (variance 1.3-1.6 instead of 1 at h = 0.01; "
        "12-16 with monge at alpha^2 = 1): part of its gain in the funnel is that inflation.",
    ),
    "splitting": (
        _aligned(
            r"\text{scheme } X_1 X_2 \cdots X_k,\quad X_i \in \{A, B, O\}",
            r"\text{each } X_i \text{ applied with step } h / \#X_i",
            _MAPS,
        ),
        _SPLITTING_TEXT + " Type any scheme, e.g. ABOBA or OBABO, to compare orderings.",
    ),
}

EXPLAIN: dict[str, tuple[str, str]] = {
    name: (latex, f"{text} Source: {REGISTRY[name].paper}.")
    for name, (latex, text) in _TEXT.items()
    if name in REGISTRY
}


def explain(name: str) -> tuple[str, str]:
    """(LaTeX update equation, paragraph) for sampler ``name``. A registered kernel without a
    written entry gets no equation ("") and its registry doc and paper as the paragraph."""
    if name in EXPLAIN:
        return EXPLAIN[name]
    if name not in REGISTRY:
        raise KeyError(f"unknown sampler {name!r}; choose one of {sorted(REGISTRY)}")
    spec = REGISTRY[name]
    doc = " ".join((spec.doc or "").split())
    return "", f"{doc} Source: {spec.paper}. (No typeset update equation for {name} yet.)"
