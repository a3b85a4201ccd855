"""The "predictive" observable's summary (``samplers.predictive``) in words: the lines
``python -m jobs run`` and ``show`` print without --json, and the Networks page's table.
"""

from __future__ import annotations

PREDICTIVE_LINES = (  # summary key -> what it is, for the plain-text output
    ("log_p", "ensemble log p(y | x) per point"),
    ("mean_single_log_p", "mean of single draws' log p(y | x) per point, <= log_p"),
    ("accuracy", "of the draw-averaged probabilities"),
    ("ece", "expected calibration error, 30 bins"),
    ("confidence", "mean top-label probability"),
    ("curvature", "input-space |lambda_max| / (|grad| + 1e-6), Srinivas et al."),
)


def predictive_lines(block: dict) -> list[str]:
    """The "predictive" observable's summary (``samplers.predictive.KEYS``) as text, a line a
    metric: what ``python -m jobs run`` and ``show`` print without --json."""
    draws, split = block.get("draws") or 0, block.get("split", "test")
    lines = [f"predictive: {draws} draws on the {split} set"]
    for key, what in PREDICTIVE_LINES:
        value = block.get(key)
        shown = "n/a" if value is None else f"{value:.6g}"
        if key == "curvature" and value is not None:
            what += f", {block.get('curvature_draws')} draws"
        lines.append(f"predictive.{key}: {shown}  ({what})")
    return lines


# What each metric means, for the Networks page's table (Yu et al., Sec. 4.1).
PREDICTIVE_TABLE = (  # summary key -> name, meaning
    (
        "log_p",
        "ensemble log p",
        "(1/N) Σ_n log((1/S) Σ_s p(y_n | x_n, θ_s)) on the test set: "
        "the posterior predictive's log-likelihood per point (higher is better)",
    ),
    (
        "mean_single_log_p",
        "mean single-draw log p",
        "each draw's own log p(y | x) per point, "
        "averaged over draws; below the ensemble's by how much the draws disagree",
    ),
    ("accuracy", "accuracy", "of the argmax of the draw-averaged probabilities"),
    (
        "ece",
        "ECE",
        "expected calibration error: |accuracy − confidence| in 30 equal-width bins "
        "of the top-label confidence, weighted by the bins' shares (0: calibrated)",
    ),
    ("confidence", "confidence", "mean top-label probability of the averaged prediction"),
    (
        "curvature",
        "curvature",
        "|λ_max(∇²ₓ ℓ)| / (‖∇ₓ ℓ‖ + 1e-6), derivatives in the input, on "
        "10% of the test set (Srinivas et al.): an unusual value flags a bad sampler",
    ),
    ("draws", "draws", "posterior draws averaged (kept steps × chains that did not diverge)"),
)


def predictive_rows(block: dict) -> dict:
    """The "predictive" observable's summary as the Networks page's table: metric, value and
    what it means, a row a metric (values as text, "–" where there is none)."""
    names, shown, meaning = [], [], []
    for key, name, what in PREDICTIVE_TABLE:
        value = block.get(key)
        if key == "curvature" and value is not None:
            what += f" ({block.get('curvature_draws')} draws)"
        names.append(name)
        shown.append(
            "–" if value is None else f"{value:.6g}" if isinstance(value, float) else str(value)
        )
        meaning.append(what)
    return {"metric": names, "value": shown, "meaning": meaning}
