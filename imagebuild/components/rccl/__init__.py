"""RCCL pinned apart from the base image: built for the recipe's GPU targets and installed so
that every consumer in the image loads it."""
