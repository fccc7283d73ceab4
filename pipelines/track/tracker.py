"""Tracking behind a small interface: MLflow, or a null tracker for dry runs and ranks > 0.

    tracker = create_tracker(cfg)
    with command_run(tracker, cfg, "eval", tags={"model": ref}):
        tracker.log_metrics({"eval/hotpotqa/8K/sub_em": 0.5}, step=0)

The run tree: a standalone command is a top-level run named by command and model (`eval
smollm2`); a pipeline (the quickstart, a continuous-training round) opens one parent run with
`pipeline_run`, and every command run opened inside a `stage(name)` of it is that parent's child,
named by the stage (`eval-base`, `sft`, ...). Parent and stage live in context variables, so
the stages need no tracker of the pipeline's.

A tracking server that is down never costs a run its results or its progress: the first
failure logs one warning; metrics, params, tags and the run's end wait in a bounded outbox
(track/outbox.py) and reach the server in order when it answers again (tried again every
track.retry_s); what cannot wait (artifacts, models, traces, a run the server never created)
and whatever is still held when the run ends go to a local JSONL spool, counted.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from pipelines.track.config import TrackConfig
from pipelines.track.outbox import Held, Outbox
from pipelines.track.redact import env_secrets, flatten, install_log_redaction, redact, redact_params

log = logging.getLogger("memagent.track")
MAX_PARAM_LEN = 6000
_PARENT: contextvars.ContextVar[str | None] = contextvars.ContextVar("memagent_parent_run", default=None)
TRAINED_LEAVES = ("best", "final")
_CONFIG: contextvars.ContextVar[str | None] = contextvars.ContextVar("memagent_config", default=None)
_STAGE: contextvars.ContextVar[str | None] = contextvars.ContextVar("memagent_stage", default=None)
# A stage a pipeline runs as another process (benchmarks/learning.py runs `memagent train` and
# `memagent eval`): the pipeline's run and the stage's name reach that process's command run here.
PARENT_ENV, STAGE_ENV = "MEMAGENT_PARENT_RUN", "MEMAGENT_STAGE"


class Tracker(Protocol):
    run_id: str | None

    def start_run(self, name: str, nested: bool = False) -> contextlib.AbstractContextManager: ...

    def log_params(self, params: Mapping[str, object]) -> None: ...

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None: ...

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None: ...

    def set_tags(self, tags: Mapping[str, object]) -> None: ...

    def log_datasets(self, datasets: list) -> None: ...

    def log_model(self, name: str, path: str, metrics: Mapping[str, float] | None = None,
                  params: Mapping[str, object] | None = None) -> str | None: ...

    def log_traces(self, traces: list) -> list[str]: ...


class NullTracker:
    """Records nothing: tracking off, dry runs, non-zero ranks."""

    run_id: str | None = None

    @contextlib.contextmanager
    def start_run(self, name: str, nested: bool = False, parent: str | None = None) -> Iterator[None]:
        yield None

    def log_params(self, params: Mapping[str, object]) -> None:
        pass

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        pass

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        pass

    def set_tags(self, tags: Mapping[str, object]) -> None:
        pass

    def log_datasets(self, datasets: list) -> None:
        pass

    def log_model(self, name: str, path: str, metrics: Mapping[str, float] | None = None,
                  params: Mapping[str, object] | None = None) -> str | None:
        return None

    def log_traces(self, traces: list) -> list[str]:
        return []


OFFLINE = "offline-"  # the id of a run the server never created (it was down at the start)


class MlflowTracker:
    """MLflow through its client (explicit run ids, no global fluent state); rides out a server
    that is down (the module's docstring)."""

    def __init__(self, uri: str, experiment: str, artifact_location: str | None, spool_dir: Path,
                 buffer_records: int = 10_000, retry_s: float = 30.0):
        self.uri, self.experiment, self.artifact_location = uri, experiment, artifact_location
        self.spool_dir, self.retry_s = spool_dir, retry_s
        self.degraded: str | None = None  # the failure of the outage under way, None while up
        self.outbox = Outbox(buffer_records, self._spool)
        self._retry_at = 0.0  # time.monotonic() before which a down server is not tried again
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
    def start_run(self, name: str, nested: bool = False, parent: str | None = None) -> Iterator[str | None]:
        """parent: a run of another tracker (a pipeline's); nested: this tracker's open run."""
        parent = self._stack[-1] if (nested and self._stack) else parent
        tags = {"mlflow.parentRunId": parent} if parent else {}
        run_id = self._safe("start_run", lambda: self.client.create_run(
            self.experiment_id(), run_name=name, tags=tags).info.run_id, {"name": name, "parent": parent},
            run=None)
        run_id = run_id or f"{OFFLINE}{name}-{int(time.time())}-{os.getpid()}"
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
            self._safe("end_run", lambda: self.client.set_terminated(run_id, status), {"status": status},
                       replay=True)
            self._stack.pop()
            self.run_id = self._stack[-1] if self._stack else None
            if not self._stack:
                self.close()

    def log_params(self, params: Mapping[str, object]) -> None:
        from mlflow.entities import Param

        clean = {k: v[:MAX_PARAM_LEN] for k, v in redact_params(params, env_secrets()).items()}
        items, rid = [Param(k, v) for k, v in clean.items()], self._rid()
        for i in range(0, len(items), 100):
            self._safe("params", lambda b=items[i:i + 100]: self.client.log_batch(rid, params=b), clean, replay=True)

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        from mlflow.entities import Metric

        now, rid = int(time.time() * 1000), self._rid()
        items = [Metric(k, float(v), now, step or 0) for k, v in metrics.items() if v is not None]
        for i in range(0, len(items), 500):
            self._safe("metrics", lambda b=items[i:i + 500]: self.client.log_batch(rid, metrics=b),
                       {"metrics": dict(metrics), "step": step}, replay=True)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        self._safe("artifact", lambda: self.client.log_artifact(self._rid(), str(path), artifact_path),
                   {"path": str(Path(path).absolute()), "artifact_path": artifact_path})

    def set_tags(self, tags: Mapping[str, object]) -> None:
        from mlflow.entities import RunTag

        clean = redact_params({k: v for k, v in tags.items() if v is not None}, env_secrets())
        items, rid = [RunTag(k, v[:MAX_PARAM_LEN]) for k, v in clean.items()], self._rid()
        self._safe("tags", lambda: self.client.log_batch(rid, tags=items), clean, replay=True)

    def log_datasets(self, datasets: list) -> None:
        """datasets: track.datasets.DatasetRef's, each an input of the open run with its context; one
        that cannot be listed is left out with a warning."""
        from pipelines.track.datasets import dataset_input

        inputs = []
        for d in datasets:
            try:
                found = dataset_input(d)
            except Exception as e:  # noqa: BLE001 - a dataset that cannot be listed costs its input only
                log.warning("tracking: dataset '%s' not logged (%s)", redact(d.uri, env_secrets()),
                            redact(str(e).splitlines()[0] if str(e) else type(e).__name__, env_secrets()))
                continue
            if found is not None:
                inputs.append(found)
        if not inputs:
            return
        rid = self._rid()
        self._safe("datasets", lambda: self.client.log_inputs(rid, datasets=inputs),
                   [d.__dict__ for d in datasets], replay=True)

    def log_model(self, name: str, path: str, metrics: Mapping[str, float] | None = None,
                  params: Mapping[str, object] | None = None) -> str | None:
        """The open run's model as an MLflow logged model (no files: registering it uploads them,
        pipelines/models/registry.py); `metrics` (held-out scores) attached to it. Its id."""
        from mlflow.entities import Metric

        def create() -> str:
            clean = {k: v[:MAX_PARAM_LEN] for k, v in redact_params(params or {}, env_secrets()).items()}
            lm = self.client.create_logged_model(self.experiment_id(), name=name, source_run_id=self._rid(),
                                                 params=clean, tags={"path": redact(path, env_secrets())})
            now = int(time.time() * 1000)
            points = [Metric(k, float(v), now, 0, model_id=lm.model_id) for k, v in (metrics or {}).items()]
            if points:
                self.client.log_batch(self._rid(), metrics=points)
            self.client.finalize_logged_model(lm.model_id, "READY")
            return lm.model_id
        return self._safe("model", create, {"name": name, "path": path, "metrics": dict(metrics or {})})

    def log_traces(self, traces: list) -> list[str]:
        """track.traces.TraceSpec's as MLflow traces linked to the open run; their ids."""
        from pipelines.track.traces import write_traces

        ids = self._safe("traces", lambda: write_traces(self.uri, self.experiment_id(), self._rid(), traces),
                         {"traces": [t.name for t in traces]})
        return ids or []

    def _rid(self) -> str:
        if not self._stack:
            raise RuntimeError("no active run: use `with tracker.start_run(name):`")
        return self._stack[-1]

    def _safe(self, kind: str, call, record: Any = None, replay: bool = False, run: str | None | bool = True):
        """call() now, after every held record, when the server is thought up; else (or when it
        fails) hold it for later (replay: a record whose call can be made later), or spool it.
        run: the run it belongs to (True: the open run; None: none, starting one)."""
        run = self._rid() if run is True else run
        offline = run is not None and run.startswith(OFFLINE)
        if not offline and (self.degraded is None or time.monotonic() >= self._retry_at):
            try:
                sent = self.outbox.flush()
                result = call()
                self._back(sent)
                return result
            except Exception as e:  # any tracking failure: warn once, keep the run going
                self._down(e)
        if replay and not offline:
            self.outbox.put(Held(kind, run, call, record))
        else:
            self._spool(Held(kind, run, call, record))
        return None

    def _down(self, err: Exception) -> None:
        self._retry_at = time.monotonic() + self.retry_s
        if self.degraded is not None:
            return
        secrets = env_secrets()
        first = (str(err).strip().splitlines() or [err.__class__.__name__])[0][:300]
        self.degraded = redact(first, secrets)
        log.warning("tracking: %s failed (%s); continuing without it: records held (up to %d) and sent when "
                    "it answers, tried every %g s; what cannot wait kept in %s", redact(self.uri, secrets),
                    self.degraded, self.outbox.limit, self.retry_s, self.spool_dir)

    def _back(self, sent: int) -> None:
        if self.degraded is not None:
            log.warning("tracking: %s answers again; %d held records sent", redact(self.uri, env_secrets()), sent)
            self.degraded = None

    def close(self) -> None:
        """The last run ended: send what is held, or spool it with one line that counts it."""
        if self.outbox:
            try:
                self._back(self.outbox.flush())
            except Exception:  # noqa: BLE001 - still down: the spool keeps them
                pass
        lost = self.outbox.spill() + self.outbox.dropped
        if lost:
            log.warning("tracking: %d records did not reach %s (it was down); kept in %s", lost,
                        redact(self.uri, env_secrets()), self.spool_dir)
        self.outbox.dropped = 0

    def _spool(self, item: Held) -> None:
        if item.record is None:
            return
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        line = {"time": time.time(), "kind": item.kind, "run": item.run, "record": item.record}
        with open(self.spool_dir / f"{item.run or 'no-run'}.jsonl", "a") as f:
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
    os.environ.setdefault("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "false")  # traces written as logged: no exit queue
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
    return MlflowTracker(uri, track.experiment, artifacts, home / "tracking-spool", track.buffer_records,
                         track.retry_s)


def git_commit(repo: Path | None = None) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=repo or Path(__file__).resolve().parents[2])
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


@contextlib.contextmanager
def _scoped(var: contextvars.ContextVar, value: str | None) -> Iterator[None]:
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)


