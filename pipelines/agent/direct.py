"""The one-turn baselines of the evaluation ladder, as a sans-IO loop beside AgentLoop.

    loop = DirectLoop(question, chunks, codec, window=8192, answer_budget=1024, full=False)
    # the Loop protocol (pipelines.agent.turns), driven like AgentLoop
    result = loop.result()          # an AgentResult with no memory, one turn, and `truncated`

- truncation (the paper's no-memory ablation): one turn that sees the question and as many
  document tokens as fit the window; the rest is cut from the middle (head and tail kept,
  as LongBench does), because answers sit anywhere in the document.
- full: the same prompt with the whole document, only where it fits the window; a document
  that does not fit is refused (UserError "exceeds window: ..."), never silently cut.

The document arrives as a chunk stream; at most the window's worth of its tokens is held.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from pipelines.agent.codec import ChatCodec
from pipelines.agent.loop import check_question
from pipelines.agent.reward import extract_boxed
from pipelines.agent.turns import AgentResult, Response, TurnRequest, record_turn
from pipelines.errors import UserError

DIRECT = """You are presented with a problem and an article that may contain the answer to the problem. Please read the article carefully and answer the problem based on it, and put the answer in \\boxed{{}}.

<problem> 
{prompt}
</problem>

<article>
{context}
</article>

Your answer:
"""
MARGIN = 8  # tokens of slack: decoding a cut and re-encoding it can grow by a token or two


def head_tail(chunks: Iterable[list[int]], keep: int) -> tuple[list[int], int]:
    """(at most `keep` ids: the first keep//2 and the last keep - keep//2, total seen)."""
    head_n = keep // 2
    head: list[int] = []
    tail: deque[int] = deque(maxlen=keep - head_n)
    total = 0
    for ids in chunks:
        total += len(ids)
        room = head_n - len(head)
        head.extend(ids[:room] if room > 0 else [])
        tail.extend(ids[max(room, 0):])
    return head + list(tail), total


def direct_overhead(codec: ChatCodec, question: str) -> int:
    """Tokens the direct prompt costs without any document."""
    return len(codec.encode_user(DIRECT.format(prompt=question, context=""))) + MARGIN


def context_room(codec: ChatCodec, question: str, window: int, answer_budget: int) -> int:
    """Document tokens that fit one prompt beside the question and the answer's budget."""
    return window - answer_budget - direct_overhead(codec, question)


def direct_prompt(codec: ChatCodec, question: str, doc_ids: list[int]) -> list[int]:
    return codec.encode_user(DIRECT.format(prompt=question, context=codec.decode(doc_ids)))


class DirectLoop:
    """One request (question + what fits of the document), one answer; AgentLoop's interface."""

    def __init__(self, question: str, chunks: Iterable[list[int]], codec: ChatCodec, window: int,
                 answer_budget: int, full: bool = False, keep_ids: bool = False):
        check_question(question)
        self.room = context_room(codec, question, window, answer_budget)
        if self.room <= 0:
            raise UserError(f"window {window}: too small for the question and a {answer_budget}-token answer")
        self.question, self.full = question, full
        self._chunks: Iterator[list[int]] = iter(chunks)
        self._codec, self._answer_budget, self._keep = codec, answer_budget, keep_ids
        self._pending: TurnRequest | None = None
        self._result = AgentResult(question)
        self._asked = self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def next_request(self) -> TurnRequest | None:
        if self._pending is not None:
            raise RuntimeError("next_request() called twice without feed()")
        if self._asked:
            return None
        ids, total = head_tail(self._chunks, self.room)
        if total == 0:
            raise UserError("document: empty (no tokens to read)")
        if self.full and total > self.room:
            raise UserError(f"exceeds window: {total} document tokens > {self.room} that fit")
        self._result.doc_tokens, self._result.truncated = total, total > self.room
        self._asked = True
        self._pending = TurnRequest(0, True, direct_prompt(self._codec, self.question, ids), self._answer_budget)
        return self._pending

    def feed(self, response: Response) -> None:
        req, self._pending = self._pending, None
        self._result.turns.append(record_turn(req, response, self._keep))
        self._result.answer = response.text
        self._result.prediction = extract_boxed(response.text)
        self._done = True

    @property
    def progress(self) -> AgentResult:
        return self._result

    def result(self) -> AgentResult:
        if not self._done:
            raise RuntimeError("result() before the answer was fed")
        return self._result
