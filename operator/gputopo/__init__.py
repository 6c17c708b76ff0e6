"""gputopo: topology-aware placement of distributed GPU training jobs on Kubernetes."""

__version__ = "0.1.0"
__all__ = ["__version__"]
