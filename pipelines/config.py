"""Typed configuration: pydantic models, YAML files in configs/, dotted overrides.

    cfg = load_config("configs/local.yaml", ["agent.chunk_size=1024"])

Unknown keys anywhere are rejected with their dotted name.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError

from pipelines.errors import UserError
from pipelines.eval.config import EvalConfig
from pipelines.ingest.config import IngestConfig
from pipelines.rollout.config import RolloutConfig
from pipelines.serve.config import ServeConfig
from pipelines.track.config import TrackConfig
from pipelines.typed import Strict

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = REPO_ROOT / "configs" / "local.yaml"


class ModelConfig(Strict):
    # A name in the local model store ("smollm2"), an HF folder, or s3://bucket/prefix.
    path: str = "smollm2"


class EngineConfig(Strict):
    kind: Literal["vllm", "hf", "hf_batch"] = "vllm"
    dtype: str = "bfloat16"
    max_model_len: int = 8192
    max_num_seqs: int = 64
    enforce_eager: bool = True
    # CPU build: KV-cache size in GiB (VLLM_CPU_KVCACHE_SPACE). GPU build: memory fraction.
    cpu_kvcache_gib: int = 2
    # CPU build: cores kept for vLLM's scheduler process; None: 0 up to 4 cores, else 1.
    cpu_reserved_cores: int | None = Field(None, ge=0)
    gpu_memory_utilization: float = 0.85
    tensor_parallel_size: int = 1
    seed: int = 0
    # hf_batch: tokens one forward step packs (prefill chunks + decodes).
    max_batch_tokens: int = Field(2048, gt=0)


class AgentConfig(Strict):
    template: str = "release"
    chunk_size: int = Field(5000, gt=0)
    memory_budget: int = Field(1024, gt=0)
    final_budget: int = Field(1024, gt=0)
    question_budget: int = Field(1024, gt=0)
    temperature: float = Field(0.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: int = 0


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
    serve: ServeConfig = ServeConfig()
    track: TrackConfig = TrackConfig()
    eval: EvalConfig = EvalConfig()
    ingest: IngestConfig = IngestConfig()
    rollout: RolloutConfig = RolloutConfig()

    @property
    def home_path(self) -> Path:
        home = Path(os.environ.get("MEMAGENT_HOME", self.home)).expanduser()
        return home if home.is_absolute() else (Path.cwd() / home)


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


def load_config(path: str | Path | None = None, overrides: list[str] = ()) -> Config:
    path = Path(path) if path else DEFAULT_CONFIG
    if not path.is_file():
        raise UserError(f"config '{path}': no such file")
    try:
        tree = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise UserError(f"config '{path}': not valid YAML ({e.__class__.__name__})")
    if not isinstance(tree, dict):
        raise UserError(f"config '{path}': top level must be a mapping")
    for item in overrides:
        apply_override(tree, *parse_override(item))
    return validate(tree, str(path))


def validate(tree: dict, source: str) -> Config:
    try:
        return Config.model_validate(tree)
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            raise UserError(f"config '{source}': unknown key '{key}'")
        raise UserError(f"config '{source}': '{key}': {err['msg']}")
