"""The engine interface: one async call that turns a prompt into sampled tokens, and its
streamed twin that hands out the text as it is sampled (OpenAI `stream: true`).

Every engine returns the agent's `Response` record (pipelines.agent.turns), so loops are fed
what engines return without translation. Logprobs, when asked for, are of the distribution
actually sampled from (after temperature and top_p): what a PPO/DAPO ratio needs. Stop
strings end generation and, as in OpenAI's API, are not part of the returned text; the token
ids (and logprobs) are every token sampled, the one that completed the stop string included.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import AsyncIterator
from typing import Any, Protocol

from pipelines.agent.turns import Response


@dataclass(frozen=True)
class Sampling:
    max_tokens: int = 0  # run_loop sets it per turn from the loop's request
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    logprobs: bool = False  # logprob of each sampled token (behaviour policy)
    stop: tuple[str, ...] = ()  # generation ends at the first; the text returned stops before it


@dataclass(frozen=True)
class GenRequest:
    sampling: Sampling
    prompt_ids: list[int] | None = None
    messages: list[dict] | None = None  # chat messages, rendered with the model's template

    def __post_init__(self):
        if (self.prompt_ids is None) == (self.messages is None):
            raise ValueError("GenRequest needs exactly one of prompt_ids or messages")


@dataclass(frozen=True)
class Delta:
    """One piece of a streamed generation: text new since the previous piece (never a piece of a
    stop string, never half a character), the tokens sampled since, and on the last piece only,
    why generation ended ("stop" or "length")."""

    text: str
    token_ids: list[int]
    finish_reason: str | None = None


class Engine(Protocol):
    tokenizer: Any
    version: int

    async def generate(self, request: GenRequest) -> Response: ...

    def stream(self, request: GenRequest) -> AsyncIterator[Delta]: ...  # closing it stops generation

    async def load_weights(self, path: str, version: int) -> None: ...

    async def close(self) -> None: ...
