"""tidescale: observability and autoscaling for NVIDIA Triton Inference Server on Kubernetes."""

__version__ = "0.1.0"
