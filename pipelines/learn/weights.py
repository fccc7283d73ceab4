"""Publishing policy versions: plain HF folders at OUT/weights/vN, the last k kept.

The rollout side only ever sees a folder reference and a version number, so the transport
stays behind one small interface (`Publisher.publish`); a GPU build can replace the folder
with vLLM's NCCL weight transfer later without touching the learner loop.

With frozen layers, a version is a two-shard HF folder (`model.safetensors.index.json`): the
weights that never change in the run in `frozen.safetensors`, written once and hard-linked into
every later local version, and the trained ones in `trained.safetensors`. SmolLM2 with its top
10 of 30 layers trained writes ~142 MB a push instead of 538 MB; with its top 2, ~28 MB.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Protocol

from torch import nn

from pipelines.learn.lora import merged_state_dict
from pipelines.storage import is_s3, list_dirs, located, remove_tree, staged_dir

SHARDS = ("frozen.safetensors", "trained.safetensors")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                   "merges.txt", "chat_template.jinja", "generation_config.json")


class Publisher(Protocol):
    def publish(self, model: nn.Module, version: int) -> str: ...


def save_hf_folder(model: nn.Module, base_dir: str, dest: Path, weights: dict | None = None) -> Path:
    """The model (LoRA merged) as a plain HF folder with the base model's tokenizer files;
    weights: its full state dict when already gathered (Policy.weights(), sharded models)."""
    model.save_pretrained(dest, state_dict=merged_state_dict(model) if weights is None else weights,
                          safe_serialization=True)
    return copy_tokenizer(base_dir, dest)


def save_split_folder(model: nn.Module, base_dir: str, dest: Path, weights: dict, frozen: frozenset[str],
                      frozen_file: Path | None) -> Path:
    """The HF folder as two shards: the `frozen` names hard-linked from `frozen_file` (the same
    tensors, written by an earlier version of this run) or written when there is none, the rest
    written. The tied output head is stored once, as the embedding."""
    from safetensors.torch import save_file

    if getattr(model.config, "tie_word_embeddings", False):
        weights = {k: v for k, v in weights.items() if k != "lm_head.weight"}
    parts = {name: {k: v.contiguous() for k, v in weights.items() if (k in frozen) == (name == SHARDS[0])}
             for name in SHARDS}
    if frozen_file is not None and frozen_file.is_file():
        try:
            os.link(frozen_file, dest / SHARDS[0])
        except OSError:  # another file system
            shutil.copyfile(frozen_file, dest / SHARDS[0])
    else:
        save_file(parts[SHARDS[0]], dest / SHARDS[0], metadata={"format": "pt"})
    save_file(parts[SHARDS[1]], dest / SHARDS[1], metadata={"format": "pt"})
    size = sum(v.numel() * v.element_size() for v in weights.values())
    index = {"metadata": {"total_size": size}, "weight_map": {k: n for n, part in parts.items() for k in part}}
    (dest / "model.safetensors.index.json").write_text(json.dumps(index, indent=1, sort_keys=True))
    model.config.save_pretrained(dest)
    return copy_tokenizer(base_dir, dest)


def copy_tokenizer(base_dir: str, dest: Path) -> Path:
    for name in TOKENIZER_FILES:
        if (Path(base_dir) / name).is_file():
            shutil.copy(Path(base_dir) / name, dest / name)
    return dest


class FolderPublisher:
    def __init__(self, out: str, base_dir: str, keep: int, frozen: frozenset[str] = frozenset()):
        """frozen: names of the weights that never change in this run (Policy.frozen_names()); with
        any, versions are split folders whose frozen shard is written once (locally; S3: each time)."""
        self.root, self.base_dir, self.keep, self.frozen = f"{out.rstrip('/')}/weights", base_dir, keep, frozen
        self.last_write_s, self._frozen_file = 0.0, None

    def publish(self, model: nn.Module, version: int, keep_from: int | None = None,
                weights: dict | None = None) -> str:
        """OUT/weights/v{version}; older versions beyond the last `keep` are removed, but none
        from `keep_from` on (the latest checkpoint's, which a resumed run loads, and any newer
        one a checkpoint being registered may name)."""
        start = time.perf_counter()
        uri = f"{self.root}/v{version}"
        with staged_dir(uri) as dest:
            if self.frozen:
                weights = merged_state_dict(model) if weights is None else weights
                save_split_folder(model, self.base_dir, dest, weights, self.frozen, self._frozen_file)
            else:
                save_hf_folder(model, self.base_dir, dest, weights)
        where = located(uri)
        if self.frozen and not is_s3(uri):
            self._frozen_file = Path(where) / SHARDS[0]  # the folder now in place holds it
        self.last_write_s = time.perf_counter() - start
        self.prune(version, keep_from)
        return where

    def prune(self, version: int, keep_from: int | None = None) -> None:
        keep_from = version if keep_from is None else keep_from
        old = [d for d in list_dirs(self.root) if d.startswith("v") and d[1:].isdigit()
               and int(d[1:]) <= version - self.keep and int(d[1:]) < keep_from]
        for d in old:
            remove_tree(f"{self.root}/{d}")
