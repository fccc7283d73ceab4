"""Loading the model's fast tokenizer, and naming it so stores can be checked against it."""

from __future__ import annotations

import hashlib
import json
import weakref
from pathlib import Path
from typing import Any

_IDS: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


def vocab_hash(tokenizer: Any) -> str:
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    return hashlib.sha256(json.dumps(vocab, ensure_ascii=False).encode()).hexdigest()[:16]


def tokenizer_id(tokenizer: Any) -> str:
    """'<model name>@<vocab hash>': two tokenizers with the same hash give the same ids."""
    try:
        return _IDS[tokenizer]
    except (KeyError, TypeError):
        pass
    name = Path(str(getattr(tokenizer, "name_or_path", "") or "tokenizer")).name
    tid = f"{name}@{vocab_hash(tokenizer)}"
    try:
        _IDS[tokenizer] = tid
    except TypeError:
        pass
    return tid


def same_vocab(a: str, b: str) -> bool:
    return a.rsplit("@", 1)[-1] == b.rsplit("@", 1)[-1]


def load_backend(model_ref: str, home: Path) -> tuple[Any, str]:
    """(the fast tokenizer's Rust backend, its tokenizer id), without importing transformers
    when the model folder has a tokenizer.json (seconds saved per Ray actor)."""
    from pipelines.models import resolve_model

    model_dir = resolve_model(model_ref, home)
    if (model_dir / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        backend = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        return backend, f"{model_dir.name}@{vocab_hash(backend)}"
    tokenizer = load_tokenizer(model_ref, home)
    if getattr(tokenizer, "backend_tokenizer", None) is None:
        from pipelines.errors import UserError

        raise UserError(f"model '{model_ref}': ingest needs a fast tokenizer (tokenizer.json)")
    return tokenizer.backend_tokenizer, tokenizer_id(tokenizer)


def load_tokenizer(model_ref: str, home: Path) -> Any:
    """The model's fast tokenizer (the model store resolves names and s3:// folders)."""
    from transformers import AutoTokenizer

    from pipelines.models import resolve_model

    return AutoTokenizer.from_pretrained(str(resolve_model(model_ref, home)), use_fast=True)
