"""Profiler ingestion: per-op self time from TF/PyTorch/TensorRT profiles, op-class shares, the gate."""
