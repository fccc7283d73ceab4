"""/v1/chat/completions on one replica: the prompt straight to the engine (no memory loop), in
OpenAI's shapes: a `chat.completion`, or with `stream: true` a run of `chat.completion.chunk`s
(the gateway frames them as server-sent events and ends with `data: [DONE]`).

n > 1 runs n requests side by side on the engine (they batch there); choice i samples with
seed + i when a seed is given, so the choices differ yet each is reproducible.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, replace

from pipelines.engine import Delta, GenRequest, Sampling
from pipelines.serve.schema import ChatRequest, ServeError


@dataclass(frozen=True)
class ChatPlan:
    req: ChatRequest
    prompt: list[int]
    samplings: list[Sampling]  # one per choice
    head: dict  # the fields every body and chunk of this completion repeats

    def requests(self) -> list[GenRequest]:
        return [GenRequest(s, prompt_ids=self.prompt) for s in self.samplings]


def plan(body: dict, codec, max_model_len: int, default_max_tokens: int, served: str, version: int) -> ChatPlan:
    req = ChatRequest.model_validate(body)
    prompt = codec.encode_chat([m.model_dump() for m in req.messages])
    room = max_model_len - len(prompt)
    if room <= 0:
        raise ServeError(f"messages: {len(prompt)} tokens leave no room in max_model_len={max_model_len}", 400)
    wanted = req.max_completion_tokens or req.max_tokens or default_max_tokens
    one = Sampling(max_tokens=min(wanted, room), temperature=req.temperature, top_p=req.top_p, seed=req.seed,
                   stop=req.stops)
    samplings = [replace(one, seed=None if req.seed is None else req.seed + i) for i in range(req.n)]
    head = {"id": f"chatcmpl-{os.getpid()}-{time.monotonic_ns()}", "created": int(time.time()),
            "model": req.model or served, "system_fingerprint": f"v{version}"}
    return ChatPlan(req, prompt, samplings, head)


def usage(n_prompt: int, n_completion: int) -> dict:
    return {"prompt_tokens": n_prompt, "completion_tokens": n_completion, "total_tokens": n_prompt + n_completion}


def completion(p: ChatPlan, outs: list) -> dict:
    """The non-streamed body from the engine's Responses, one per choice."""
    choices = [{"index": i, "message": {"role": "assistant", "content": o.text}, "finish_reason": o.finish_reason,
                "logprobs": None} for i, o in enumerate(outs)]
    return {**p.head, "object": "chat.completion", "choices": choices,
            "usage": usage(len(p.prompt), sum(len(o.token_ids) for o in outs))}


async def chunks(engine, p: ChatPlan) -> AsyncIterator[dict]:
    """The streamed completion: a role chunk per choice, then content as it is sampled, a finish
    chunk per choice, and with stream_options.include_usage a last chunk holding only usage."""
    with_usage = p.req.stream_options is not None and p.req.stream_options.include_usage
    extra = {"usage": None} if with_usage else {}

    def chunk(i: int, delta: dict, finish: str | None = None) -> dict:
        return {**p.head, "object": "chat.completion.chunk", **extra,
                "choices": [{"index": i, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    for i in range(len(p.samplings)):
        yield chunk(i, {"role": "assistant", "content": ""})
    n_tokens = 0
    async with aclosing(merged([engine.stream(r) for r in p.requests()])) as pieces:
        async for i, d in pieces:
            n_tokens += len(d.token_ids)
            if d.text:
                yield chunk(i, {"content": d.text})
            if d.finish_reason is not None:
                yield chunk(i, {}, d.finish_reason)
    if with_usage:
        yield {**p.head, "object": "chat.completion.chunk", "choices": [], "usage": usage(len(p.prompt), n_tokens)}


async def merged(streams: list) -> AsyncIterator[tuple[int, Delta]]:
    """(stream index, piece) from all streams as they come; closing it closes every stream."""
    queue: asyncio.Queue = asyncio.Queue()
    done = object()

    async def pump(i: int, stream) -> None:
        try:
            async with aclosing(stream):
                async for d in stream:
                    await queue.put((i, d))
            await queue.put((i, done))
        except Exception as e:  # noqa: BLE001 - re-raised by the reader
            await queue.put((i, e))

    tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    try:
        left = len(tasks)
        while left:
            i, item = await queue.get()
            if item is done:
                left -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield i, item
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
