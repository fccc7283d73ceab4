"""Task rows for one ladder cell: from a dataset (parquet of TaskRows) or built on the fly.

A dataset row belongs to the requested length nearest its `doc_tokens` (on a log scale),
so one dataset can hold every rung of the ladder. Rows are streamed; a cell takes its first n.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

from pipelines.errors import UserError
from pipelines.eval.stats import parse_length
from pipelines.data.tasks import TaskRow, read_task_rows


def nearest_length(doc_tokens: int, lengths: list[str]) -> str:
    target = math.log(max(doc_tokens, 1))
    return min(lengths, key=lambda ln: abs(math.log(parse_length(ln)) - target))


def dataset_rows(uri: str, task: str, length: str, lengths: list[str], n: int) -> Iterator[TaskRow]:
    rows = (r for r in read_task_rows(uri) if r.task == task and nearest_length(r.doc_tokens, lengths) == length)
    return itertools.islice(rows, n)


def built_rows(task: str, tokens: int, n: int, seed: int, tokenizer, haystack: str = "noise") -> Iterator[TaskRow]:
    """Rows from the ingest stage's offline task builders for this seed, documents inline
    (generated lazily, one at a time; nothing is written to a store); needles in HAYSTACK."""
    from pipelines.ingest.builders import TASKS
    from pipelines.ingest.builders.build import BuildRequest, sample_stream, tag

    if task not in TASKS:
        raise UserError(f"task '{task}': unknown (known: {', '.join(TASKS)}); or pass --dataset")
    req = BuildRequest(task=task, lengths=str(tokens), n=n, out="", store="", seed=seed, split="eval",
                       haystack=haystack)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        count = lambda text: len(backend.encode(text, add_special_tokens=False).ids)  # noqa: E731
    else:
        count = lambda text: len(tokenizer.encode(text, add_special_tokens=False))  # noqa: E731
    for name, s in sample_stream(req, tokens, count):
        yield TaskRow(f"{tag(req)}/eval/{tokens}/s{seed}/{name}", s.question, list(s.answers), s.answer_kind,
                      None, s.text, s.tokens, task, "eval")


def cell_rows(task: str, length: str, lengths: list[str], n: int, seed: int, dataset: str | None,
              tokenizer, haystack: str = "noise") -> Iterator[TaskRow]:
    if dataset:
        return dataset_rows(dataset, task, length, lengths, n)
    return built_rows(task, parse_length(length), n, seed, tokenizer, haystack)
