"""Benchmarks: speed/quality tables (speed.py) and k6 load tests against the server (run.py).

Scripts, not tests: they print and write tables under benchmarks/results/. Run them from the
repository root, e.g. `python benchmarks/speed.py` or `python benchmarks/run.py`.
"""
