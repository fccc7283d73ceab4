"""The MLflow model registry: register a model folder as a version, and fetch `models:/` refs.

    memagent model register --model smollm2 --name memagent-smollm2 --metrics out/summary.json --alias champion
    memagent ask --doc d.txt --question q model.path=models:/memagent-smollm2@champion

A reference is `models:/NAME/VERSION`, `models:/NAME/latest` or `models:/NAME@ALIAS`.
Fetched versions are cached under HOME/cache/registry (a version never changes).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from pipelines.errors import UserError
from pipelines.models.refs import RegistryRef, parse_registry_ref
from pipelines.storage import aside, inside, into_place
from pipelines.track.config import TrackConfig
from pipelines.track.redact import env_secrets, redact
from pipelines.track.traces import global_uri
from pipelines.track.tracker import MlflowTracker, default_tracking_uri, git_commit, prepare_environment


def _client(uri: str):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def _fail(ref: str, uri: str, err: Exception) -> UserError:
    first = (str(err).strip().splitlines() or [err.__class__.__name__])[0][:300]
    return UserError(redact(f"model '{ref}': {first} (tracking at {uri})", env_secrets()))


def resolve_version(client, ref: RegistryRef) -> str:
    if ref.alias:
        return str(client.get_model_version_by_alias(ref.name, ref.alias).version)
    if ref.version == "latest":
        versions = client.search_model_versions(f"name='{ref.name}'")
        if not versions:
            raise LookupError(f"registered model '{ref.name}' has no versions")
        return str(max(int(v.version) for v in versions))
    return ref.version


def alias_version(name: str, alias: str, home: Path, track: TrackConfig) -> int | None:
    """The version `models:/NAME@ALIAS` names now; None if the name or the alias does not exist."""
    prepare_environment(track)
    return version_at(default_tracking_uri(home, track), name, alias)


def version_at(uri: str, name: str, alias: str) -> int | None:
    """alias_version against the tracking server at `uri` (for processes without the config)."""
    from mlflow.exceptions import MlflowException

    try:
        return int(_client(uri).get_model_version_by_alias(name, alias).version)
    except MlflowException:
        return None


def fetch_registered(ref: str, home: Path, uri: str | None = None) -> Path:
    """A local HF folder for a registered model version (downloaded once, then cached)."""
    parsed = parse_registry_ref(ref)
    prepare_environment(TrackConfig())
    uri = uri or default_tracking_uri(home)
    client = _client(uri)
    try:
        version = resolve_version(client, parsed)
        dest = inside(home / "cache" / "registry", f"{parsed.name}/{version}", "model")
        if (dest / "config.json").is_file():
            return dest
        source = client.get_model_version_download_uri(parsed.name, version)  # a logged model's: its files
        tmp = Path(aside(str(dest)))  # the artifact lands in a folder of its own name inside
        tmp.mkdir(parents=True)
        try:
            from mlflow.artifacts import download_artifacts

            into_place(download_artifacts(artifact_uri=source, dst_path=str(tmp), tracking_uri=uri), dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except UserError:
        raise
    except Exception as e:
        raise _fail(ref, redact(uri), e) from None
    return dest


def register_model(model_dir: Path, name: str, home: Path, track: TrackConfig,
                   metrics: dict[str, float] | None = None, alias: str | None = None,
                   tags: dict[str, str] | None = None, run_id: str | None = None) -> str:
    """Register the folder as a new version of `name`; returns models:/NAME/V.

    The version points to an MLflow logged model (version -> logged model -> run -> datasets):
    the one its training run `run_id` logged (pipelines/learn/recipe.py), else one made here, in
    a run of its own when run_id is None. The folder is uploaded into the logged model once;
    `metrics` (held-out figures) go onto the run, the logged model and the version's tags."""
    from pipelines.models.settings import version_tags

    prepare_environment(track)
    uri = default_tracking_uri(home, track)
    artifacts = track.artifact_location
    if artifacts is None and uri.startswith("sqlite:"):
        artifacts = (home.absolute() / "mlartifacts").as_uri()
    tracker = MlflowTracker(uri, track.experiment, artifacts, home / "tracking-spool")
    client = tracker.client
    try:
        own = run_id is None
        if own:
            run_id = client.create_run(tracker.experiment_id(), run_name=f"register-{name}",
                                       tags={"command": "model register", "git_commit": git_commit() or "",
                                             **(tags or {})}).info.run_id
        else:
            for k, v in (tags or {}).items():
                client.set_tag(run_id, k, v)
        model_id = logged_model(client, tracker.experiment_id(), run_id, name)
        client.log_model_artifacts(model_id, str(model_dir))
        if metrics:
            from mlflow.entities import Metric

            client.log_batch(run_id, metrics=[Metric(k, float(v), 0, 0, model_id=model_id)
                                              for k, v in metrics.items()])
        if own:
            client.set_terminated(run_id)
        _ensure_registered(client, name)
        with global_uri(uri):  # the store resolves models:/<id> through the global client
            mv = client.create_model_version(name, f"models:/{model_id}", run_id=run_id, model_id=model_id,
                                             tags={**{k: str(v) for k, v in (metrics or {}).items()},
                                                   **version_tags(model_dir)})
        link_version(client, model_id, name, str(mv.version))
        if alias:
            client.set_registered_model_alias(name, alias, mv.version)
    except Exception as e:
        raise _fail(f"models:/{name}", redact(uri), e) from None
    return f"models:/{name}/{mv.version}"


def logged_model(client, experiment_id: str, run_id: str, name: str) -> str:
    """The id of the logged model run `run_id` made (its latest), else of a new one of that run."""
    found = client.search_logged_models([experiment_id], filter_string=f"source_run_id = '{run_id}'",
                                        order_by=[{"field_name": "creation_timestamp", "ascending": False}])
    if found:
        return found[0].model_id
    lm = client.create_logged_model(experiment_id, name=name, source_run_id=run_id)
    client.finalize_logged_model(lm.model_id, "READY")
    return lm.model_id


def link_version(client, model_id: str, name: str, version: str) -> None:
    """The logged model lists its registered versions (tag mlflow.modelVersions, as mlflow.register_model
    writes it; a server's registry adds it itself, a local store does not): the UI links the model to them."""
    from mlflow.utils.mlflow_tags import MLFLOW_MODEL_VERSIONS

    known = client.get_logged_model(model_id).tags.get(MLFLOW_MODEL_VERSIONS)
    listed = json.loads(known) if known else []
    if any(v.get("name") == name and str(v.get("version")) == version for v in listed):
        return  # a tracking server's registry lists it itself
    listed.append({"name": name, "version": version})
    client.set_logged_model_tags(model_id, {MLFLOW_MODEL_VERSIONS: json.dumps(listed)})


def _ensure_registered(client, name: str) -> None:
    from mlflow.exceptions import MlflowException

    try:
        client.create_registered_model(name)
    except MlflowException as e:
        if "RESOURCE_ALREADY_EXISTS" not in str(e.error_code) and "already exists" not in str(e):
            raise


def read_metrics_file(path: str) -> dict[str, float]:
    """A flat {name: number} JSON (e.g. an eval's summary.json `metrics`)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"metrics '{path}': cannot read JSON ({e.__class__.__name__})") from None
    data = data.get("metrics", data) if isinstance(data, dict) else None
    if not isinstance(data, dict) or not all(isinstance(v, (int, float)) for v in data.values()):
        raise UserError(f"metrics '{path}': expected a JSON object of numbers (or one under 'metrics')")
    return {k: float(v) for k, v in data.items()}

