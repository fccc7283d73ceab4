"""Tracking: MLflow behind a tiny interface, a null tracker, metric names, secret redaction.

MLflow itself is imported only when a tracker first talks to it.
"""

from pipelines.track.tracker import MlflowTracker, NullTracker, Tracker, command_run, create_tracker

__all__ = ["MlflowTracker", "NullTracker", "Tracker", "command_run", "create_tracker"]
