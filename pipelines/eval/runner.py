"""Runs task rows through one engine at evaluation temperature: the memory agent or a baseline.

`run_rows` keeps `concurrency` samples in flight and yields each record as it finishes; each
sample submits its next turn the moment its previous one returns. It is the one place to swap
for the rollout workers' API (pipelines.rollout) when evaluation moves onto them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

from pipelines.agent.codec import ChatCodec
from pipelines.agent.reward import extract_boxed, normalize_answer, recall_all
from pipelines.ask import eval_sampling, make_loop
from pipelines.config import AgentConfig
from pipelines.engine.base import Engine, GenRequest, Sampling
from pipelines.engine.driver import run_loop
from pipelines.errors import UserError
from pipelines.eval.baselines import context_room, direct_prompt, head_tail
from pipelines.ingest.tasks import TaskRow, score, task_chunks

MAX_ANSWER_CHARS = 2000


@dataclass(frozen=True)
class EvalContext:
    engine: Engine
    codec: ChatCodec
    agent: AgentConfig
    window: int  # baselines: prompt + answer tokens
    store: Any = None  # ChunkStore for rows with doc_id
    traces: int = 0  # rows with index < traces keep their full memory trace


def base_record(row: TaskRow, method: str, length: str, index: int) -> dict:
    return {"sample_id": row.sample_id, "task": row.task, "length": length, "method": method, "index": index,
            "question": row.question, "answers": list(row.answers), "prediction": None, "answer": "",
            "em": 0.0, "sub_em": 0.0, "f1": 0.0, "answer_recall": 0.0, "doc_tokens": 0, "turns": 0,
            "truncated": False, "error": None, "memory": [], "seconds": 0.0}


async def run_memagent(ctx: EvalContext, row: TaskRow, rec: dict) -> None:
    chunks = task_chunks(row, ctx.store, ctx.codec, ctx.agent.chunk_size)
    loop = make_loop(row.question, chunks, ctx.codec, ctx.agent)
    result = await run_loop(ctx.engine, loop, eval_sampling(ctx.agent))
    rec.update(prediction=result.prediction, answer=result.answer[:MAX_ANSWER_CHARS],
               doc_tokens=result.doc_tokens, turns=result.turns,
               memory=list(result.memory) if rec["index"] < ctx.traces else result.memory[-1:])


async def run_direct(ctx: EvalContext, row: TaskRow, rec: dict, full: bool) -> None:
    room = context_room(ctx.codec, row.question, ctx.window, ctx.agent.final_budget)
    if room <= 0:
        raise UserError(f"window {ctx.window}: too small for the question and a {ctx.agent.final_budget}-token answer")
    ids, total = head_tail(task_chunks(row, ctx.store, ctx.codec, ctx.agent.chunk_size), room)
    rec.update(doc_tokens=total, turns=1, truncated=total > room)
    if full and total > room:
        rec["error"] = f"exceeds window: {total} document tokens > {room} that fit"
        return
    a = ctx.agent
    sampling = Sampling(max_tokens=a.final_budget, temperature=a.temperature, top_p=a.top_p, seed=a.seed)
    out = await ctx.engine.generate(GenRequest(sampling, direct_prompt(ctx.codec, row.question, ids)))
    rec.update(prediction=extract_boxed(out.text), answer=out.text[:MAX_ANSWER_CHARS])


def answer_recall(row: TaskRow, answer: str) -> float:
    """Gold found anywhere in the raw answer, boxed or not: a diagnostic for base models that
    rarely box (their sub_em is ~0 whatever they read). Not the paper's accuracy."""
    if row.answer_kind == "all_of":
        return recall_all(answer, row.answers)
    text = normalize_answer(answer)
    return float(any(normalize_answer(a) and normalize_answer(a) in text for a in row.answers))


async def run_sample(ctx: EvalContext, row: TaskRow, method: str, length: str, index: int) -> dict:
    """One scored record; bad input (a too-long question, an empty document) is recorded, not raised."""
    rec = base_record(row, method, length, index)
    start = time.perf_counter()
    try:
        if method == "memagent":
            await run_memagent(ctx, row, rec)
        else:
            await run_direct(ctx, row, rec, full=(method == "full"))
    except UserError as e:
        rec["error"] = str(e)
    if rec["error"] is None:
        rec.update(score(row, rec["prediction"]), answer_recall=answer_recall(row, rec["answer"]))
    rec["seconds"] = time.perf_counter() - start
    return rec


async def run_rows(ctx: EvalContext, rows: Iterable[TaskRow], method: str, length: str,
                   concurrency: int, slots: asyncio.Semaphore | None = None) -> AsyncIterator[dict]:
    """Records in completion order; rows are pulled lazily so at most `concurrency` are held.
    `slots`, shared by several cells running at once, caps the samples on the engine overall."""
    it = enumerate(rows)
    pending: set[asyncio.Task] = set()
    slots = slots or asyncio.Semaphore(concurrency)

    async def one(row: TaskRow, index: int) -> dict:
        async with slots:
            return await run_sample(ctx, row, method, length, index)

    def top_up() -> None:
        while len(pending) < concurrency:
            nxt = next(it, None)
            if nxt is None:
                return
            pending.add(asyncio.create_task(one(nxt[1], nxt[0])))

    top_up()
    try:
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                pending.discard(task)
                yield task.result()
            top_up()
    finally:
        for task in pending:
            task.cancel()
