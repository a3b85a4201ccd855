"""The parameters the registry-wide tests build every kernel with."""

import samplers


def stepped(name, step):
    """A kernel's parameters for the registry-wide tests: ``step`` where it has a step size;
    elliptical slice sampling's Gaussian part from a localization (the banana has no prior)."""
    declared = {p.name for p in samplers.REGISTRY[name].params}
    params = {"step_size": step} if "step_size" in declared else {}
    return params | ({"localization": 1.0} if name == "elliptical-slice" else {})
