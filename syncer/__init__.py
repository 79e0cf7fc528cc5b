"""flower-syncer: a GitOps agent for Flower federated learning on Kubernetes."""

__version__ = "0.1.0"
