"""Rollout stage."""
