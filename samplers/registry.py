"""The kernel registry: name -> spec (parameters with default, range, doc; paper; builder)."""

from __future__ import annotations

from landscapes import Param, Spec

from .ensemble import SVGD
from .mcmc import HMC, MALA, RWMH, AdaptiveMH, RepriorLMC
from .nuts import NUTS
from .sgmcmc import SGHMC, SGLD, SGNHT, ULA, AdamSGLD, RMSPropSGLD
from .sgrld import METRICS, SGRLD
from .splitting import EQN, SCHEMES, Splitting

P000 = "000 Hitchcock & Hoogland, local posterior sampling benchmark"
P001 = "001 Yu et al., SGRLD in non-diagonal metrics"
P002 = "002 Hron et al., wide BNNs have a simple weight posterior"
P003 = "003 Heber et al., TATi"

STEP = Param("step_size", "float", 1e-3, "step size epsilon", 1e-12, 10.0)
NBETA = Param(
    "nbeta",
    "float",
    None,
    "n beta, the weight of the loss (empty: the target's: 1 "
    "for potentials, n / log n for networks)",
    1e-12,
    1e12,
    optional=True,
)
LOC = Param(
    "localization", "float", 0.0, "gamma: pull towards the start, (gamma/2)|w - w0|^2", 0.0, 1e12
)
BATCH = Param(
    "batch_size", "int", None, "minibatch size (empty: full batch)", 1, 10_000_000, optional=True
)
VARIANT = Param(
    "variant",
    "choice",
    "corrected",
    "corrected (temperature-correct, default) or paper (as printed, for comparison)",
    choices=("corrected", "paper"),
)
FRICTION = Param("friction", "float", 1.0, "friction gamma (rate of the O step)", 0.0, 1e6)
TEMPERATURE = Param("temperature", "float", 1.0, "temperature T (target exp(-U/T))", 1e-6, 1e6)
# Reference 000: a > 0 and b1, b2 in (0, 1). At a = 0 a chain whose gradient vanishes in a
# coordinate (a stationary point, a dead unit) gets the step eps / 0 and diverges at once.
STABILITY = Param("a", "float", 0.1, "stability constant a (> 0)", 1e-8, 1e6)
EMA_RATE = (1e-6, 0.999999)  # the open interval (0, 1), closed at 1e-6 from either end
SG = (STEP, NBETA, LOC, BATCH)
MH = (STEP, NBETA, LOC)


def _fixed_scheme(scheme: str):
    return lambda **params: Splitting(scheme=scheme, **params)


