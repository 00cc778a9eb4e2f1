"""The Llama model the checks train, which training step fits in memory, its FLOPs, and the
GEMMs and collectives one step asks for."""
