"""TransformerEngine for ROCm: the index's wheels, and its PyTorch extension built from the
locked source archive against the image's torch."""
