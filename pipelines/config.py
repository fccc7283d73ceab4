"""Typed configuration: composes each package's section; loads YAML files with dotted overrides.

    cfg = load_config("rl-smollm2", ["agent.chunk_size=1024"])    # a preset, by name
    cfg = load_config("site/my.yaml")                            # any file, by path

The presets live in configs/ (top level); pipelines/configs is a link to it, so an installed wheel has them.

Each section lives with its package (agent.config, engine.config, rollout.config, ...);
unknown keys anywhere are rejected with their dotted name.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from pipelines.agent.config import AgentConfig
from pipelines.cluster.config import ClusterConfig
from pipelines.data.config import DataConfig
from pipelines.engine.config import EngineConfig
from pipelines.errors import UserError
from pipelines.eval.config import EvalConfig
from pipelines.ingest.config import IngestConfig
from pipelines.learn.config import LearnConfig
from pipelines.quickstart.config import QuickstartConfig
from pipelines.rollout.config import RolloutConfig
from pipelines.serve.config import ServeConfig
from pipelines.track.config import TrackConfig
from pipelines.typed import Strict

REPO_ROOT = Path(__file__).resolve().parent.parent
PRESETS = Path(__file__).resolve().parent / "configs"
DEFAULT_CONFIG = PRESETS / "local.yaml"


class ModelConfig(Strict):
    # A name in the local model store ("smollm2"), an HF folder, or s3://bucket/prefix.
    path: str = "smollm2"


class S3Config(Strict):
    # Endpoint of an S3-compatible store (SeaweedFS, MinIO); None: AWS_ENDPOINT_URL or AWS itself.
    # Keys come only from the standard AWS environment variables, never from config files.
    endpoint_url: str | None = None
    region: str = "us-east-1"


class Config(Strict):
    # Local home: model store, caches, default tracking db. MEMAGENT_HOME overrides.
    home: str = ".memagent"
    model: ModelConfig = ModelConfig()
    engine: EngineConfig = EngineConfig()
    agent: AgentConfig = AgentConfig()
    s3: S3Config = S3Config()
    data: DataConfig = DataConfig()
    serve: ServeConfig = ServeConfig()
    track: TrackConfig = TrackConfig()
    eval: EvalConfig = EvalConfig()
    ingest: IngestConfig = IngestConfig()
    rollout: RolloutConfig = RolloutConfig()
    learn: LearnConfig = LearnConfig()
    cluster: ClusterConfig = ClusterConfig()
    quickstart: QuickstartConfig = QuickstartConfig()

    @property
    def home_path(self) -> Path:
        return home_dir(self.home)


def home_dir(default: str | Path) -> Path:
    """The local home on this node: MEMAGENT_HOME where it is set, else `default` (relative to the
    working directory). Ray actors call it too: on a cluster each node keeps its own caches,
    and a node that sets no MEMAGENT_HOME uses the absolute home the driver handed it."""
    home = Path(os.environ.get("MEMAGENT_HOME", default)).expanduser()
    if home.is_absolute():
        return home
    try:
        return Path.cwd() / home
    except FileNotFoundError:  # the shell's folder was deleted under it
        raise UserError(f"home '{home}': relative to the working directory, which no longer exists "
                        "(cd to a folder, or set MEMAGENT_HOME to an absolute path)") from None


def writable_home(home: Path) -> Path:
    """HOME, created if missing; one line naming it when it cannot be (a file in its path, no
    permission), before any command writes its logs, models or caches under it."""
    try:
        home.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=home, prefix=".write-check-"):
            pass
    except OSError as e:
        raise UserError(f"home '{home}' (MEMAGENT_HOME, or the config's home): not a writable folder "
                        f"({e.strerror or e.__class__.__name__})") from None
    return home


def parse_override(item: str) -> tuple[list[str], Any]:
    if "=" not in item:
        raise UserError(f"override '{item}': expected key=value, e.g. agent.chunk_size=1024")
    key, raw = item.split("=", 1)
    return key.strip().split("."), yaml.safe_load(raw) if raw != "" else ""


def apply_override(tree: dict, keys: list[str], value: Any) -> None:
    node = tree
    for k in keys[:-1]:
        node = node.setdefault(k, {})
        if not isinstance(node, dict):
            raise UserError(f"override '{'.'.join(keys)}': '{k}' is not a section")
    node[keys[-1]] = value


def read_tree(path: Path, seen: tuple[Path, ...] = ()) -> dict:
    """A YAML config as a dict; `base: other.yaml` (relative to this file) is read first and
    this file's keys are merged over it, so a preset states only what it changes."""
    if not path.is_file():
        raise UserError(f"config '{path}': no such file")
    if path.resolve() in seen:
        raise UserError(f"config '{path}': its base chain loops")
    try:
        tree = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise UserError(f"config '{path}': not valid YAML ({e.__class__.__name__})")
    if not isinstance(tree, dict):
        raise UserError(f"config '{path}': top level must be a mapping")
    base = tree.pop("base", None)
    if base is None:
        return tree
    base_path = preset_path(base) if is_preset_name(base) else path.parent / str(base)
    return merge(read_tree(base_path, (*seen, path.resolve())), tree)


def merge(under: dict, over: dict) -> dict:
    out = dict(under)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def is_preset_name(name: str | Path) -> bool:
    """A bare name ("rl-smollm2": no folder, no .yaml) means a packaged preset; anything else
    is a path, so a file in the working directory is still named with its .yaml."""
    text = str(name)
    return "/" not in text and os.sep not in text and not text.endswith((".yaml", ".yml"))


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESETS.glob("*.yaml"))


def preset_path(name: str | Path) -> Path:
    path = PRESETS / f"{name}.yaml"
    if not path.is_file():
        raise UserError(f"config '{name}': no such preset (presets: {', '.join(preset_names())}; a file needs its .yaml)")
    return path


def load_config(path: str | Path | None = None, overrides: list[str] = ()) -> Config:
    """`path`: a preset's name, a YAML file, or None for DEFAULT_CONFIG."""
    path = DEFAULT_CONFIG if not path else preset_path(path) if is_preset_name(path) else Path(path)
    tree = read_tree(path)
    for item in overrides:
        apply_override(tree, *parse_override(item))
    return validate(tree, str(path))


# Keys that moved: a config that still names one is told where it went, not only that it is unknown.
MOVED = {"ingest.store": "data.store", "rollout.store": "data.store", "eval.store": "data.store"}


def validate(tree: dict, source: str) -> Config:
    try:
        return Config.model_validate(tree)
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden" and key in MOVED:
            raise UserError(f"config '{source}': '{key}' is gone; the chunk store is '{MOVED[key]}' now")
        if err["type"] == "extra_forbidden":
            raise UserError(f"config '{source}': unknown key '{key}'")
        raise UserError(f"config '{source}': '{key}': {err['msg']}")
