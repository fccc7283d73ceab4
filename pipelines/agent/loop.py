"""The memory-agent loop as a sans-IO state machine.

    loop = AgentLoop(question, chunks, codec, templates, limits)
    while (req := loop.next_request()) is not None:
        loop.feed(response_for(req))        # a Response (pipelines.agent.turns)
    result = loop.result()                  # answer, prediction, memories, one TurnRecord per turn

The loop never calls an engine: a driver (pipelines.engine.driver.run_loop) can interleave
thousands of loops, submitting each sample's next turn the moment its previous one returns.

With a gated template (agent.gates, pipelines.agent.gates) a memory turn may keep the memory
(an empty reply: the engine ends the turn at its first token, the end-of-turn one) or end the
reading: the next request is then the final turn, and the rest of the document is
never taken from the chunk stream.

Every memory turn's write is checked against what that turn read (pipelines.agent.grounding):
`AgentResult.ungrounded` counts the writes that state a number their prompt does not hold, and a
grounded loop (agent.grounded) drops those sentences from the memory the next turn sees.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pipelines.agent.codec import ChatCodec
from pipelines.agent.gates import read_gate, ungated
from pipelines.agent.grounding import grounded, invented_numbers
from pipelines.agent.reward import extract_boxed
from pipelines.agent.templates import TemplateSet
from pipelines.agent.turns import AgentResult, Response, TurnRequest, record_turn
from pipelines.errors import UserError


@dataclass(frozen=True)
class LoopLimits:
    memory_budget: int
    final_budget: int
    question_budget: int


def check_question(question: str) -> None:
    if not question or not question.strip():
        raise UserError("question: empty")


class AgentLoop:
    def __init__(self, question: str, chunks: Iterable[list[int]], codec: ChatCodec, templates: TemplateSet,
                 limits: LoopLimits, keep_ids: bool = False, grounded: bool = False):
        """keep_ids: the turn records keep their prompt token ids (training needs them); grounded:
        memory sentences stating a number the turn did not read are dropped (agent.grounded)."""
        check_question(question)
        if len(codec.encode(question)) > limits.question_budget:
            raise UserError(f"question: longer than question_budget={limits.question_budget} tokens")
        self.question = question
        self._chunks: Iterator[list[int]] = iter(chunks)
        self._codec, self._templates, self._limits = codec, templates, limits
        self._keep, self._grounded = keep_ids, grounded
        self._read = ""  # the pending memory turn's prompt text: all it has read
        self.memory = templates.initial_memory  # the memory text the next turn sees
        self._pending: TurnRequest | None = None
        self._result = AgentResult(question)
        self._done = self._exited = False

    @property
    def done(self) -> bool:
        return self._done

    def next_request(self) -> TurnRequest | None:
        if self._pending is not None:
            raise RuntimeError("next_request() called twice without feed()")
        if self._done:
            return None
        chunk = None if self._exited else next(self._chunks, None)
        turn = len(self._result.memory)
        if chunk is not None:
            self._result.doc_tokens += len(chunk)
            text = self._read = self._templates.update_prompt(self.question, self.memory, self._codec.decode(chunk))
            req = TurnRequest(turn, False, self._codec.encode_user(text), self._limits.memory_budget)
        else:
            if turn == 0:
                raise UserError("document: empty (no tokens to read)")
            text = self._templates.final_prompt(self.question, self.memory)
            req = TurnRequest(turn, True, self._codec.encode_user(text), self._limits.final_budget)
        self._pending = req
        return req

    def feed(self, response: Response) -> None:
        req, self._pending = self._pending, None
        if req is None or req.is_final:
            self._result.turns.append(record_turn(req, response, self._keep))
            self._result.answer = response.text
            self._result.prediction = extract_boxed(response.text)
            self._done = True
            return
        gate = (read_gate if self._templates.gated else ungated)(response.text)
        self._result.turns.append(record_turn(req, response, self._keep, gate.action))
        if (written := gate.memory) is not None and invented_numbers(self._read, written):
            self._result.ungrounded += 1
            written = grounded(self._read, written) if self._grounded else written
        if written is not None:
            self.memory = written
        self._result.malformed += gate.malformed
        self._result.memory.append(self.memory)
        self._exited = gate.action == "exited"

    @property
    def progress(self) -> AgentResult:
        return self._result

    def result(self) -> AgentResult:
        if not self._done:
            raise RuntimeError("result() before the final turn was fed")
        return self._result
