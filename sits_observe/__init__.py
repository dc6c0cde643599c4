"""sits_observe: observability and capacity analytics for AI GPU clusters on Kubernetes."""

__version__ = "0.1.0"