SPECS = [
    Spec("sgld", "sgmcmc", SGLD.__doc__, P000 + ", Alg. 1", SG, SGLD),
    Spec(
        "rmsprop-sgld",
        "sgmcmc",
        RMSPropSGLD.__doc__,
        P000 + ", Alg. 3",
        [
            *SG,
            STABILITY,
            Param("b", "float", 0.99, "EMA rate b of the squared gradient", *EMA_RATE),
        ],
        RMSPropSGLD,
    ),
    Spec(
        "adam-sgld",
        "sgmcmc",
        AdamSGLD.__doc__,
        P000 + ", Alg. 2",
        [
            *SG,
            STABILITY,
            Param("b1", "float", 0.9, "EMA rate b1 of the gradient", *EMA_RATE),
            Param("b2", "float", 0.999, "EMA rate b2 of the squared gradient", *EMA_RATE),
        ],
        AdamSGLD,
    ),
    Spec(
        "sghmc",
        "sgmcmc",
        SGHMC.__doc__,
        P000 + ", Alg. 4",
        [
            *SG,
            Param(
                "friction",
                "float",
                0.1,
                "friction alpha (fraction of p damped per step)",
                1e-9,
                1.0,
            ),
            VARIANT,
        ],
        SGHMC,
    ),
    Spec(
        "sgnht",
        "sgmcmc",
        SGNHT.__doc__,
        P000 + ", Alg. 5",
        [
            *SG,
            Param(
                "friction", "float", 0.1, "initial friction alpha_0 (and the diffusion)", 1e-9, 1.0
            ),
            VARIANT,
        ],
        SGNHT,
    ),
    Spec(
        "sgrld",
        "sgmcmc",
        SGRLD.__doc__,
        P001 + ", eqs. 3-4, sections 3.1-3.2",
        [
            Param(
                "step_size",
                "float",
                1e-3,
                "step size h (the paper's; for networks its learning rate l = h n)",
                1e-12,
                10.0,
            ),
            NBETA,
            LOC,
            BATCH,
            Param("metric", "choice", "identity", "the metric G", choices=METRICS),
            Param("alpha2", "float", 0.1, "monge: alpha^2 of G = I + alpha^2 m m^T", 0.0, 1e6),
            Param(
                "decay",
                "float",
                None,
                "lambda of the metric's EMA (empty: the paper's: rmsprop 0.99 / 0.995 on "
                "potentials, wenzel 0.99, monge 0.9 / 0.7, shampoo 0.99 / 0.9995; 1: frozen)",
                0.0,
                1.0,
                optional=True,
            ),
            Param(
                "epsilon",
                "float",
                None,
                "rmsprop/wenzel stability eps, shampoo's H_0 = eps I and ridge (empty: 1e-8; "
                "on potentials rmsprop 0, shampoo 1e-6)",
                0.0,
                1.0,
                optional=True,
            ),
            Param(
                "update_every",
                "int",
                None,
                "steps between shampoo's roots (empty: 100; 1 on potentials) or wenzel's "
                "refreshes (empty: one epoch)",
                1,
                10_000_000,
                optional=True,
            ),
        ],
        SGRLD,
    ),
    Spec("ula", "mcmc", "Unadjusted Langevin: SGLD's update on the full data.", P000, MH, ULA),
    Spec("mala", "mcmc", MALA.__doc__, P000 + " (section 5 extras)", MH, MALA),
    Spec(
        "hmc",
        "mcmc",
        HMC.__doc__,
        P003 + ", eq. 15",
        [
            *MH,
            Param(
                "leapfrog_steps",
                "int",
                10,
                "leapfrog steps per iteration (maximum with jitter)",
                1,
                1000,
            ),
            Param(
                "jitter",
                "bool",
                True,
                "draw the number of leapfrog steps per chain and step (off: fixed length, which "
                "can resonate)",
            ),
        ],
        HMC,
    ),
    Spec("rwmh", "mcmc", RWMH.__doc__, "Metropolis et al. (1953)", MH, RWMH),
    Spec(
        "reprior-lmc",
        "mcmc",
        RepriorLMC.__doc__,
        P002 + ", Sec. 4",
        [
            Param(
                "step_size",
                "float",
                0.01,
                "leapfrog step epsilon (initial, with warm-up)",
                1e-12,
                10.0,
            ),
            NBETA,
            LOC,
            Param(
                "refresh", "float", 0.1, "beta: the momentum's refresh fraction a step", 1e-6, 1.0
            ),
            Param("mh", "bool", True, "Metropolis-Hastings test (off: skip MH, as the paper ran)"),
            Param(
                "target_accept",
                "float",
                0.9,
                "acceptance probability the warm-up adapts the step toward",
                0.05,
                0.999,
            ),
            Param(
                "warmup",
                "int",
                1000,
                "steps that adapt the step size (0: keep step_size); put them in the burn-in",
                0,
                10_000_000,
                unit="steps",
            ),
        ],
        RepriorLMC,
    ),
    Spec(
        "nuts",
        "mcmc",
        NUTS.__doc__,
        "Hoffman & Gelman (2014), JMLR 15",
        [
            # fixed (no dual averaging): the registry's 1e-3 would build max_depth trees of
            # 1023 steps on the teaching targets at every iteration
            Param("step_size", "float", 0.1, "leapfrog step size epsilon (fixed)", 1e-12, 10.0),
            NBETA,
            LOC,
            Param(
                "max_depth",
                "int",
                10,
                "most doublings of a tree (at most 2^max_depth - 1 leapfrog steps an iteration)",
                1,
                12,
            ),
        ],
        NUTS,
    ),
    Spec(
        "adaptive-mh",
        "mcmc",
        AdaptiveMH.__doc__,
        "Haario, Saksman & Tamminen (2001), Bernoulli 7",
        [
            Param(
                "step_size",
                "float",
                0.1,
                "initial proposal scale: C_0 = step_size^2 I until adapt_start",
                1e-12,
                10.0,
            ),
            NBETA,
            LOC,
            Param(
                "adapt_start",
                "int",
                100,
                "t0: steps with the initial proposal before the chain's covariance is used",
                1,
                10_000_000,
            ),
            Param(
                "epsilon",
                "float",
                1e-6,
                "epsilon of the s_d epsilon I added to the adapted covariance (> 0)",
                1e-12,
                1e6,
            ),
        ],
        AdaptiveMH,
    ),
    Spec(
        "svgd",
        "ensemble",
        SVGD.__doc__,
        "Liu & Wang (2016), NeurIPS",
        [
            Param(
                "step_size",
                "float",
                0.1,
                "step size epsilon of x <- x + epsilon phi(x)",
                1e-12,
                10.0,
            ),
            NBETA,
            LOC,
        ],
        SVGD,
    ),
    Spec(
        "eqn",
        "ensemble",
        EQN.__doc__,
        P003 + ", eqs. 18-19 (Leimkuhler, Matthews & Weare 2018)",
        [
            *SG,
            FRICTION,
            TEMPERATURE,
            Param("eta", "float", 10.0, "covariance blending eta of B = chol(I + eta cov)", 0, 1e6),
            Param(
                "covariance_every",
                "int",
                1000,
                "steps between rebuilds of B (at step % covariance_every == 0)",
                1,
                10_000_000,
            ),
        ],
        EQN,
    ),
    *[
        Spec(
            name,
            "splitting",
            f"Langevin splitting '{scheme}'. " + Splitting.__doc__,
            P003,
            [*SG, FRICTION, TEMPERATURE],
            lambda scheme=scheme, **kw: Splitting(scheme=scheme, **kw),
        )
        for name, scheme in SCHEMES.items()
    ],
    Spec(
        "splitting",
        "splitting",
        "Langevin splitting with any scheme of the letters A, B, O (e.g. ABOBA).",
        P003,
        [
            *SG,
            FRICTION,
            TEMPERATURE,
            Param("scheme", "str", "BAOAB", "letters A (drift), B (kick), O (thermostat)"),
        ],
        Splitting,
    ),
]

REGISTRY: dict[str, Spec] = {spec.name: spec for spec in SPECS}