def config_named(name: str) -> contextlib.AbstractContextManager[None]:
    """Runs opened inside record `name` as their config (a command that loads its own preset)."""
    return _scoped(_CONFIG, name)


def config_source(argv: list[str] | None = None) -> str:
    """The config a command runs on: the --config the command line named (a preset or a YAML
    file), else the one config_named gave, else `default`."""
    if argv is None and _CONFIG.get() is not None:
        return _CONFIG.get()
    argv = sys.argv[1:] if argv is None else argv
    for i, a in enumerate(argv):
        if a == "--config" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--config="):
            return a.split("=", 1)[1]
    return "default"


def run_tags(cfg: Any, **extra: object) -> dict[str, object]:
    """Tags every command run carries: git commit, config file, model, plus dataset URIs and the like."""
    commit = git_commit()
    tags = {"git_commit": commit, "mlflow.source.git.commit": commit, "config": config_source(),
            "model": cfg.model.path}
    return {**tags, **{k: v for k, v in extra.items() if v is not None}}


def short_model(ref: str) -> str:
    """A model reference's short name: `models:/NAME/V` or `models:/NAME@ALIAS` -> NAME, a store
    name, HF id, folder or URI -> its last part (a training output's OUT/best or OUT/final: OUT's)."""
    if ref.startswith("models:/"):
        return ref.removeprefix("models:/").split("/")[0].split("@")[0]
    parts = [p for p in ref.rstrip("/").split("/") if p]
    while len(parts) > 1 and parts[-1] in TRAINED_LEAVES:  # a training run's OUT/best, OUT/final: OUT's name
        parts.pop()
    return parts[-1] if parts else ref


