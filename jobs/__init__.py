"""Background runs: the validated RunSpec, the run loop, the embedded Store, workers and the CLI.

The one path by which both the app and the command line run anything (DESIGN.md, "jobs").
Importing it changes nothing outside Basin: no environment, allocator or torch settings.
"""
