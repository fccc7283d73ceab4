"""The engine interface: one async call that turns a prompt into sampled tokens."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Sampling:
    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    logprobs: bool = False  # logprob of each sampled token (behaviour policy)


@dataclass(frozen=True)
class GenRequest:
    sampling: Sampling
    prompt_ids: list[int] | None = None
    messages: list[dict] | None = None  # chat messages, rendered with the model's template

    def __post_init__(self):
        if (self.prompt_ids is None) == (self.messages is None):
            raise ValueError("GenRequest needs exactly one of prompt_ids or messages")


@dataclass(frozen=True)
class Completion:
    prompt_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str  # "stop" or "length"
    logprobs: list[float] | None = None
    policy_version: int = 0
    extra: dict = field(default_factory=dict)


class Engine(Protocol):
    tokenizer: Any
    version: int

    async def generate(self, request: GenRequest) -> Completion: ...

    async def load_weights(self, path: str, version: int) -> None: ...

    async def close(self) -> None: ...
