"""hyperpod-kit: one typed environment file in, a SageMaker HyperPod training environment out."""

__version__ = "0.1.0"
