"""The target registry: name -> spec (parameters with default, range, doc; paper; builder).

The CLI flags, RunSpec validation and the app's widgets are all generated from these specs.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import torch

from .base import Param, ParamError, Spec, TargetSpec
from .data import DATASETS
from .dln import SIZE_CLASSES, dln_facts, make_dln, make_rrr, rrr_facts
from .formula import MAX_DIM
from .mlp import PRIORS, make_mlp, mlp_facts
from .model import make_model, model_facts, resolve_checkpoint, resolve_factory
from .ntk import DATA, PARAMETRISATIONS, make_ntk_fcn, ntk_facts
from .potentials import (
    Banana,
    Custom,
    Donut,
    Funnel,
    Mixture,
    NormalCrossing,
    SoftplusFunnel,
    Squiggle,
    make_gaussian,
    make_harmonic,
)
from .singular import make_polynomial, make_tanh, polynomial_facts, tanh_facts

GALLERY = "MCMC Interactive Gallery (C. Feng); exact definitions"
P000 = "Hitchcock & Hoogland (2025), local posterior sampling benchmark"
P001 = "Yu et al., SGRLD in non-diagonal metrics (TMLR)"
P003 = "Heber et al. (2020), TATi"
P002 = "Hron et al. (2022), wide BNNs have a simple weight posterior"
P004 = "Variational inference via resolution of singularities (ICLR submission)"

SQUARED = (
    "Loss (loss_convention=sum, the benchmark paper's): squared error summed over outputs, "
    "averaged over samples, with no 1/(2 sigma^2) factor; loss_convention=mean averages over "
    "outputs too, as torch's F.mse_loss (devinterp's convention: its step sizes and nbeta then "
    "give its posterior). The LLC does not depend on that scale, but step sizes do: stable "
    "steps scale as 1 / (nbeta x curvature of L_n), and the Gaussian log-likelihood is "
    "n L_n / (2 sigma^2)."
)
LOSS_CONVENTION = Param(
    "loss_convention",
    "choice",
    "sum",
    "regression loss per point: sum (squared error summed over outputs, the benchmark's) or "
    "mean (averaged over outputs: F.mse_loss, devinterp's)",
    choices=("sum", "mean"),
)

SEED = Param("seed", "int", 0, "random seed of the generated problem and data", 0, 2**31 - 1)


def n_param(default: int | None, optional: bool = False) -> Param:
    return Param(
        "n", "int", default, "training set size", 1, 10_000_000, unit="points", optional=optional
    )


def _normal_crossing(k, form, n, prior_std):

    if prior_std == 0.0 and form == "product" and len(k) > 1:
        raise ParamError(
            "normal-crossing.prior_std",
            "must be > 0 for the product form with d >= 2 (exp(-n K) alone is not integrable)",
        )
    if form == "sum" and min(k) < 1:
        raise ParamError("normal-crossing.k", "must all be >= 1 for the sum form")
    if max(k) < 1:
        raise ParamError("normal-crossing.k", "at least one k_i must be >= 1")
    return NormalCrossing(k, form, n, prior_std or None)


SPECS = [
    Spec(
        "gaussian",
        "potential",
        "Gaussian N(0, R diag(scales^2) R^T); `condition` log-spaces the variances to that "
        "condition number, `rotate` draws a random rotation R from `seed`.",
        GALLERY,
        [
            Param("dim", "int", 2, "dimension", 1, 2000),
            Param(
                "scales",
                "floats",
                (1.0,),
                "standard deviation(s): one, or one per coordinate",
                1e-6,
                1e6,
                length=(1, 2000),
            ),
            Param(
                "condition",
                "float",
                1.0,
                "condition number of the covariance (with one scale)",
                1.0,
                1e12,
            ),
            Param("rotate", "bool", False, "apply a random rotation"),
            SEED,
        ],
        make_gaussian,
    ),
    Spec(
        "banana",
        "potential",
        "Banana: y0 = x0/a, y1 = a x1 + a b (x0^2 + a^2), y ~ N([0, 4], [[1, .5], [.5, 1]]).",
        GALLERY,
        [
            Param("a", "float", 2.0, "stretch", 0.1, 10.0),
            Param("b", "float", 0.2, "bend", 0.0, 5.0),
        ],
        Banana,
    ),
    Spec(
        "donut",
        "potential",
        "Donut: log p = -(|x| - radius)^2 / width.",
        GALLERY,
        [
            Param("radius", "float", 2.6, "ring radius", 0.01, 100.0),
            Param("width", "float", 0.033, "ring width (2 x radial variance)", 1e-4, 100.0),
        ],
        Donut,
    ),
    Spec(
        "mixture",
        "potential",
        "Equal mixture of N((-1.5,-1.5), .8 I), N((1.5,1.5), .8 I), N((-2,2), .5 I).",
        GALLERY,
        [],
        Mixture,
    ),
    Spec(
        "squiggle",
        "potential",
        "Squiggle: y = (x0, x1 + sin 5 x0), y ~ N(0, [[2, .25], [.25, .5]]).",
        GALLERY,
        [],
        Squiggle,
    ),
    Spec(
        "funnel",
        "potential",
        "Neal's funnel: v ~ N(0, 3^2), x_i | v ~ N(0, e^v); coordinates (x_1..x_{D-1}, v).",
        "Neal (2003), slice sampling",
        [Param("dim", "int", 10, "dimension D (v and D-1 x's); 2 for the playground", 2, 1000)],
        Funnel,
    ),
    Spec(
        "softplus-funnel",
        "potential",
        "SGRLD funnel: x | v ~ N(mu, softplus(v) I), "
        "v ~ N(0, sigma2); softplus(v) is the variance.",
        P001,
        [
            Param("dim", "int", 2, "dimension D", 2, 1000),
            Param("mu", "float", 2.0, "mean of x", -100.0, 100.0),
            Param("sigma2", "float", 80.0, "variance of v", 1e-3, 1e4),
        ],
        SoftplusFunnel,
    ),
    Spec(
        "normal-crossing",
        "potential",
        "Energy n K(w), K = prod_i w_i^(2 k_i) (or sum); prior N(0, prior_std^2 I) "
        "(prior_std 0: none). RLCT known exactly.",
        P004,
        [
            Param(
                "k", "ints", (1, 2), "half-powers k_i (K uses w_i^(2 k_i))", 0, 20, length=(1, 64)
            ),
            Param(
                "form",
                "choice",
                "product",
                "product or sum of the monomials",
                choices=("product", "sum"),
            ),
            n_param(10_000),
            Param("prior_std", "float", 1.0, "prior standard deviation (0: no prior)", 0.0, 1e6),
        ],
        _normal_crossing,
    ),
    Spec(
        "harmonic",
        "potential",
        "Harmonic oscillator L = a |theta|^2 (TATi).",
        P003,
        [
            Param("dim", "int", 1, "dimension", 1, 2000),
            Param("a", "float", 1.0, "stiffness", 1e-6, 1e6),
        ],
        make_harmonic,
    ),
    Spec(
        "custom",
        "potential",
        "Your energy in x, y (or w0..w{d-1}) with + - * / ** and exp, log, sin, cos, tanh, "
        "sqrt, abs, softplus, pi.",
        "-",
        [
            Param("formula", "str", "(1 - x)**2 / 10 + (y - x**2)**2", "energy U(x, y)"),
            Param(
                "dim",
                "int",
                None,
                "dimension (default: from the variables used)",
                1,
                MAX_DIM,
                optional=True,
            ),
        ],
        Custom,
    ),
    Spec(
        "dln",
        "network",
        "Deep linear network f(x) = W_M...W_1 x on X ~ U[-10,10]^H0, Y = W0 X + N(0, 1/4). "
        "Give `widths` (and optionally `rank`), or leave widths empty to draw a task from "
        "`size_class`. " + SQUARED,
        P000,
        [
            Param(
                "widths",
                "ints",
                None,
                "layer widths H0, ..., HM (empty: from size_class)",
                1,
                5000,
                length=(2, 41),
                optional=True,
            ),
            Param(
                "rank",
                "int",
                None,
                "rank of the generating product (empty: random per-layer "
                "rank reductions, App. D.1)",
                0,
                5000,
                optional=True,
            ),
            Param(
                "size_class",
                "choice",
                "tiny",
                "benchmark size class (when widths is empty)",
                choices=tuple(SIZE_CLASSES),
            ),
            n_param(100_000),
            SEED,
        ],
        make_dln,
    ),
    Spec(
        "rrr",
        "network",
        "Reduced-rank regression y = B A x + N(0, I), x ~ N(0, I); truth of rank `rank`. "
        + SQUARED,
        P004,
        [
            Param("inputs", "int", 5, "input dimension M", 1, 1000),
            Param("hidden", "int", 3, "hidden width H", 1, 1000),
            Param("outputs", "int", 4, "output dimension N", 1, 1000),
            Param("rank", "int", 2, "rank of the true B A", 0, 1000),
            n_param(10_000),
            SEED,
        ],
        make_rrr,
    ),
    Spec(
        "polynomial",
        "network",
        "y = x prod_i w_i^(p_i) + noise, x ~ N(0, x_std^2), truth w = 0 (a normal crossing). "
        + SQUARED,
        P004,
        [
            Param("powers", "ints", (1, 2), "powers p_i", 0, 20, length=(1, 16)),
            Param("x_std", "float", 2.0, "input standard deviation", 1e-3, 1e3),
            Param("noise_std", "float", 0.25, "noise standard deviation", 1e-3, 1e3),
            n_param(10_000),
            SEED,
        ],
        make_polynomial,
    ),
    Spec(
        "tanh",
        "network",
        "f(x) = sum_h b_h tanh(a_h x), x ~ U[-1, 1], y = N(0, 1) (truth w = 0). " + SQUARED,
        P004,
        [Param("hidden", "int", 4, "number of tanh units H", 1, 4096), n_param(5_000), SEED],
        make_tanh,
    ),
    Spec(
        "mlp",
        "network",
        "Multilayer perceptron on a dataset: mean cross-entropy for classes; for regression "
        "data, " + SQUARED + " With a prior, the Bayesian posterior at temperature 1 "
        "(nbeta = n, He initialisation).",
        P001,
        [
            Param(
                "dataset",
                "choice",
                "digits",
                "; ".join(f"{k}: {v[2]}" for k, v in DATASETS.items()),
                choices=tuple(DATASETS),
            ),
            Param("hidden_sizes", "ints", (32,), "hidden layer widths", 1, 4096, length=(0, 8)),
            Param(
                "activation",
                "choice",
                "relu",
                "hidden activation",
                choices=("relu", "tanh", "sigmoid", "gelu"),
            ),
            n_param(None, optional=True),
            SEED,
            Param(
                "prior",
                "choice",
                "none",
                "Bayesian prior (as in Yu et al.): none, gaussian (sigma_w = 1.41/sqrt(fan_in), "
                "sigma_b = 1) or horseshoe (per-tensor scale lambda ~ HalfCauchy(0, 1), sampled "
                "jointly)",
                choices=PRIORS,
            ),
        ],
        make_mlp,
    ),
    Spec(
        "ntk-fcn",
        "network",
        "Wide Bayesian FCN in the NTK parametrisation: N(0, 1) prior on every entry, "
        "h = sigma_w W h / sqrt(fan_in) + sigma_b b (sigma_w = sqrt 2, sigma_b = 0.1; readout "
        "1 and 0.1), GELU, linear readout; Gaussian likelihood N(f(x), sigma^2), sampled at "
        "temperature 1 (nbeta = n / (2 sigma^2)). Loss: squared error summed over outputs, "
        "averaged over samples. `parametrisation=reprior` "
        "samples phi with theta = T(phi), the readout's Cholesky map (Hron et al. Eq. 3): runs "
        "record theta. Data: synthetic (y = sin(u.x) + noise, x ~ N(0, I), |u| = 1) or digits "
        "(one-hot - 0.1 targets, standardised pixels).",
        P002,
        [
            Param("width", "int", 128, "hidden layer width", 1, 4096),
            Param("depth", "int", 1, "hidden layers (0: Bayesian linear regression)", 0, 8),
            Param("n", "int", 16, "training set size", 1, 100_000, unit="points"),
            Param(
                "parametrisation",
                "choice",
                "standard",
                "standard (sample theta) or reprior (sample phi, theta = T(phi))",
                choices=PARAMETRISATIONS,
            ),
            Param(
                "data", "choice", "synthetic", "synthetic 1-D regression or digits", choices=DATA
            ),
            Param("inputs", "int", 4, "input dimension d0 of the synthetic data", 1, 1000),
            Param("sigma", "float", 0.1, "likelihood noise sigma (and the data's)", 1e-3, 10.0),
            Param(
                "lam",
                "float",
                None,
                "lambda, the map's interpolation regulariser (empty: sigma^2, the theory map; "
                "large: the identity)",
                1e-8,
                1e12,
                optional=True,
            ),
            SEED,
        ],
        make_ntk_fcn,
    ),
    Spec(
        "slp",
        "network",
        "Single-layer perceptron (linear model) on a dataset; losses as for mlp.",
        P003,
        [
            Param("dataset", "choice", "two-clusters", "dataset", choices=tuple(DATASETS)),
            n_param(None, optional=True),
            SEED,
        ],
        lambda dataset, n, seed: make_mlp(dataset, (), "relu", n, seed, name="slp"),
    ),
]


class ModelSpec(Spec):
    """The ``model`` target's spec: its file paths are made absolute when validated, so a
    stored run rebuilds the same model from any working directory."""

    def validate(self, params: dict[str, Any]) -> dict[str, Any]:
        values = super().validate(params)
        values["factory"] = resolve_factory(values["factory"])
        values["checkpoint"] = resolve_checkpoint(values["checkpoint"])
        return values


SPECS.append(
    ModelSpec(
        "model",
        "network",
        "Your torch model: a factory `file.py:make` or `package.module:make` returns "
        "(module, (inputs, targets), loss); its parameters are sampled from its own weights (or a "
        "checkpoint's), all chains at once (torch.func.vmap of functional_call), in eval mode "
        "with buffers held fixed (Dropout off, BatchNorm on its running statistics). Loss: "
        "cross_entropy (mean over samples), mse (F.mse_loss: the mean over samples and outputs) "
        "or your callable.",
        "-",
        [
            Param(
                "factory",
                "str",
                "examples.digits_mlp:make",
                "the factory: path/to/file.py:make or package.module:make",
            ),
            Param(
                "checkpoint",
                "str",
                None,
                "weights for w0: a torch.save state dict (loaded weights-only) or .safetensors "
                "(empty: the module's weights as built)",
                optional=True,
            ),
        ],
        make_model,
    )
)


def _with_loss_convention(spec: Spec) -> Spec:
    """A regression-capable network's spec that also takes ``loss_convention``."""

    def build(loss_convention: str = "sum", **params: Any):
        target = spec.build(**params)
        if target.task == "regression":
            target.loss_convention = loss_convention
        return target

    return Spec(spec.name, spec.kind, spec.doc, spec.paper, (*spec.params, LOSS_CONVENTION), build)