def run_name(command: str, cfg: Any, label: str | None = None) -> str:
    """The run's name: the pipeline stage it is (a stage run), else `command label` (default
    label: the model's short name)."""
    return _staged() or f"{command} {label or short_model(cfg.model.path)}"


def config_label() -> str | None:
    """The --config's short name (`rl-smollm2` of a preset or of rl-smollm2.yaml); None without one."""
    source = config_source()
    return None if source == "default" else Path(source).name.removesuffix(".yaml").removesuffix(".yml")


def train_label(cfg: Any, sft: bool) -> str:
    """A training run's label: the config's name (`rl-smollm2`), else the kind and the model (`sft-smollm2`)."""
    return config_label() or f"{'sft' if sft else 'rl'}-{short_model(cfg.model.path)}"


def parent_tags() -> dict[str, str]:
    """Inside a pipeline's stage: the tags that make a run opened elsewhere (a Serve deployment's)
    that stage's child run; else none."""
    parent, staged = _parent(), _staged()
    return {"mlflow.parentRunId": parent, "stage": staged} if parent and staged else {}


def _parent() -> str | None:
    return _PARENT.get() or os.environ.get(PARENT_ENV) or None


def _staged() -> str | None:
    return _STAGE.get() or os.environ.get(STAGE_ENV) or None


