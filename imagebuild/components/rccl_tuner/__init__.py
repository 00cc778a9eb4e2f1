"""RCCL's example tuner plugin from a source archive pinned by sha256, checked to export a
tuner interface the image's RCCL looks up."""
