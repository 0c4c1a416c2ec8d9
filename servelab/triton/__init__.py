"""Triton: model repository builder, embedded server lifecycle, stats and metrics readers."""
