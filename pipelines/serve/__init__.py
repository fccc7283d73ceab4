"""Serve stage."""
