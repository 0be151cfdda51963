"""Reproducible performance runs; each prints ratios against a baseline run in the same process
and writes its figures to benchmarks/results/<name>.json."""
