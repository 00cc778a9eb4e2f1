"""lock stage."""
