"""Studies: one module per experiment of the papers (its specs, its results, its command-line
arguments and the data its page draws), built on the engine in ``runs``.
"""
