"""`memagent ask`: answer one question over one document, printing the memory trace.

    memagent ask --doc README.md --question "What does the agent keep?" --show-memory
"""

from __future__ import annotations

import asyncio
import json
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


def result_dict(result: AgentResult, seconds: float) -> dict:
    return {
        "question": result.question, "answer": result.answer, "prediction": result.prediction,
        "turns": result.n_turns, "doc_tokens": result.doc_tokens, "memory": result.memory,
        "memory_tokens": result.memory_tokens, "seconds": round(seconds, 3),
    }


def print_result(out: dict, show_memory: bool) -> None:
    if show_memory:
        for i, (mem, n) in enumerate(zip(out["memory"], out["memory_tokens"]), 1):
            print(f"--- memory after chunk {i}/{len(out['memory'])} ({n} tokens) ---\n{mem}\n")
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
        chunks = document_chunks(req.doc, codec, cfg.agent.chunk_size)
        start = time.perf_counter()
        loop = make_loop(req.question, chunks, codec, cfg.agent)
        result = await run_loop(engine, loop, agent_sampling(cfg.agent))
        return result_dict(result, time.perf_counter() - start)
    finally:
        await engine.close()


def main(cfg: Config, req: AskRequest) -> dict:
    out = asyncio.run(ask_async(cfg, req))
    if req.as_json:
        print(json.dumps(out))
    else:
        print_result(out, req.show_memory)
    return out


def add_arguments(p) -> None:
    p.add_argument("--doc", required=True, help="local path, file:// or s3:// URI of a UTF-8 text")
    p.add_argument("--question", required=True)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--show-memory", action="store_true", help="print the memory after every chunk")


def run(cfg: Config, args) -> None:
    main(cfg, AskRequest(args.doc, args.question, args.json, args.show_memory))
