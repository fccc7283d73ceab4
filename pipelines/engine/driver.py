"""The one loop driver: ask, rollout workers, serve replicas and benchmarks all run loops here.

Each turn is submitted the moment the previous one returns, so many loops on one engine
never wait for each other. Sampling for a turn is built here and only here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

from pipelines.agent.config import AgentConfig
from pipelines.agent.turns import AgentResult, Loop, TurnRequest
from pipelines.engine.base import Engine, GenRequest, Sampling

# Called with the result so far after every turn: its last TurnRecord, memory, tokens read.
OnTurn = Callable[[AgentResult], Awaitable[None] | None]


def agent_sampling(cfg: AgentConfig) -> Sampling:
    """The agent config's sampling (ask, serve, evaluation)."""
    return Sampling(temperature=cfg.temperature, top_p=cfg.top_p, seed=cfg.seed)


def turn_sampling(sampling: Sampling, req: TurnRequest) -> Sampling:
    """One turn's sampling: the agent's, with the turn's token budget."""
    return replace(sampling, max_tokens=req.max_tokens)


async def run_loop(engine: Engine, loop: Loop, sampling: Sampling, on_turn: OnTurn | None = None) -> AgentResult:
    """Drive one loop to its end; max_tokens comes from each request. `on_turn(progress)` runs
    after every turn (streamed traces, training progress); it may be a coroutine function."""
    while (req := loop.next_request()) is not None:
        resp = await engine.generate(GenRequest(turn_sampling(sampling, req), req.prompt_ids))
        if sampling.logprobs and (resp.logprobs is None or len(resp.logprobs) != len(resp.token_ids)):
            raise RuntimeError("engine returned no logprob for some sampled tokens")
        loop.feed(resp)
        if on_turn is not None:
            pending = on_turn(loop.progress)
            if pending is not None:
                await pending
    return loop.result()
