"""Small synthetic task rows for learner tests: distinct sample_ids and answers, inline documents."""

from __future__ import annotations

from collections.abc import Callable

from pipelines.data.tasks import Evidence, TaskRow

FILLER = "The grey sky hung low over the quiet harbour town while the boats rocked gently. "


def synthetic_rows(n: int, count: Callable[[str], int], answer: Callable[[int], str] = lambda i: f"a{i:02d}",
                   repeats: int = 12) -> list[TaskRow]:
    """n rows; row i (sample_id r{i:02d}) hides one needle sentence, its evidence, in filler text.
    count(text): the model's tokens of a text (for the evidence offset and doc_tokens)."""
    rows = []
    for i in range(n):
        before, needle = FILLER * (repeats // 2), f"The secret code is {answer(i)} today."
        context = f"{before}{needle} {FILLER * (repeats - repeats // 2)}"
        rows.append(TaskRow(sample_id=f"r{i:02d}", question="What is the secret code?", answers=[answer(i)],
                            answer_kind="one_of", doc_id=None, context=context, doc_tokens=count(context),
                            task="synthetic", split="train", evidence=(Evidence(needle, count(before)),)))
    return rows


def token_counter(tokenizer) -> Callable[[str], int]:
    backend = tokenizer.backend_tokenizer
    return lambda text: len(backend.encode(text, add_special_tokens=False).ids)
