"""Tracking behind a five-method interface: MLflow, or a null tracker for dry runs and ranks > 0.

    tracker = create_tracker(cfg)
    with command_run(tracker, cfg, "eval", tags={"model": ref}):
        tracker.log_metrics({"eval/hotpotqa/8K/sub_em": 0.5}, step=0)

A tracking server that is down never costs a run its results: the first failure logs one
warning, and every later record is appended to a local JSONL spool instead.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from pipelines.track.config import TrackConfig
from pipelines.track.redact import env_secrets, flatten, install_log_redaction, redact, redact_params

log = logging.getLogger("memagent.track")
MAX_PARAM_LEN = 6000


class Tracker(Protocol):
    run_id: str | None

    def start_run(self, name: str, nested: bool = False) -> contextlib.AbstractContextManager: ...

    def log_params(self, params: Mapping[str, object]) -> None: ...

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None: ...

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None: ...

    def set_tags(self, tags: Mapping[str, object]) -> None: ...


class NullTracker:
    """Records nothing: tracking off, dry runs, non-zero ranks."""

    run_id: str | None = None

    @contextlib.contextmanager
    def start_run(self, name: str, nested: bool = False) -> Iterator[None]:
        yield None

    def log_params(self, params: Mapping[str, object]) -> None:
        pass

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        pass

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        pass

    def set_tags(self, tags: Mapping[str, object]) -> None:
        pass


class MlflowTracker:
    """MLflow through its client (explicit run ids, no global fluent state); degrades on failure."""

    def __init__(self, uri: str, experiment: str, artifact_location: str | None, spool_dir: Path):
        self.uri, self.experiment, self.artifact_location = uri, experiment, artifact_location
        self.spool_dir = spool_dir
        self.degraded: str | None = None
        self.run_id: str | None = None
        self._stack: list[str] = []
        self._client = None
        self._experiment_id: str | None = None

    @property
    def client(self):
        if self._client is None:
            from mlflow import MlflowClient

            self._client = MlflowClient(tracking_uri=self.uri, registry_uri=self.uri)
        return self._client

    def experiment_id(self) -> str:
        if self._experiment_id is None:
            found = self.client.get_experiment_by_name(self.experiment)
            if found is None:
                try:
                    self._experiment_id = self.client.create_experiment(
                        self.experiment, artifact_location=self.artifact_location)
                except Exception:  # created meanwhile by another process
                    found = self.client.get_experiment_by_name(self.experiment)
                    if found is None:
                        raise
            if found is not None:
                self._experiment_id = found.experiment_id
        return self._experiment_id

    @contextlib.contextmanager
    def start_run(self, name: str, nested: bool = False) -> Iterator[str | None]:
        parent = self._stack[-1] if (nested and self._stack) else None
        tags = {"mlflow.parentRunId": parent} if parent else {}
        run_id = self._safe("start_run", lambda: self.client.create_run(
            self.experiment_id(), run_name=name, tags=tags).info.run_id, {"name": name, "parent": parent})
        run_id = run_id or f"offline-{name}-{int(time.time())}-{os.getpid()}"
        self._stack.append(run_id)
        self.run_id = run_id
        status = "FAILED"
        try:
            yield run_id
            status = "FINISHED"
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM (runtime.Stopped): stopped, not broken
            status = "KILLED"
            raise
        finally:
            self._safe("end_run", lambda: self.client.set_terminated(run_id, status), {"status": status})
            self._stack.pop()
            self.run_id = self._stack[-1] if self._stack else None

    def log_params(self, params: Mapping[str, object]) -> None:
        from mlflow.entities import Param

        clean = {k: v[:MAX_PARAM_LEN] for k, v in redact_params(params, env_secrets()).items()}
        items = [Param(k, v) for k, v in clean.items()]
        for i in range(0, len(items), 100):
            self._safe("params", lambda b=items[i:i + 100]: self.client.log_batch(self._rid(), params=b), clean)

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step or 0) for k, v in metrics.items() if v is not None]
        for i in range(0, len(items), 500):
            self._safe("metrics", lambda b=items[i:i + 500]: self.client.log_batch(self._rid(), metrics=b),
                       {"metrics": dict(metrics), "step": step})

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self._safe("artifact", lambda: self.client.log_artifact(self._rid(), str(path), artifact_path),
                   {"path": str(Path(path).absolute()), "artifact_path": artifact_path})

    def set_tags(self, tags: Mapping[str, object]) -> None:
        from mlflow.entities import RunTag

        clean = redact_params({k: v for k, v in tags.items() if v is not None}, env_secrets())
        items = [RunTag(k, v[:MAX_PARAM_LEN]) for k, v in clean.items()]
        self._safe("tags", lambda: self.client.log_batch(self._rid(), tags=items), clean)

    def _rid(self) -> str:
        if not self._stack:
            raise RuntimeError("no active run: use `with tracker.start_run(name):`")
        return self._stack[-1]

    def _safe(self, kind: str, call, record: Any = None):
        if self.degraded is None:
            try:
                return call()
            except Exception as e:  # any tracking failure: warn once, keep the run going
                self._degrade(e)
        self._spool(kind, record)
        return None

    def _degrade(self, err: Exception) -> None:
        secrets = env_secrets()
        first = (str(err).strip().splitlines() or [err.__class__.__name__])[0][:300]
        self.degraded = redact(first, secrets)
        log.warning("tracking: %s failed (%s); continuing without it, records kept in %s",
                    redact(self.uri, secrets), self.degraded, self.spool_dir)

    def _spool(self, kind: str, record: Any) -> None:
        if record is None:
            return
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        name = (self._stack[-1] if self._stack else "no-run") + ".jsonl"
        line = {"time": time.time(), "kind": kind, "run": self._stack[-1] if self._stack else None,
                "record": record}
        with open(self.spool_dir / name, "a") as f:
            f.write(json.dumps(line, default=str) + "\n")


def default_tracking_uri(home: Path, cfg: TrackConfig | None = None) -> str:
    """Config, else MLFLOW_TRACKING_URI, else a sqlite file under the local home."""
    if cfg is not None and cfg.tracking_uri:
        return cfg.tracking_uri
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{home.absolute() / 'mlflow.db'}"


def prepare_environment(cfg: TrackConfig) -> None:
    """Short retries for a down server; S3 artifacts go to the same endpoint as our data."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", str(cfg.http_retries))
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(cfg.http_timeout_s))
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # stdout may be JSON
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        os.environ.setdefault("MLFLOW_S3_ENDPOINT_URL", endpoint)


