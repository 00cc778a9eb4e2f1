"""ROCm/rccl-tests' collective benchmarks, built for the recipe's GPU targets against the
image's RCCL."""