def stage_env(name: str) -> dict[str, str]:
    """The environment of a process that runs this pipeline's stage `name` (see PARENT_ENV): its
    command run is then that stage's child run; {} outside a tracked pipeline."""
    parent = _PARENT.get()
    return {PARENT_ENV: parent, STAGE_ENV: name} if parent else {}


def stage(name: str) -> contextlib.AbstractContextManager[None]:
    """Command runs opened inside are the pipeline's child named `name`."""
    return _scoped(_STAGE, name)


@contextlib.contextmanager
def command_run(tracker: Tracker, cfg: Any, name: str, tags: Mapping[str, object] | None = None,
                params: Mapping[str, object] | None = None, label: str | None = None) -> Iterator[str | None]:
    """One run per command (the pipeline's child inside a stage): the full resolved config as
    params (redacted), tags set; named as run_name says."""
    staged = _staged()
    with tracker.start_run(run_name(name, cfg, label), parent=_parent() if staged else None) as run_id:
        tracker.log_params({**flatten(cfg.model_dump(mode="json")), **(params or {})})
        tracker.set_tags({"command": name, **({"stage": staged} if staged else {}), **run_tags(cfg),
                          **(tags or {})})
        yield run_id


@contextlib.contextmanager
def pipeline_run(tracker: Tracker, cfg: Any, name: str, tags: Mapping[str, object] | None = None
                 ) -> Iterator[str | None]:
    """The parent run of a pipeline invocation (named `name`): the stages inside nest under it."""
    token = _STAGE.set(None)
    try:
        with tracker.start_run(name) as run_id:
            tracker.log_params(flatten(cfg.model_dump(mode="json")))
            tracker.set_tags({"command": name, "pipeline": name, **run_tags(cfg), **(tags or {})})
            with nested_under(run_id if isinstance(tracker, MlflowTracker) else None):
                yield run_id
    finally:
        _STAGE.reset(token)


def nested_under(run_id: str | None) -> contextlib.AbstractContextManager[None]:
    """Stages opened inside are `run_id`'s children (a pipeline's run, a continuous-training round's)."""
    return _scoped(_PARENT, run_id)
