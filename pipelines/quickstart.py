"""`memagent quickstart`: the main job on embedded defaults.

Imports SmolLM2 into the local store (first run only), writes a long generated document
with one fact hidden in it, and answers a question about that fact, printing the memory
the agent kept after every chunk.

    .venv/bin/memagent quickstart            # ~16K tokens; --tokens 100000 for a long one
"""

from __future__ import annotations

import random
from pathlib import Path

from pipelines.ask import AskRequest, main as ask_main
from pipelines.config import Config

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
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


def main(cfg: Config, tokens: int) -> dict:
    doc = cfg.home_path / "quickstart" / f"needle-{tokens}.txt"
    question, gold = write_needle_document(doc, tokens)
    print(f"document: {doc} (~{tokens} tokens), question: {question} (gold: {gold})\n")
    return ask_main(cfg, AskRequest(str(doc), question, show_memory=True))


def add_arguments(p) -> None:
    p.add_argument("--tokens", type=int, default=16000, help="document length in tokens")


def run(cfg: Config, args) -> None:
    main(cfg, args.tokens)
