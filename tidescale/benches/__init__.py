"""Benchmarks of the fast simulator: `tidescale bench sim` (speed) and `tidescale bench fidelity`."""
