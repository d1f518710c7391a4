"""Benchmarks of the exporter (`tidescale bench ...`)."""
