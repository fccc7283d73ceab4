"""`memagent ask`: answer one question over one document, printing the memory trace.

    memagent ask --doc README.md --question "What does the agent keep?" --show-memory

A progress bar on stderr follows the chunks read (out of the document's total, counted by a
first streamed tokenizer pass: fast beside the memory loop, and memory stays flat), tokens/s
and time left; --show-memory prints each memory on stdout the moment its turn is written.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

from pipelines.agent import AgentResult, make_loop
from pipelines.agent.chunking import iter_chunks, iter_token_blocks
from pipelines.agent.codec import ChatCodec
from pipelines.config import Config
from pipelines.engine import create_engine
from pipelines.engine.driver import agent_sampling, run_loop
from pipelines.errors import UserError
from pipelines.models import config_model_dir
from pipelines.progress import Progress
from pipelines.storage import read_text_blocks


@dataclass(frozen=True)
class AskRequest:
    doc: str
    question: str
    as_json: bool = False
    show_memory: bool = False


def document_chunks(uri: str, codec: ChatCodec, chunk_size: int) -> Iterator[list[int]]:
    """Token-id chunks of a local or s3:// text document, streamed (memory stays flat)."""
    return iter_chunks(iter_token_blocks(read_text_blocks(uri), codec.encode), chunk_size)


def count_tokens(uri: str, codec: ChatCodec) -> int:
    """The document's token count, streamed (the same token blocks document_chunks slices)."""
    return sum(len(ids) for ids in iter_token_blocks(read_text_blocks(uri), codec.encode))


def memory_block(index: int, total: int, memory: str, n_tokens: int) -> str:
    return f"--- memory after chunk {index}/{total} ({n_tokens} tokens) ---\n{memory}\n"


class TurnDisplay:
    """on_turn for run_loop: advances the bar after each memory turn and, with --show-memory,
    prints the memory just written."""

    def __init__(self, bar: Progress, show_memory: bool):
        self.bar, self.show_memory = bar, show_memory

    def __call__(self, progress: AgentResult) -> None:
        last = progress.turns[-1]
        if last.is_final:
            return
        self.bar.update(1, **{"tok/s": progress.doc_tokens / max(self.bar.elapsed, 1e-9)})
        if self.show_memory:
            self.bar.write(memory_block(len(progress.memory), self.bar.total, progress.memory[-1],
                                        len(last.response_ids)))


def result_dict(result: AgentResult, seconds: float) -> dict:
    return {
        "question": result.question, "answer": result.answer, "prediction": result.prediction,
        "turns": result.n_turns, "doc_tokens": result.doc_tokens, "memory": result.memory,
        "memory_tokens": result.memory_tokens, "seconds": round(seconds, 3),
    }


def print_result(out: dict) -> None:
    print(f"answer: {out['answer'].strip()}")
    missing = "(no \\boxed{} answer)"
    print(f"prediction: {out['prediction'] if out['prediction'] is not None else missing}")
    print(f"read {out['doc_tokens']} tokens in {out['turns']} turns, {out['seconds']:.1f} s")


def preflight(uri: str) -> None:
    """Fail fast, before an engine starts, on a missing, empty or non-text document."""
    first = next(read_text_blocks(uri), "")
    if not first.strip():
        raise UserError(f"document '{uri}': empty")


async def ask_async(cfg: Config, req: AskRequest) -> dict:
    if not req.question.strip():
        raise UserError("question: empty")
    preflight(req.doc)
    model_dir = config_model_dir(cfg)
    engine = create_engine(str(model_dir), cfg.engine)
    try:
        codec = ChatCodec(engine.tokenizer)
        n_chunks = math.ceil(count_tokens(req.doc, codec) / cfg.agent.chunk_size)
        chunks = document_chunks(req.doc, codec, cfg.agent.chunk_size)
        start = time.perf_counter()
        loop = make_loop(req.question, chunks, codec, cfg.agent)
        with Progress("ask", total=n_chunks, unit="chunk") as bar:
            shown = TurnDisplay(bar, req.show_memory and not req.as_json)
            result = await run_loop(engine, loop, agent_sampling(cfg.agent), on_turn=shown)
        return result_dict(result, time.perf_counter() - start)
    finally:
        await engine.close()


def main(cfg: Config, req: AskRequest) -> dict:
    out = asyncio.run(ask_async(cfg, req))
    if req.as_json:
        print(json.dumps(out))
    else:
        print_result(out)
    return out


def add_arguments(p) -> None:
    p.add_argument("--doc", required=True, help="local path, file:// or s3:// URI of a UTF-8 text")
    p.add_argument("--question", required=True)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--show-memory", action="store_true", help="print the memory after every chunk, as it is written")


def run(cfg: Config, args) -> None:
    from pipelines.models.settings import with_model_settings

    cfg = with_model_settings(cfg, config_model_dir(cfg), args.overrides)
    main(cfg, AskRequest(args.doc, args.question, args.json, args.show_memory))
