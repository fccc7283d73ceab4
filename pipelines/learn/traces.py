"""Programmatic memory traces: the SFT warm start's conversations, written from task evidence.

The base model gives RL no signal (every group all-zero), so the learner first imitates an
agent that keeps exactly what answers the question:

- each memory turn writes the evidence pieces (task row `evidence`) read so far, one per
  line, earliest first; pieces that would overflow the memory budget are left out whole;
  before any evidence, the template's initial memory;
- a piece that the chunk's end cuts is written as far as it was read, and whole after the next
  chunk: the agent keeps "... for calm-lake is:" and completes it from the number that opens
  the next chunk. Traces that kept the initial memory there taught an agent that lost 11 of the
  15 needles so cut in 200 held-out niah_single rows at 4K (and 1 of the other 185); traces
  that kept a cut piece only once half of it was read still lost 6, mostly needles cut early,
  which that agent copied as read ("One") and never completed (README, Learning);
- the final turn writes `\\boxed{gold}` (the first gold answer; every answer, comma-separated,
  for all-of rows).
- with decoys (learn.sft_decoys, for QA among distractor paragraphs), a memory turn before any
  evidence keeps the most question-like sentence read so far (`Decoys`: the most words shared
  with the question, stop words left out) instead of the initial memory, and the evidence
  replaces it when read. Evidence-only traces taught SQuAD's agent to write nothing until it was
  sure, and to keep the first sentence it wrote: 2.0% em at 1K (n = 200), the answer in 2% of
  its final memories, and with the evidence sentence as the whole document it still wrote "No
  previous memory" in 55% of rows. Decoys teach a comparison instead: always hold the best
  candidate, replace it by a better one.

With a gated template (agent.gates, pipelines.agent.gates) the same memories teach the two gates:
a chunk that leaves the memory as it was (no new evidence, not even part of a piece) is answered
with nothing, the EOS token alone (the keep); the chunk
that completes the row's evidence writes its memory ending in `[EXIT]`, and the final turn comes
next (one-of rows: complete once a piece holding a gold answer is read whole; all-of rows, and
one-of rows none of whose pieces holds an answer, once every piece is). The marker's tokens are
kept free in every gated memory's budget.

The prompts come from driving the real AgentLoop with these scripted responses, so they are
byte-identical to what the agent sees at inference. A response is its text's tokens plus EOS,
as an engine's response ends when it stops. Nothing is random: a row gives the same trace on
every machine.

    for trace in iter_traces(rows, store, codec, templates, limits, chunk_size=5000):
        for turn in trace.turns: ...   # prompt_ids, response_ids (loss), is_final
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from pipelines.agent.codec import ChatCodec
from pipelines.agent.gates import EXIT, KEEP
from pipelines.agent.loop import AgentLoop, LoopLimits
from pipelines.agent.templates import TemplateSet
from pipelines.agent.turns import Response
from pipelines.errors import UserError
from pipelines.data.store import ChunkStore
from pipelines.data.tasks import Evidence, TaskRow, require_evidence, task_chunks

SLACK = 2  # tokens a piece's recorded span may be off (BPE merges across its edges)
SEP = "\n"


@dataclass(frozen=True)
class TraceTurn:
    prompt_ids: list[int]
    response_ids: list[int]  # the text's tokens + EOS: the only tokens that carry loss
    is_final: bool
    text: str  # the memory written, or the boxed answer


@dataclass(frozen=True)
class Trace:
    sample_id: str
    turns: list[TraceTurn]

    def records(self, copies: float = 1.0) -> list[dict]:
        """One flat row per conversation (for a Ray Dataset), with about `copies` of the copy turns
        (learn.sft_copies): a memory turn that writes what the turn before wrote is kept when a hash
        of (sample_id, turn) falls below `copies`, the same turns on every machine."""
        return [{"sample_id": self.sample_id, "turn": i, "prompt_ids": t.prompt_ids,
                 "response_ids": t.response_ids, "is_final": t.is_final} for i, t in enumerate(self.turns)
                if not self.copied(i) or hashed_share(f"{self.sample_id}/{i}") < copies]

    def chooses(self, i: int) -> bool:
        """Whether turn i is a memory turn that writes something other than the turn before wrote (the
        first turn, replacements): where the trace chooses what to keep."""
        return not self.turns[i].is_final and not self.copied(i)

    def copied(self, i: int) -> bool:
        """Whether memory turn i writes what the turn before it wrote."""
        return i > 0 and not self.turns[i].is_final and self.turns[i].text == self.turns[i - 1].text


def hashed_share(key: str) -> float:
    """A number in [0, 1] fixed by key: picks a fixed share of rows or turns on every machine."""
    return int(hashlib.sha1(key.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


def select_memory(pieces: Sequence[str], room: int, count: Callable[[str], int], initial: str) -> str:
    """The pieces joined one per line, earliest first, each kept whole only if the memory still
    fits in `room` tokens; the initial memory when none is kept."""
    kept: list[str] = []
    for piece in pieces:
        if count(SEP.join([*kept, piece])) <= room:
            kept.append(piece)
    return SEP.join(kept) if kept else initial


class EvidenceReader:
    """Follows a document chunk by chunk and keeps the pieces read so far, in document order.

    A piece counts as read once its recorded span lies within the tokens read and its text is
    found in the tokens just read: offsets are exact only up to BPE merges at a piece's edges
    and the document's own slicing, and a memory must never hold text from a later chunk. A
    piece begun but not finished counts as its part read (`read_part`) until the next chunk.
    """

    def __init__(self, sample_id: str, pieces: Sequence[Evidence], codec: ChatCodec):
        self.sample_id, self._codec = sample_id, codec
        self._pending = [(p, len(codec.encode(p.text))) for p in pieces]
        self._keep = max((n for _, n in self._pending), default=0) + 2 * SLACK
        self._read, self._tail = 0, []
        self._seen: list[Evidence] = []
        self._part: list[Evidence] = []  # pieces cut by the last chunk's end, as far as read

    @property
    def seen(self) -> list[str]:
        return [p.text.strip() for p in sorted(self._seen + self._part, key=lambda p: p.offset)]

    def read(self, chunk: list[int]) -> None:
        window = self._tail + list(chunk)
        self._read += len(chunk)
        due = [(p, n) for p, n in self._pending if p.offset + n - SLACK <= self._read]
        begun = [(p, n) for p, n in self._pending if p.offset < self._read < p.offset + n + SLACK]
        text = self._codec.decode(window) if due or begun else ""  # most chunks hold no evidence
        found = [(p, n) for p, n in due if p.text in text]
        self._pending = [x for x in self._pending if x not in found]
        self._seen += [p for p, _ in found]
        parts = (read_part(p, text) for p, n in begun if (p, n) not in found)
        self._part = [p for p in parts if p is not None]
        self._tail = window[-self._keep:] if self._keep else []

    def complete(self, answers: Sequence[str], answer_kind: str) -> bool:
        """Whether the pieces read whole complete the row's evidence (the gated trace's exit)."""
        if not self._pending:
            return True
        golds = [a.lower() for a in answers if a.strip()]
        return answer_kind == "one_of" and any(g in p.text.lower() for p in self._seen for g in golds)

    def follow(self, chunks: Iterable[list[int]]) -> Iterator[list[int]]:
        """The chunks unchanged, each read as the loop takes it."""
        for chunk in chunks:
            self.read(chunk)
            yield chunk

    def finish(self, whole: bool = True) -> None:
        """Every piece was found (whole: the document was read to its end), or every piece due in
        the part read (a gated trace that exited)."""
        missed = [p for p, n in self._pending if whole or p.offset + n - SLACK <= self._read]
        if missed:
            p = missed[0]
            raise UserError(f"task row '{self.sample_id}': evidence {p.text[:40]!r} not found in its document "
                            f"near token {p.offset} (rows built with another tokenizer?)")


class Decoys:
    """The most question-like whole sentence read so far (most content words shared with the
    question; the earlier on a tie); sentences longer than the memory's room are passed over.
    A line break ends a sentence: a paragraph's first sentence comes without the document's header
    line ("Document 3:"), which a memory that copies it would copy too (the first sentence of
    Document 1 is also the chunk's start, and a model taught to copy one learns to copy the other)."""

    def __init__(self, question: str, codec: ChatCodec):
        from pipelines.ingest.builders.squad import content_words

        self._question, self._codec = content_words(question), codec
        self.best, self._score = None, 0

    def read(self, chunk: list[int], room: int) -> None:
        from pipelines.ingest.builders.squad import content_words, sentence_bounds

        text = self._codec.decode(chunk)
        for a, b in sentence_bounds(text):
            sentence = text[a:b].strip().rsplit("\n", 1)[-1]
            if not (sentence[:1].isupper() and sentence.endswith((".", "?", "!"))):
                continue  # a sentence the chunk's edge cut
            score = len(self._question & content_words(sentence))
            if score > self._score and len(self._codec.encode(sentence)) <= room:
                self.best, self._score = sentence, score


def read_part(piece: Evidence, text: str) -> Evidence | None:
    """The longest start of the piece that ends `text` (the piece cut there); None if none does."""
    body = piece.text.strip()
    for k in range(len(body) - 1, 0, -1):
        if text.endswith(body[:k]):
            return Evidence(body[:k], piece.offset)
    return None


def gold_answer(row: TaskRow) -> str:
    if not row.answers:
        raise UserError(f"task row '{row.sample_id}': no answers")
    return ", ".join(row.answers) if row.answer_kind == "all_of" else row.answers[0]


def _response(codec: ChatCodec, text: str, eos: int, budget: int, what: str) -> Response:
    ids = codec.encode(text) + [eos]
    if len(ids) > budget:
        raise UserError(f"{what} takes {len(ids)} tokens with EOS, over the turn's budget of {budget}")
    return Response(ids, text)


def sft_trace(row: TaskRow, chunks: Iterable[list[int]], codec: ChatCodec, templates: TemplateSet,
              limits: LoopLimits, decoys: bool = False) -> list[TraceTurn]:
    """The row's scripted conversations, one per turn (memory turns, then the final turn)."""
    pieces, answer = require_evidence(row), f"\\boxed{{{gold_answer(row)}}}"
    eos = codec.tokenizer.eos_token_id
    if eos is None:
        raise UserError("tokenizer: no eos_token_id (a response must end with EOS)")
    reader = EvidenceReader(row.sample_id, pieces, codec)
    count = lambda text: len(codec.encode(text))  # noqa: E731
    marker = count(SEP + EXIT) if templates.gated else 0
    room = limits.memory_budget - 1 - marker
    decoy = Decoys(row.question, codec) if decoys else None
    if decoy is not None:
        chunks = decoy_follow(decoy, chunks, room)
    texts = []
    try:
        loop = AgentLoop(row.question, reader.follow(chunks), codec, templates, limits, keep_ids=True)
        while (req := loop.next_request()) is not None:
            if req.is_final:
                reader.finish(whole=loop.progress.exit_chunk is None)
                resp = _response(codec, answer, eos, req.max_tokens, "the boxed answer")
            else:
                initial = decoy.best if decoy is not None and decoy.best else templates.initial_memory
                memory = select_memory(reader.seen, req.max_tokens - 1 - marker, count, initial)
                if templates.gated:
                    memory = gated_text(memory, loop.memory, reader.complete(row.answers, row.answer_kind))
                resp = _response(codec, memory, eos, req.max_tokens, "the initial memory")
            texts.append(resp.text)
            loop.feed(resp)
    except UserError as e:
        if f"'{row.sample_id}'" in str(e):
            raise
        raise UserError(f"task row '{row.sample_id}': {e}") from None
    return [TraceTurn(t.prompt_ids, t.response_ids, t.is_final, m) for t, m in zip(loop.result().turns, texts)]


def decoy_follow(decoy: Decoys, chunks: Iterable[list[int]], room: int) -> Iterator[list[int]]:
    """The chunks unchanged, each read by `decoy` as the loop takes it."""
    for chunk in chunks:
        decoy.read(chunk, room)
        yield chunk


def gated_text(memory: str, previous: str, complete: bool) -> str:
    """A gated memory turn's text: the memory ending in the exit marker once the evidence is
    complete, nothing (the keep) while the memory is unchanged, else the memory."""
    if complete:
        return f"{memory}{SEP}{EXIT}"
    return KEEP if memory == previous else memory


def iter_traces(rows: Iterable[TaskRow], store: ChunkStore | None, codec: ChatCodec, templates: TemplateSet,
                limits: LoopLimits, chunk_size: int, decoys: bool = False) -> Iterator[Trace]:
    """Traces of many rows, streamed: one document in memory at a time."""
    for row in rows:
        yield Trace(row.sample_id, sft_trace(row, task_chunks(row, store, codec, chunk_size), codec, templates,
                                             limits, decoys))
