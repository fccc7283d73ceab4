"""Ingest stage."""
