"""Benchmarks: each prints one JSON object with its figures and the machine."""
