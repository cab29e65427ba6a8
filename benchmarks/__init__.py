"""Benchmarks: speed/quality tables (speed.py) and k6 load tests against the server (run.py).

Scripts, not tests: they print and write tables under benchmarks/results/. Run them from the
repository root as modules, e.g. `python -m benchmarks.speed` or `python -m benchmarks.run`.
"""