CONVENTIONS = ("dln", "rrr", "polynomial", "tanh", "mlp", "slp")
SPECS = [_with_loss_convention(s) if s.name in CONVENTIONS else s for s in SPECS]


GRADIENT_NOISE = Param(
    "gradient_noise",
    "float",
    0.0,
    "sigma of N(0, sigma^2) noise added to the gradient in stochastic-gradient samplers (the "
    "SGRLD funnel protocol uses 1; MH samplers and ula use the exact gradient)",
    0.0,
    1e6,
)


def _with_gradient_noise(spec: Spec) -> Spec:
    """A potential's spec that also takes ``gradient_noise``, set on the built target."""

    def build(gradient_noise: float = 0.0, **params: Any):
        target = spec.build(**params)
        target.gradient_noise = gradient_noise
        return target

    return Spec(spec.name, spec.kind, spec.doc, spec.paper, (*spec.params, GRADIENT_NOISE), build)


SPECS = [_with_gradient_noise(s) if s.kind == "potential" else s for s in SPECS]
REGISTRY: dict[str, TargetSpec] = {spec.name: spec for spec in SPECS}


NETWORK_FACTS = {
    "dln": dln_facts,
    "rrr": rrr_facts,
    "polynomial": polynomial_facts,
    "tanh": tanh_facts,
    "mlp": mlp_facts,
    "ntk-fcn": ntk_facts,
    "slp": lambda dataset, n, seed: mlp_facts(dataset, (), "relu", n, seed, name="slp"),
    "model": model_facts,
}


