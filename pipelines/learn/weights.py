"""Publishing policy versions: plain HF folders at OUT/weights/vN, the last k kept.

The rollout side only ever sees a folder reference and a version number, so the transport
stays behind one small interface (`Publisher.publish`); a GPU build can replace the folder
with vLLM's NCCL weight transfer later without touching the learner loop.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Protocol

from torch import nn

from pipelines.learn.lora import merged_state_dict
from pipelines.storage import list_dirs, located, remove_tree, staged_dir

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                   "merges.txt", "chat_template.jinja", "generation_config.json")


class Publisher(Protocol):
    def publish(self, model: nn.Module, version: int) -> str: ...


def save_hf_folder(model: nn.Module, base_dir: str, dest: Path, weights: dict | None = None) -> Path:
    """The model (LoRA merged) as a plain HF folder with the base model's tokenizer files;
    weights: its full state dict when already gathered (Policy.weights(), sharded models)."""
    model.save_pretrained(dest, state_dict=merged_state_dict(model) if weights is None else weights,
                          safe_serialization=True)
    for name in TOKENIZER_FILES:
        if (Path(base_dir) / name).is_file():
            shutil.copy(Path(base_dir) / name, dest / name)
    return dest


class FolderPublisher:
    def __init__(self, out: str, base_dir: str, keep: int):
        self.root, self.base_dir, self.keep = f"{out.rstrip('/')}/weights", base_dir, keep
        self.last_write_s = 0.0

    def publish(self, model: nn.Module, version: int, keep_from: int | None = None,
                weights: dict | None = None) -> str:
        """OUT/weights/v{version}; older versions beyond the last `keep` are removed, but none
        from `keep_from` on (the latest checkpoint's, which a resumed run loads, and any newer
        one a checkpoint being registered may name)."""
        start = time.perf_counter()
        uri = f"{self.root}/v{version}"
        with staged_dir(uri) as dest:
            save_hf_folder(model, self.base_dir, dest, weights)
        self.last_write_s = time.perf_counter() - start
        self.prune(version, keep_from)
        return located(uri)

    def prune(self, version: int, keep_from: int | None = None) -> None:
        keep_from = version if keep_from is None else keep_from
        old = [d for d in list_dirs(self.root) if d.startswith("v") and d[1:].isdigit()
               and int(d[1:]) <= version - self.keep and int(d[1:]) < keep_from]
        for d in old:
            remove_tree(f"{self.root}/{d}")
