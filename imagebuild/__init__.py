"""imagebuild: build, convert and validate ROCm PyTorch container images."""

__version__ = "0.1.0"
