"""One generated needle document as a text file: the quickstart's and the tests' long document."""

from __future__ import annotations

import random
from pathlib import Path

from pipelines.ingest.builders.ruler import NOISE as NOISE_SENTENCES

NOISE = " ".join(NOISE_SENTENCES) + " "
NOISE_TOKENS_PER_REPEAT = 24  # SmolLM2 tokenizer; close enough to size the document


def write_needle_document(path: Path, tokens: int, seed: int = 0) -> tuple[str, str]:
    """A noise haystack of about `tokens` tokens with one needle; returns (question, answer)."""
    rng = random.Random(seed)
    value = str(rng.randint(1_000_000, 9_999_999))
    needle = f"One of the special magic numbers for quiet-harbor is: {value}. "
    repeats = max(1, tokens // NOISE_TOKENS_PER_REPEAT)
    at = rng.randint(0, repeats - 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for i in range(repeats):
            f.write(needle if i == at else NOISE)
    return "What is the special magic number for quiet-harbor?", value
