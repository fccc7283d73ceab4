"""Evidence for rows that name no supporting pieces: the document's sentences holding a gold answer.

A user's own QA rows (`data import`) carry no supporting facts, yet the SFT warm start
(pipelines.learn.traces) needs the pieces a good memory keeps. We take every sentence that
contains a gold answer (case-insensitive, as a whole word), in document order, a repeated
sentence once, at most MAX_PIECES of them. The document is read chunk by chunk from the store, so each offset is in
the store's own tokens (exact, not a re-tokenization), and memory holds one sentence and the
chunks it spans.

Sentences end at '.', '!' or '?' before whitespace, or at a newline; a run of more than
MAX_SENTENCE characters without one is cut at whitespace, so a piece always fits a memory.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from pipelines.agent.chunking import split_at_whitespace
from pipelines.data.tasks import Evidence

SENTENCE_END = re.compile(r"[.!?](?=\s)|\n")
MAX_SENTENCE = 1000
MAX_PIECES = 16
Decode = Callable[[list[int]], str]


@dataclass(frozen=True)
class _Chunk:
    start: int  # characters of the document before it
    token: int  # tokens of the document before it
    ids: list[int]
    text: str


class Sentences:
    """Streaming sentence splitter: feed text blocks, get (start char, raw sentence) when complete."""

    def __init__(self):
        self.buf, self.start = "", 0  # start: characters of the document before buf

    def feed(self, text: str) -> list[tuple[int, str]]:
        self.buf += text
        return self._cut(final=False)

    def close(self) -> list[tuple[int, str]]:
        return self._cut(final=True)

    def _cut(self, final: bool) -> list[tuple[int, str]]:
        out, pos, buf = [], 0, self.buf
        while pos < len(buf):
            m = SENTENCE_END.search(buf, pos, pos + MAX_SENTENCE)
            if m:
                end = m.end()
            elif len(buf) - pos > MAX_SENTENCE:
                window = buf[pos:pos + MAX_SENTENCE]
                end = pos + len(split_at_whitespace(window)[0] or window)
            elif final:
                end = len(buf)
            else:
                break
            out.append((self.start + pos, buf[pos:end]))
            pos = end
        self.buf, self.start = buf[pos:], self.start + pos
        return out


def answer_patterns(answers: Iterable[str]) -> list[re.Pattern]:
    return [re.compile(rf"(?<!\w){re.escape(a.strip())}(?!\w)", re.IGNORECASE) for a in answers if a.strip()]


def token_at(chunks: list[_Chunk], pos: int, decode: Decode) -> int:
    """Tokens of the document wholly before character `pos` (a space merged into the piece's
    first token counts with the piece, as builders.common.locate has it)."""
    c = next(c for c in reversed(chunks) if c.start <= pos)
    local, lo, hi = pos - c.start, 0, len(c.ids)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(decode(c.ids[:mid])) <= local:
            lo = mid
        else:
            hi = mid - 1
    return c.token + lo


def answer_evidence(chunks: Iterable[tuple[str, list[int]]], answers: list[str],
                    decode: Decode) -> tuple[Evidence, ...]:
    """The sentences of a document (its stored chunks: text, token ids) that hold a gold answer."""
    patterns = answer_patterns(answers)
    if not patterns:
        return ()
    sentences, held, out, seen = Sentences(), [], [], set()
    chars = tokens = 0

    def take(spans: list[tuple[int, str]]) -> Iterator[Evidence]:
        for start, raw in spans:
            piece = raw.strip()
            if piece and piece not in seen and any(p.search(piece) for p in patterns):
                seen.add(piece)
                yield Evidence(piece, token_at(held, start + len(raw) - len(raw.lstrip()), decode))

    for text, ids in chunks:
        held.append(_Chunk(chars, tokens, list(ids), text))
        chars, tokens = chars + len(text), tokens + len(ids)
        out += take(sentences.feed(text))
        held = [c for c in held if c.start + len(c.text) > sentences.start] or held[-1:]
        if len(out) >= MAX_PIECES:
            return tuple(out[:MAX_PIECES])
    out += take(sentences.close())
    return tuple(out[:MAX_PIECES])
