"""The `eval:` config section."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from pipelines.agent.config import Method
from pipelines.typed import Strict


class EvalConfig(Strict):
    tasks: tuple[str, ...] = ("hotpotqa", "niah_single")
    lengths: tuple[str, ...] = ("8K", "16K", "32K", "64K", "128K")  # K = 1024 tokens
    n: int = Field(128, gt=0)  # questions per (task, length)
    seed: int = 0
    # Task rows (parquet file or folder, local or s3://); None: built on the fly for `seed`.
    dataset: str | None = None
    # The haystack of needle rows built on the fly: RULER's repeated noise sentences (the committed
    # ladder and learning cells') or Paul Graham's essays (real text, learn.haystack's default).
    haystack: Literal["noise", "essay"] = "noise"
    # Results folder (local or s3://); None: HOME/eval/<model name>-<seed>.
    out: str | None = None
    # memagent: the memory loop; truncation: one turn over as much of the document as fits the
    # window (the paper's no-memory ablation); full: the whole document when it fits.
    methods: tuple[Method, ...] = ("memagent", "truncation", "full")
    # Baselines' window in tokens (prompt + answer); None: the engine's max_model_len.
    window: int | None = Field(None, gt=0)
    concurrency: int = Field(32, gt=0)  # samples in flight per rollout worker (rollout.workers of them)
    # Records of an unfinished cell saved together: a killed run loses at most this many per cell.
    checkpoint_rows: int = Field(8, gt=0)
    traces: int = Field(2, ge=0)  # memory traces per cell logged as artifacts
