"""Pure figure builders: arrays and dicts in, plotly Figures out (no Streamlit, no torch)."""

from charts.funnel import funnel_figure, step_curve
from charts.landscape import (
    SCALES,
    contour_figure,
    scaled,
    spectrum_figure,
    surface_figure,
    sweep_figure,
)
from charts.llc import (
    calibration_grid,
    chain_traces,
    checkpoint_llc_figure,
    dln_error_figure,
    llc_figure,
    loss_curve,
    mean_vs_sd_figure,
    nan_fraction_figure,
    order_preservation_figure,
)
from charts.order import order_figure
from charts.runs import (
    density_figure,
    histogram_density,
    histogram_edges,
    histogram_figure,
    iat_direction_figure,
    relative_log_density,
    trace_figure,
)
from charts.vi import free_energy_figure, objective_curves
from charts.wide import (
    acceptance_figure,
    clipped,
    ess_figure,
    kl_figure,
    slice_figure,
    slice_line_figure,
)

__all__ = [
    "SCALES",
    "contour_figure",
    "scaled",
    "spectrum_figure",
    "surface_figure",
    "sweep_figure",
]
__all__ += [
    "calibration_grid",
    "chain_traces",
    "checkpoint_llc_figure",
    "dln_error_figure",
    "llc_figure",
    "loss_curve",
    "mean_vs_sd_figure",
    "nan_fraction_figure",
    "order_preservation_figure",
]
__all__ += ["funnel_figure", "step_curve"]
__all__ += ["order_figure"]
__all__ += [
    "density_figure",
    "histogram_density",
    "histogram_edges",
    "histogram_figure",
    "iat_direction_figure",
    "relative_log_density",
    "trace_figure",
]
__all__ += [
    "acceptance_figure",
    "clipped",
    "ess_figure",
    "kl_figure",
    "slice_figure",
    "slice_line_figure",
]
__all__ += ["free_energy_figure", "objective_curves"]
