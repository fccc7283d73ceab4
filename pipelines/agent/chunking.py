"""Slicing documents into chunks of the model tokenizer's token ids, streaming.

A long document arrives as a stream of text blocks. Each block is cut at its last
whitespace so a word never straddles two tokenizer calls; the carried tail joins the
next block. Token ids are emitted in chunks of exactly `chunk_size` (the last may be short).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator

Encode = Callable[[str], list[int]]


def n_turns(doc_tokens: int, chunk_size: int) -> int:
    """Memory turns plus the final turn: ceil(N / chunk_size) + 1."""
    return math.ceil(doc_tokens / chunk_size) + 1


def split_at_whitespace(text: str) -> tuple[str, str]:
    """(head, tail): tail starts at the last whitespace run, so it can join the next block."""
    cut = len(text.rstrip())
    while cut > 0 and not text[cut - 1].isspace():
        cut -= 1
    while cut > 0 and text[cut - 1].isspace():
        cut -= 1
    if cut == 0:
        return "", text
    return text[:cut], text[cut:]


def iter_token_blocks(blocks: Iterable[str], encode: Encode, max_carry: int = 1 << 20) -> Iterator[list[int]]:
    """Token ids of a text stream, tokenizing one whitespace-aligned piece at a time."""
    carry = ""
    for block in blocks:
        head, carry = split_at_whitespace(carry + block)
        if not head and len(carry) > max_carry:  # no whitespace at all: cut anyway
            head, carry = carry, ""
        if head:
            yield encode(head)
    if carry:
        yield encode(carry)


def iter_chunks(token_blocks: Iterable[list[int]], chunk_size: int) -> Iterator[list[int]]:
    """Re-slice a stream of token id lists into chunks of exactly chunk_size (last may be short)."""
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    buf: list[int] = []
    for ids in token_blocks:
        buf.extend(ids)
        while len(buf) >= chunk_size:
            yield buf[:chunk_size]
            del buf[:chunk_size]
    if buf:
        yield buf

