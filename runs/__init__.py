"""The engine: RunSpec and its validation, the run loop (sampling and VI), observers, verdicts,
the embedded Store, workers, the pool and the Ray backend. The one path by which the app, the
command line and the studies run anything. Importing it changes nothing outside Basin.
"""
