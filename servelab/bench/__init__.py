"""Benchmarks: load generators, experiments, result records, tables and plots."""
