"""Stop strings and streamed text for the transformers engines (vLLM does both itself).

A stream may hand out only text that cannot change: not a trailing half character (the
next token completes it) and not a tail that could still become a stop string (the stop
string is not returned, OpenAI semantics), so some text is held back until it is safe.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from typing import Any

from pipelines.engine.base import Delta


def cut_at_stop(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    """(the text before the earliest stop string; whether there was one)."""
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    if not hits:
        return text, False
    return text[:min(hits)], True


def unsafe_tail(text: str, stops: Sequence[str]) -> int:
    """Characters at the end of text that may still change: half a character, or a stop's start."""
    n = len(text) - len(text.rstrip("\ufffd"))
    body = text[:len(text) - n]
    grow = max((k for s in stops for k in range(1, len(s)) if body.endswith(s[:k])), default=0)
    return n + grow


class TextDeltas:
    """The growing list of sampled ids -> the pieces a stream may send. A piece carries every
    token since the previous one (held-back text included); the one where a stop string
    appears is the last (finish_reason "stop"), and the caller then ends generation."""

    def __init__(self, tokenizer: Any, stops: Sequence[str]):
        self.tokenizer, self.stops = tokenizer, tuple(stops)
        self.ids: list[int] = []
        self._unsent: list[int] = []
        self._sent = 0  # characters of text sent

    def push(self, ids: list[int]) -> Delta | None:
        """The piece to send after these tokens, or None while all new text is held back."""
        self.ids.extend(ids)
        self._unsent.extend(ids)
        text, stopped = cut_at_stop(self._text(), self.stops)
        if stopped:
            return self._piece(text, "stop")
        safe = text[:len(text) - unsafe_tail(text, self.stops)]
        return self._piece(safe, None) if len(safe) > self._sent else None

    def finish(self, reason: str) -> Delta:
        """Generation ended: the last piece, with what was held back (a stop's start that never completed)."""
        return self._piece(cut_at_stop(self._text(), self.stops)[0], reason)

    def _text(self) -> str:
        return self.tokenizer.decode(self.ids, skip_special_tokens=True)

    def _piece(self, text: str, reason: str | None) -> Delta:
        piece = Delta(text[self._sent:], self._unsent, reason)
        self._sent, self._unsent = max(self._sent, len(text)), []
        return piece


async def collect(deltas: AsyncGenerator[Delta, None]) -> tuple[list[int], str, str]:
    """A whole stream -> (token ids, text, finish reason)."""
    ids: list[int] = []
    text: list[str] = []
    finish = "stop"
    async with aclosing(deltas):  # cancelled, the stream still ends its generation at once
        async for d in deltas:
            ids.extend(d.token_ids)
            text.append(d.text)
            finish = d.finish_reason or finish
    return ids, "".join(text), finish