def create_tracker(cfg: Any, rank: int = 0) -> Tracker:
    """The tracker for a command: MLflow on rank 0 when tracking is on, else the null tracker."""
    track: TrackConfig = getattr(cfg, "track", None) or TrackConfig()
    if not track.enabled or rank != 0:
        return NullTracker()
    prepare_environment(track)
    install_log_redaction()
    home = cfg.home_path
    uri = default_tracking_uri(home, track)
    artifacts = track.artifact_location
    if artifacts is None and uri.startswith("sqlite:"):
        artifacts = (home.absolute() / "mlartifacts").as_uri()
    return MlflowTracker(uri, track.experiment, artifacts, home / "tracking-spool")


def git_commit(repo: Path | None = None) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=repo or Path(__file__).resolve().parents[2])
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def run_tags(cfg: Any, **extra: object) -> dict[str, object]:
    """Tags every command run carries: git commit, model, plus dataset URIs and the like."""
    tags = {"git_commit": git_commit(), "model": cfg.model.path, "mlflow.source.git.commit": git_commit()}
    return {**tags, **{k: v for k, v in extra.items() if v is not None}}


@contextlib.contextmanager
def command_run(tracker: Tracker, cfg: Any, name: str, tags: Mapping[str, object] | None = None,
                params: Mapping[str, object] | None = None) -> Iterator[str | None]:
    """One parent run per command: the full resolved config as params (redacted), tags set."""
    with tracker.start_run(name) as run_id:
        tracker.log_params({**flatten(cfg.model_dump(mode="json")), **(params or {})})
        tracker.set_tags({"command": name, **run_tags(cfg), **(tags or {})})
        yield run_id
