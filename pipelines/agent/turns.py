"""The records every loop driver, engine and learner shares: one request, one response, one turn.

    req = loop.next_request()              # TurnRequest: what to generate next
    loop.feed(engine_response)             # Response: what the engine sampled
    loop.result().turns                    # one TurnRecord per turn, in order

A TurnRecord is what training consumes (only response tokens carry loss; logprobs are the
behaviour policy's) and what traces and progress displays read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class TurnRequest:
    turn: int
    is_final: bool
    prompt_ids: list[int]
    max_tokens: int


@dataclass(frozen=True)
class Response:
    """What an engine returns for one request."""

    token_ids: list[int]
    text: str
    finish_reason: str = "stop"  # "stop" or "length"
    logprobs: list[float] | None = None  # of the sampled tokens, under the distribution sampled from
    version: int = 0  # policy version when the request was submitted
    version_end: int = 0  # ... and when it returned (a weight push may land in between)
    seconds: float = 0.0


@dataclass(frozen=True)
class TurnRecord:
    prompt_ids: list[int]  # empty unless the loop keeps token ids (training, rollouts)
    response_ids: list[int]
    logprobs: list[float] | None
    finish_reason: str
    is_final: bool
    max_tokens: int
    version: int
    version_end: int
    seconds: float
    # Memory turns: "updated" (wrote the memory), "kept" (left it unchanged), "exited" (wrote it
    # and ended the reading: pipelines.agent.gates); answer turns: "final".
    gate: str = "updated"


def gate_counts(turns: list[TurnRecord]) -> tuple[int, int, int | None]:
    """(chunks read, memory updates, the chunk (1-based) whose turn ended the reading or None)
    of one rollout's turns: its memory turns, those not kept, the exited one."""
    memory = [t.gate for t in turns if not t.is_final]
    exits = [i for i, g in enumerate(memory, 1) if g == "exited"]
    return len(memory), sum(g != "kept" for g in memory), exits[0] if exits else None


class GateCounts:
    """What the gates did, read from a record's `turns` (gate_counts): for AgentResult and the
    rollout's Trajectory alike."""

    turns: list[TurnRecord]

    @property
    def chunks_read(self) -> int:
        return gate_counts(self.turns)[0]

    @property
    def memory_updates(self) -> int:
        """Memory turns not kept (ungated: every one)."""
        return gate_counts(self.turns)[1]

    @property
    def exit_chunk(self) -> int | None:
        """The chunk (1-based) whose turn ended the reading; None: read to the end."""
        return gate_counts(self.turns)[2]


@dataclass
class AgentResult(GateCounts):
    question: str
    answer: str = ""
    prediction: str | None = None
    doc_tokens: int = 0  # document tokens read (an exited loop leaves the rest unread)
    memory: list[str] = field(default_factory=list)  # the memory after each memory turn
    turns: list[TurnRecord] = field(default_factory=list)
    truncated: bool = False  # the one-turn baselines: the document was cut to fit the window
    malformed: int = 0  # gated turns whose marker was malformed (their text taken as the memory)
    ungrounded: int = 0  # memory writes stating a number their turn did not read (pipelines.agent.grounding)

    @property
    def memory_tokens(self) -> list[int]:
        return [len(t.response_ids) for t in self.turns if not t.is_final]

    @property
    def n_turns(self) -> int:
        return len(self.memory) + 1


class Loop(Protocol):
    """A sans-IO agent loop: the driver asks for a request, generates it, feeds the response."""

    def next_request(self) -> TurnRequest | None: ...

    def feed(self, response: Response) -> None: ...

    @property
    def progress(self) -> AgentResult: ...  # the result so far (turns fed, memory, tokens read)

    def result(self) -> AgentResult: ...  # the result, once the final turn was fed


def record_turn(req: TurnRequest | None, resp: Response, keep_ids: bool, gate: str | None = None) -> TurnRecord:
    """Check a fed response against its request and make its record (gate: "updated" for a memory
    turn, "final" for an answer turn unless given)."""
    if req is None:
        raise RuntimeError("feed() without a pending request")
    if len(resp.token_ids) > req.max_tokens:
        raise RuntimeError(f"engine returned {len(resp.token_ids)} tokens > max_tokens={req.max_tokens}")
    ids = list(resp.token_ids)
    return TurnRecord(req.prompt_ids if keep_ids else [], ids, resp.logprobs, resp.finish_reason,
                      req.is_final, req.max_tokens, resp.version, max(resp.version, resp.version_end),
                      resp.seconds, gate or ("final" if req.is_final else "updated"))
