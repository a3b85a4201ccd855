"""``python -m jobs``: the command line's entry point, kept as the command users type.
The command line itself lives in ``cli``; the engine in ``runs``; the experiments in ``studies``.
"""
