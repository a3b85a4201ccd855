"""Layout shared by the figure builders."""

import plotly.graph_objects as go

# A horizontal legend under the figure. Referenced to the container, not the plot area: plotly
# then widens the bottom margin to hold it, where a legend at a negative paper y lands on the
# x axis title whenever the plot is shorter than assumed (square contour plots, narrow columns).
LEGEND = {
    "orientation": "h",
    "yref": "container",
    "yanchor": "bottom",
    "y": 0,
    "xanchor": "left",
    "x": 0,
}

# Axis titles and ticks readable on a projector at the back of a room.
FONT = {"size": 15}


def study_layout(fig: go.Figure, height: int, left: int = 60, top: int = 50, **layout) -> go.Figure:
    """A study's figure framed alike: the font, the legend below, margins ``left`` and ``top``,
    ``height`` px; ``layout`` is the figure's own (title, axes)."""
    fig.update_layout(
        **layout,
        font=FONT,
        legend=LEGEND,
        margin={"l": left, "r": 20, "t": top, "b": 40},
        height=height,
    )
    return fig
