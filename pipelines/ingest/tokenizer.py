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


def load_tokenizer(model_ref: str, home: Path) -> Any:
    """The model's fast tokenizer (the model store resolves names and s3:// folders)."""
    from transformers import AutoTokenizer

    from pipelines.models import resolve_model

    return AutoTokenizer.from_pretrained(str(resolve_model(model_ref, home)), use_fast=True)
