"""Resolving a model reference (pipelines.models.refs) to an HF folder on this machine."""

from __future__ import annotations

from pathlib import Path

from pipelines.errors import UserError
from pipelines.models.refs import absolute_ref, kind_of
from pipelines.models.store import store_model
from pipelines.storage import download_prefix, exists, inside

WEIGHT_SUFFIXES = (".safetensors", ".bin")


def check_model_dir(path: Path, ref: str) -> Path:
    """The folder, absolute, if it holds a model; else a one-line error naming `ref`."""
    if not path.exists():
        raise UserError(f"model '{ref}': no such folder")
    if not path.is_dir():
        raise UserError(f"model '{ref}': not a folder")
    if not (path / "config.json").is_file():
        raise UserError(f"model '{ref}': not a model folder (no config.json)")
    if not any(p.suffix in WEIGHT_SUFFIXES for p in path.iterdir()):
        raise UserError(f"model '{ref}': not a model folder (no weights)")
    return path.absolute()


def resolve_model(ref: str, home: Path, tracking_uri: str | None = None) -> Path:
    """An absolute HF folder on local disk for any model reference; imports built-ins on first
    use. `models:/` refs are fetched from `tracking_uri` (default: MLFLOW_TRACKING_URI, else local)."""
    kind = kind_of(ref)
    if kind == "s3":
        cache = inside(home / "cache" / "s3", ref[len("s3://"):].strip("/"), "model")
        return check_model_dir(download_prefix(ref, cache), ref)
    if kind == "registry":  # a registered MLflow model version, cached once fetched
        from pipelines.models.registry import fetch_registered

        return check_model_dir(fetch_registered(ref, home, tracking_uri), ref)
    if kind == "store":
        return check_model_dir(store_model(ref, home), ref)
    return check_model_dir(Path(ref).expanduser(), ref)


def config_model_dir(cfg, ref: str | None = None) -> Path:
    """resolve_model with the config's home and tracking server: what every command uses."""
    from pipelines.track.tracker import default_tracking_uri

    return resolve_model(ref or cfg.model.path, cfg.home_path, default_tracking_uri(cfg.home_path, cfg.track))


def check_remote_ref(ref: str, what: str = "weights") -> str:
    """A reference for workers that resolve it themselves (absolute_ref), checked here without
    fetching it: a local folder must hold a model, an s3:// prefix a config.json."""
    kind = kind_of(ref)
    if kind == "s3" and not exists(ref.rstrip("/") + "/config.json"):
        raise UserError(f"{what} '{ref}': no config.json under this prefix")
    if kind == "folder":
        return str(check_model_dir(Path(ref).expanduser(), ref))
    return absolute_ref(ref)
