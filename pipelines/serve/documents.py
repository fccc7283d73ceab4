"""A request's document (inline text, chunk-store doc_id, or text URI) as token chunks.

Checks that can fail cheaply run before the first turn (missing object, unknown doc_id,
over the length limit where the length is known); a streamed URI is also capped while
it is read, so no request can make a replica read without bound. A URI is opened only
where the app's Access rule allows (serve.allowed_paths), at the path it resolves to.

Each document counts how much of it the loop has read, for progress: tokens out of its
length (inline text, a stored doc_id), or for a streamed URI, whose length in tokens is
unknown until its end, bytes out of the object's size.

A document that cannot be read raises a DocumentError of some `kind` (domain errors, no HTTP
here): the gateway alone turns a kind into a status (gateway.DOCUMENT_STATUS).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from pipelines.agent.chunking import iter_chunks, iter_token_blocks
from pipelines.agent.codec import ChatCodec
from pipelines.errors import UserError
from pipelines.serve.access import Access
from pipelines.serve.config import ServeConfig
from pipelines.storage import file_info, read_text_blocks

# A UTF-8 token is rarely longer than this many bytes: larger objects fail before reading.
MAX_BYTES_PER_TOKEN = 16


class DocumentError(UserError):
    """A request's document that cannot be read: empty, unreadable, or no store to read it from."""

    kind = "invalid"


class NoDocument(DocumentError):
    """A request that names no document at all."""

    kind = "missing"


class DocumentNotFound(DocumentError):
    """A doc_id the chunk store does not hold."""

    kind = "not_found"


class DocumentTooLong(DocumentError):
    """A document over serve.max_doc_tokens (known before reading, or found while streaming)."""

    kind = "too_long"


@dataclass(frozen=True)
class DocLimits:
    chunk_size: int
    max_doc_tokens: int


class Reading:
    """A document's chunks, counting as they are taken how much of `total` has been read."""

    def __init__(self, chunks: Iterable[list[int]], total: int | None, unit: Literal["tokens", "bytes"],
                 size: Callable[[list[int]], int] = len):
        self._chunks, self.total, self.unit, self._size = iter(chunks), total, unit, size
        self.read = 0

    def __iter__(self) -> Iterator[list[int]]:
        for chunk in self._chunks:
            self.read += self._size(chunk)
            if self.total is not None:  # decoded bytes may differ a little from the raw ones
                self.read = min(self.read, self.total)
            yield chunk

    def chunks_unread(self, tokens_read: int, chunk_size: int, exited: bool) -> int | None:
        """Chunks a loop that exited after `tokens_read` tokens left unread (0 if it read to the
        end): counted from a length in tokens; None for a streamed uri, whose length in tokens
        is known only by reading the rest (which the exit is there to spare)."""
        if not exited:
            return 0
        if self.unit != "tokens" or self.total is None:
            return None
        return max(math.ceil((self.total - tokens_read) / chunk_size), 0)


def capped(chunks: Iterable[list[int]], limit: int, name: str) -> Iterator[list[int]]:
    seen = 0
    for chunk in chunks:
        seen += len(chunk)
        if seen > limit:
            raise DocumentTooLong(f"{name}: longer than max_doc_tokens={limit}")
        yield chunk


class Documents:
    """Resolves document references for one replica; the chunk store opens on first use."""

    def __init__(self, codec: ChatCodec, limits: DocLimits, store_uri: str | None, access: Access = Access()):
        """access: where a `uri` may point; the default rule allows none."""
        self.codec, self.limits, self.store_uri, self.access = codec, limits, store_uri, access
        self._store = None

    @classmethod
    def for_serve(cls, codec: ChatCodec, limits: DocLimits, serve: ServeConfig) -> Documents:
        return cls(codec, limits, serve.store, Access.of(serve.allowed_paths, serve.allowed_s3_prefixes))

    def store(self):
        if not self.store_uri:
            raise DocumentError("doc_id: this deployment has no chunk store (start it with --store)")
        if self._store is None:
            from pipelines.data.store import ChunkStore

            self._store = ChunkStore(self.store_uri)
        return self._store

    def chunks(self, document: str | None = None, doc_id: str | None = None,
               uri: str | None = None) -> Reading:
        if document is not None:
            return self.text_chunks(document)
        if doc_id is not None:
            return self.store_chunks(doc_id)
        if uri is not None:
            return self.uri_chunks(uri)
        raise NoDocument("document: give one of document, doc_id, uri")

    def text_chunks(self, text: str) -> Reading:
        if not text.strip():
            raise DocumentError("document: empty")
        ids = self.codec.encode(text)
        if len(ids) > self.limits.max_doc_tokens:
            raise DocumentTooLong(f"document: {len(ids)} tokens > max_doc_tokens={self.limits.max_doc_tokens}")
        return Reading(iter_chunks([ids], self.limits.chunk_size), len(ids), "tokens")

    def store_chunks(self, doc_id: str) -> Reading:
        store = self.store()
        try:
            if not store.has(doc_id):
                raise DocumentNotFound(f"doc_id '{doc_id}': not in store '{self.store_uri}'")
            n_tokens = store.info(doc_id).n_tokens
        except DocumentError:
            raise
        except UserError as e:
            raise DocumentError(str(e)) from None
        if n_tokens > self.limits.max_doc_tokens:
            raise DocumentTooLong(f"doc_id '{doc_id}': {n_tokens} tokens > max_doc_tokens="
                                  f"{self.limits.max_doc_tokens}")
        return Reading(self._store_iter(store, doc_id), n_tokens, "tokens")

    def _store_iter(self, store, doc_id: str) -> Iterator[list[int]]:
        try:
            from pipelines.data.tasks import TaskRow, task_chunks
        except ImportError:  # the task contract is not there yet: re-slice the stored ids
            return iter_chunks(store.iter_chunk_ids(doc_id), self.limits.chunk_size)
        row = TaskRow(sample_id=doc_id, question="", answers=[], answer_kind="one_of", doc_id=doc_id,
                      context=None, doc_tokens=0, task="serve", split="serve")
        return task_chunks(row, store, self.codec, self.limits.chunk_size)

    def uri_chunks(self, uri: str) -> Reading:
        limit = self.limits.max_doc_tokens
        uri = self.access.check(uri, "uri")
        try:
            info = file_info(uri)
            if info.size and info.size > limit * MAX_BYTES_PER_TOKEN:
                raise DocumentTooLong(f"uri '{uri}': {info.size} bytes, over max_doc_tokens={limit}")
            blocks = read_text_blocks(uri)
            first = next(blocks, "")
        except DocumentError:
            raise
        except UserError as e:
            raise DocumentError(f"uri: {e}") from None
        except OSError as e:
            raise DocumentError(f"uri '{uri}': unreadable ({str(e).splitlines()[0] if str(e) else e})") from None
        if info.size == 0:
            raise DocumentError(f"uri '{uri}': empty")
        tokens = iter_token_blocks(_prepend(first, blocks), self.codec.encode)
        chunks = capped(iter_chunks(tokens, self.limits.chunk_size), limit, f"uri '{uri}'")
        return Reading(chunks, info.size, "bytes", lambda chunk: len(self.codec.decode(chunk).encode()))


def _prepend(first: str, rest: Iterator[str]) -> Iterator[str]:
    yield first
    yield from rest
