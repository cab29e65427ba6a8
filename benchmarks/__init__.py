"""Benchmarks, by concern: common/ (scoring, WER, timing, reports, clips), asr/, diarization/, server/
(k6 load tests, streaming, realtime) and memory/; run.py runs the load tests, then the speed tables.

Scripts, not tests: they print and write tables under benchmarks/results/. Run them from the
repository root as modules, e.g. `python -m benchmarks.asr.speed` or `python -m benchmarks.run`.
"""
