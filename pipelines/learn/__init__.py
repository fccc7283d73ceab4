"""Learn stage."""
