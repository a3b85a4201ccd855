"""Each kernel's update rule as implemented (LaTeX) and a paragraph saying what it does and
where it comes from, for the app's teaching views: read from the kernel's ``SPEC``.

The equations are the ones the kernels compute, not the papers' printed ones where those differ
(docs/methods/local-sampling.md fixes the typos of Hitchcock & Hoogland's adaptive kernels and
SGHMC/SGNHT's temperature). Notation:
eps = step_size, g_t the raw minibatch mean loss gradient, eta_t ~ N(0, I) fresh noise, and
every kernel targets exp(-U) with ``POSTERIOR`` (a Gaussian prior is added where the target
defines one).
"""

from __future__ import annotations

from .registry import REGISTRY

POSTERIOR = (
    r"U(w) = n\beta\, L(w) + \tfrac{\gamma}{2}\,\lVert w - w_0 \rVert^2,"
    r"\qquad \pi(w) \propto e^{-U(w)}"
)

EXPLAIN: dict[str, tuple[str, str]] = {
    name: (spec.equation, f"{spec.text} Source: {spec.paper}.")
    for name, spec in REGISTRY.items()
    if spec.equation
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
