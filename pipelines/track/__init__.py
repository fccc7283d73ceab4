"""Track stage."""
