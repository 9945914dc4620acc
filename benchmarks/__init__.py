"""Benchmark scripts, run from the repository root as ``python -m benchmarks.NAME``
(:mod:`benchmarks.harness` holds what they share)."""
