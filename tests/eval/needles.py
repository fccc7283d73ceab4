"""Task rows with inline needle documents, written as a real TaskRow parquet dataset."""

from __future__ import annotations

import random
from pathlib import Path

from pipelines.data.tasks import TaskRow, write_task_rows
from pipelines.ingest.builders.needle_file import NOISE


def needle_row(tokenizer, tokens: int, index: int, seed: int = 0) -> TaskRow:
    rng = random.Random(seed * 1000 + index)
    value = str(rng.randint(1_000_000, 9_999_999))
    noise_tokens = len(tokenizer.encode(NOISE, add_special_tokens=False))
    repeats = max(2, tokens // noise_tokens)
    at = rng.randint(0, repeats - 1)
    parts = [NOISE] * repeats
    parts[at] = f"One of the special magic numbers for quiet-harbor is: {value}. "
    context = "".join(parts)
    n = len(tokenizer.encode(context, add_special_tokens=False))
    return TaskRow(f"niah-{tokens}-{index}", "What is the special magic number for quiet-harbor?", [value],
                   "one_of", None, context, n, "niah_test", "test")


def write_needle_dataset(folder: Path, tokenizer) -> str:
    """3 rows near 1K tokens and 3 near 2K: one dataset for a two-rung ladder."""
    rows = [needle_row(tokenizer, t, i) for t in (1000, 2000) for i in range(3)]
    uri = str(folder / "needle.parquet")
    assert write_task_rows(rows, uri) == 6
    return uri


def ladder_overrides(model_dir, dataset, out, *extra) -> list[str]:
    """A two-rung ladder on a tiny model: seconds, not minutes."""
    return [f"model.path={model_dir}", "engine.kind=hf", "engine.dtype=float32",
            "agent.chunk_size=512", "agent.memory_budget=8", "agent.final_budget=8",
            "eval.tasks=[niah_test]", "eval.lengths=[1K, 2K]", "eval.n=3", f"eval.dataset={dataset}",
            f"eval.out={out}", "eval.window=1500", "eval.concurrency=4", "eval.traces=1", *extra]
