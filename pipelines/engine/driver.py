"""Drives one sans-IO agent loop against an engine. Many can run concurrently on one engine."""

from __future__ import annotations

from dataclasses import replace

from pipelines.agent.loop import AgentLoop, AgentResult
from pipelines.engine.base import Engine, GenRequest, Sampling


async def run_loop(engine: Engine, loop: AgentLoop, sampling: Sampling) -> AgentResult:
    """Submit each turn as soon as the previous one returns; max_tokens comes from the loop."""
    while (req := loop.next_request()) is not None:
        out = await engine.generate(GenRequest(replace(sampling, max_tokens=req.max_tokens), req.prompt_ids))
        loop.feed(out.token_ids, out.text, out.logprobs, out.finish_reason)
    return loop.result()
