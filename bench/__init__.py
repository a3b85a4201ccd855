"""Benchmarks: python -m bench engine | setup-peer (see __main__.py). Imports nothing."""
