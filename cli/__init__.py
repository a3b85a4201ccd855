"""The command line (``python -m jobs``, or ``basin``): its flags derived from RunSpec and the
registries, its commands calling ``runs`` and ``studies``.
"""
