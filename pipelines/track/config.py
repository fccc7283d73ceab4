"""The `track:` config section."""

from __future__ import annotations

from pydantic import Field

from pipelines.typed import Strict


class TrackConfig(Strict):
    # Off: every command uses the NullTracker (dry runs, non-zero ranks).
    enabled: bool = True
    # None: MLFLOW_TRACKING_URI, else sqlite:///HOME/mlflow.db.
    tracking_uri: str | None = None
    experiment: str = "memagent"
    # Artifact root for a newly created experiment (e.g. s3://bucket/artifacts). None: the
    # server's default, or HOME/mlartifacts for a local sqlite store.
    artifact_location: str | None = None
    # A server that is down must not stall a run: few retries, short timeouts, then degrade.
    http_retries: int = Field(1, ge=0)
    http_timeout_s: int = Field(10, gt=0)
    # While the server is down: records held for it (metrics, params, tags; the oldest spooled
    # beyond this many), and how often it is tried again (each try costs up to a timeout).
    buffer_records: int = Field(10_000, gt=0)
    retry_s: float = Field(30.0, gt=0)
