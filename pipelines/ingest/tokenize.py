"""Tokenizing a stream of documents in batches across documents, pieces cut at whitespace.

Pure logic over an `encode_batch(texts) -> list[list[int]]` callable: a large document is
cut into whitespace-aligned pieces (a word never straddles two tokenizer calls), pieces of
many small documents share one call, and finished documents come out in input order.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from pipelines.agent.chunking import split_at_whitespace

EncodeBatch = Callable[[list[str]], list[list[int]]]


@dataclass
class DocTokens:
    doc_id: str
    line: int | None
    ids: array = field(default_factory=lambda: array("i"))  # 4 bytes a token, not a list of ints
    blank: bool = True
    pending: int = 0
    closed: bool = False


def split_pieces(blocks: Iterable[str], piece_chars: int) -> Iterator[str]:
    """Whitespace-aligned pieces of about piece_chars (a piece without whitespace may be longer)."""
    carry = ""
    for block in blocks:
        carry += block
        pos = 0
        while len(carry) - pos >= piece_chars:
            window = carry[pos:pos + piece_chars]
            head = split_at_whitespace(window)[0] or window
            yield head
            pos += len(head)
        carry = carry[pos:]
    if carry:
        yield carry


class Batcher:
    def __init__(self, encode_batch: EncodeBatch, batch_chars: int):
        self.encode_batch, self.batch_chars = encode_batch, batch_chars
        self.pieces: list[str] = []
        self.owners: list[DocTokens] = []
        self.size = 0
        self.queue: list[DocTokens] = []

    def add(self, doc: DocTokens, piece: str) -> None:
        self.pieces.append(piece)
        self.owners.append(doc)
        doc.pending += 1
        doc.blank = doc.blank and not piece.strip()
        self.size += len(piece)

    def full(self) -> bool:
        return self.size >= self.batch_chars

    def flush(self) -> None:
        if self.pieces:
            for owner, ids in zip(self.owners, self.encode_batch(self.pieces)):
                owner.ids.extend(ids)
                owner.pending -= 1
        self.pieces, self.owners, self.size = [], [], 0

    def ready(self) -> Iterator[DocTokens]:
        while self.queue and self.queue[0].closed and self.queue[0].pending == 0:
            yield self.queue.pop(0)


def tokenize_docs(docs: Iterable, encode_batch: EncodeBatch, batch_chars: int,
                  piece_chars: int) -> Iterator[DocTokens]:
    """DocTokens for each `Doc` (doc_id, blocks, line), in order; other items pass through."""
    b = Batcher(encode_batch, batch_chars)
    for doc in docs:
        if not hasattr(doc, "blocks"):
            yield doc
            continue
        dt = DocTokens(doc.doc_id, doc.line)
        b.queue.append(dt)
        for piece in split_pieces(doc.blocks, piece_chars):
            b.add(dt, piece)
            if b.full():
                b.flush()
                yield from b.ready()
        dt.closed = True
    b.flush()
    yield from b.ready()