def facts(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """What a run needs to know of target ``name`` before it is built, without building it.

    Network targets (dln, rrr, polynomial, tanh, mlp, slp) come from parameter arithmetic: a
    DLN's ``size_class`` widths are drawn from its seed as the builder draws them, no layer or
    data is made. Every size the target would reach (d; n x the widest row of its data) is
    checked first: a ParamError names the field and the allowed range, as ``make`` would
    raise it, before anything is allocated. Potentials are small (d <= 2000, their largest
    tensor d x d) and are built to read theirs.

    Returns a dict:
      dim           d, parameters per chain
      n             training points (None: a potential without data)
      widths        one data point's numbers through a forward pass, input to output (the
                    layer widths; () for potentials), which a step's activations scale with
      nbeta         the default n beta (n / log n for networks, 1 for potentials)
      truth         whether the target knows its true parameter w0 (a potential: the known
                    minimum of its energy, ``Target.minimum``)
      true_llc      the true learning coefficient, or None where unknown (a random-rank DLN
                    over 1e6 parameters: its rank needs the drawn layers)
      multiplicity  its multiplicity, or None
      floats        numbers in its floating tensors (data, w0, truths): bytes = floats x itemsize
      other_bytes   bytes of its other tensors (class labels)
      closed_form   whether its loss on the full data needs no pass over the points (the
                    polynomial's comes from the data's moments; potentials have no data)
    """
    if name not in REGISTRY:
        raise ParamError("target", f"unknown target {name!r}; choose one of {sorted(REGISTRY)}")
    values = REGISTRY[name].validate(params)
    if name in NETWORK_FACTS:
        values.pop("loss_convention", None)  # a scale of the loss: no size changes with it
        return NETWORK_FACTS[name](**values)
    return dict(_potential_facts(name, json.dumps(values, sort_keys=True)))  # a copy


@functools.lru_cache(maxsize=64)
def _potential_facts(name: str, values: str) -> dict[str, Any]:
    spec = REGISTRY[name]
    target = spec.build(**spec.validate(json.loads(values)))
    tensors = [v for v in vars(target).values() if isinstance(v, torch.Tensor)]
    true = target.true_llc
    return {
        "dim": target.dim,
        "n": target.n,
        "widths": (),
        "nbeta": float(target.nbeta),
        "truth": target.truth_point is not None,
        "true_llc": None if true is None else true[0],
        "multiplicity": None if true is None else true[1],
        "floats": sum(t.numel() for t in tensors if t.is_floating_point()),
        "other_bytes": sum(
            t.numel() * t.element_size() for t in tensors if not t.is_floating_point()
        ),
        "closed_form": True,
    }
