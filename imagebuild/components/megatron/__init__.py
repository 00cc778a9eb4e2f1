"""Megatron-LM at a locked commit, with its dataset helpers compiled at build time."""
