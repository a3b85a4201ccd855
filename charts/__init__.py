"""Pure figure builders: arrays and dicts in, plotly Figures out (no Streamlit, no torch)."""

from charts.landscape import (
    SCALES,
    contour_figure,
    scaled,
    spectrum_figure,
    surface_figure,
    sweep_figure,
)

__all__ = [
    "SCALES",
    "contour_figure",
    "scaled",
    "spectrum_figure",
    "surface_figure",
    "sweep_figure",
]
