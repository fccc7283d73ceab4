"""Typed config of the `ingest:` section (formats, workers; the store it writes is data.store)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from pipelines.typed import Strict

DEFAULT_PATTERNS = ("*.txt", "*.md", "*.jsonl", "*.jsonl.gz", "*.parquet")


class IngestConfig(Strict):
    # Tokens per stored chunk: a storage unit; readers re-slice to the agent's chunk_size.
    chunk_size: int = Field(1024, gt=0)
    # Field / column holding the document text (jsonl, parquet); optional id field.
    text_field: str = "text"
    id_field: str | None = "id"
    # Source objects to take (fnmatch on the key's base name); others are counted as skipped.
    patterns: tuple[str, ...] = DEFAULT_PATTERNS
    # "ray": the Ray Data pipeline; "local": the same per-object steps in this process.
    runner: Literal["ray", "local"] = "ray"
    # Tokenizer actors (one fast tokenizer each); 0 = one per CPU Ray sees.
    workers: int = Field(0, ge=0)
    # Texts per tokenizer call, and the longest piece (chars) one call sees.
    batch_chars: int = Field(1 << 20, gt=0)
    piece_chars: int = Field(1 << 16, gt=1024)
    # Chunks per parquet row group: one document read touches only its row groups.
    row_group_chunks: int = Field(64, gt=0)
    # Commit finished objects to the manifest at least this often (seconds).
    commit_every_s: float = Field(5.0, gt=0)
