"""`memagent quickstart`: the main job on embedded defaults.

Imports SmolLM2 into the local store (first run only), writes a long generated document
with one fact hidden in it, and answers a question about that fact, printing the memory
the agent kept after every chunk.

    .venv/bin/memagent quickstart            # ~16K tokens; --tokens 100000 for a long one
"""

from __future__ import annotations

from pipelines.ask import AskRequest, main as ask_main
from pipelines.config import Config
from pipelines.ingest.builders.needle_file import write_needle_document

def main(cfg: Config, tokens: int) -> dict:
    doc = cfg.home_path / "quickstart" / f"needle-{tokens}.txt"
    question, gold = write_needle_document(doc, tokens)
    print(f"document: {doc} (~{tokens} tokens), question: {question} (gold: {gold})\n")
    return ask_main(cfg, AskRequest(str(doc), question, show_memory=True))


def add_arguments(p) -> None:
    p.add_argument("--tokens", type=int, default=16000, help="document length in tokens")


def run(cfg: Config, args) -> None:
    main(cfg, args.tokens)
