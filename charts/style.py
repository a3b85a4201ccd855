"""Layout shared by the figure builders."""

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
