"""Benchmarks: speed and memory targets, measured side by side (never timed tests)."""
