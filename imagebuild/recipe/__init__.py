"""recipe stage."""
