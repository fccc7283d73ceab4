"""The memory-agent loop as a sans-IO state machine.

    loop = AgentLoop(question, chunks, codec, cfg)
    while (req := loop.next_request()) is not None:
        loop.feed(engine_output_for(req))
    result = loop.result()

The loop never calls an engine: a driver can interleave thousands of loops, submitting
each sample's next turn the moment its previous one returns.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from pipelines.agent.codec import ChatCodec
from pipelines.agent.reward import extract_boxed
from pipelines.agent.templates import TemplateSet
from pipelines.errors import UserError


@dataclass(frozen=True)
class LoopLimits:
    memory_budget: int
    final_budget: int
    question_budget: int


@dataclass(frozen=True)
class TurnRequest:
    turn: int
    is_final: bool
    prompt_ids: list[int]
    max_tokens: int


@dataclass(frozen=True)
class Conversation:
    """One turn as training sees it: only response tokens carry loss."""

    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float] | None
    finish_reason: str
    is_final: bool


@dataclass
class AgentResult:
    question: str
    answer: str
    prediction: str | None
    doc_tokens: int
    memory: list[str] = field(default_factory=list)
    memory_tokens: list[int] = field(default_factory=list)
    conversations: list[Conversation] = field(default_factory=list)

    @property
    def turns(self) -> int:
        return len(self.memory) + 1


def settle(req: TurnRequest | None, response_ids: list[int], logprobs: list[float] | None, finish_reason: str,
           keep_in: AgentResult | None) -> None:
    """Check a fed response against its request; record the conversation when kept."""
    if req is None:
        raise RuntimeError("feed() without a pending request")
    if len(response_ids) > req.max_tokens:
        raise RuntimeError(f"engine returned {len(response_ids)} tokens > max_tokens={req.max_tokens}")
    if keep_in is not None:
        keep_in.conversations.append(
            Conversation(req.prompt_ids, list(response_ids), logprobs, finish_reason, req.is_final))


class AgentLoop:
    def __init__(
        self,
        question: str,
        chunks: Iterable[list[int]],
        codec: ChatCodec,
        templates: TemplateSet,
        limits: LoopLimits,
        keep_conversations: bool = False,
    ):
        if not question or not question.strip():
            raise UserError("question: empty")
        if len(codec.encode(question)) > limits.question_budget:
            raise UserError(f"question: longer than question_budget={limits.question_budget} tokens")
        self.question = question
        self._chunks: Iterator[list[int]] = iter(chunks)
        self._codec, self._templates, self._limits = codec, templates, limits
        self._keep = keep_conversations
        self._memory_text = templates.initial_memory
        self._pending: TurnRequest | None = None
        self._result = AgentResult(question, "", None, 0)
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def next_request(self) -> TurnRequest | None:
        if self._pending is not None:
            raise RuntimeError("next_request() called twice without feed()")
        if self._done:
            return None
        chunk = next(self._chunks, None)
        turn = len(self._result.memory)
        if chunk is not None:
            self._result.doc_tokens += len(chunk)
            text = self._templates.update_prompt(self.question, self._memory_text, self._codec.decode(chunk))
            req = TurnRequest(turn, False, self._codec.encode_user(text), self._limits.memory_budget)
        else:
            if turn == 0:
                raise UserError("document: empty (no tokens to read)")
            text = self._templates.final_prompt(self.question, self._memory_text)
            req = TurnRequest(turn, True, self._codec.encode_user(text), self._limits.final_budget)
        self._pending = req
        return req

    def feed(self, response_ids: list[int], text: str, logprobs: list[float] | None = None,
             finish_reason: str = "stop") -> None:
        req, self._pending = self._pending, None
        settle(req, response_ids, logprobs, finish_reason, self._result if self._keep else None)
        if req.is_final:
            self._result.answer = text
            self._result.prediction = extract_boxed(text)
            self._done = True
        else:
            self._memory_text = text.strip()
            self._result.memory.append(self._memory_text)
            self._result.memory_tokens.append(len(response_ids))

    def result(self) -> AgentResult:
        if not self._done:
            raise RuntimeError("result() before the final turn was fed")
        return self._result
