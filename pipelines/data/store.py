"""The chunk store: token-chunked documents in parquet, local or s3://, read lazily.

Layout under the store URI (one writer at a time):
    chunks/<file>.parquet    one file per ingested source object; rows in document order:
                             doc_id, chunk_idx, n_chunks, token_ids, text, n_tokens,
                             tokenizer, chunk_size, source, etag; small row groups
    index/<file>.parquet     one row per document: doc_id, first_row, n_chunks, n_tokens, ...
    manifest/*.parquet       the commit log (see manifest.py): live files, quarantine

Reading one document touches only the index (held compactly, see doc_index.py) and the
row groups that hold its chunks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.errors import UserError
from pipelines.data.doc_index import DocIndex, Location
from pipelines.data.manifest import Manifest, ManifestView
from pipelines.storage import resolve

CHUNK_SCHEMA = pa.schema([
    ("doc_id", pa.string()), ("chunk_idx", pa.int32()), ("n_chunks", pa.int32()),
    ("token_ids", pa.list_(pa.int32())), ("text", pa.string()), ("n_tokens", pa.int32()),
    ("tokenizer", pa.string()), ("chunk_size", pa.int32()), ("source", pa.string()), ("etag", pa.string()),
])
INDEX_SCHEMA = pa.schema([
    ("doc_id", pa.string()), ("first_row", pa.int64()), ("n_chunks", pa.int32()), ("n_tokens", pa.int64()),
    ("chunk_size", pa.int32()), ("tokenizer", pa.string()), ("source", pa.string()), ("etag", pa.string()),
])


@dataclass(frozen=True)
class DocInfo:
    doc_id: str
    n_chunks: int
    n_tokens: int
    chunk_size: int
    tokenizer: str
    source: str


def chunk_path(root: str, file: str) -> str:
    return f"{root}/chunks/{file}.parquet"


def index_path(root: str, file: str) -> str:
    return f"{root}/index/{file}.parquet"


class ChunkStore:
    """Read side of the store. Rollout and serve read documents only through this."""

    def __init__(self, uri: str):
        self.uri = str(uri).rstrip("/")
        self.fs, self.root = resolve(self.uri)
        self._view: ManifestView | None = None
        self._index: DocIndex | None = None

    def refresh(self) -> None:
        """Forget cached index state (after another process ingested more)."""
        self._view, self._index = None, None

    def view(self) -> ManifestView:
        if self._view is None:
            self._view = Manifest(self.fs, self.root).load()
        return self._view

    def _index_batches(self) -> Iterator[tuple[str, pa.RecordBatch]]:
        for file in self.view().live_files():
            pf = pq.ParquetFile(index_path(self.root, file), filesystem=self.fs)
            for batch in pf.iter_batches(batch_size=8192):
                yield file, batch

    def doc_ids(self) -> Iterator[str]:
        hidden = self.view().hidden()
        for file, batch in self._index_batches():
            for doc_id in batch.column("doc_id").to_pylist():
                if (doc_id, file) not in hidden:
                    yield doc_id

    def count(self) -> int:
        hidden = len(self.view().hidden())
        return sum(e.docs for e in self.view().objects.values() if e.status == "done") - hidden

    def _doc_index(self) -> DocIndex:
        if self._index is None:
            self._index = DocIndex(self._index_batches(), self.view().hidden(), self._index_ids)
        return self._index

    def _index_ids(self, file: str) -> list[str]:
        table = pq.read_table(index_path(self.root, file), columns=["doc_id"], filesystem=self.fs)
        return table.column("doc_id").to_pylist()

    def has(self, doc_id: str) -> bool:
        return self._doc_index().find(doc_id) is not None

    def info(self, doc_id: str) -> DocInfo:
        loc = self._loc(doc_id)
        f = loc.file
        return DocInfo(doc_id, loc.n_chunks, loc.n_tokens, f.chunk_size, f.tokenizer, f.source)

    def _loc(self, doc_id: str) -> Location:
        loc = self._doc_index().find(doc_id)
        if loc is None:
            raise UserError(f"doc_id '{doc_id}': not in store '{self.uri}'")
        return loc

    def _iter_column(self, loc: Location, column: str) -> Iterator:
        pf = pq.ParquetFile(chunk_path(self.root, loc.file.file), filesystem=self.fs)
        start, stop, row = loc.first_row, loc.first_row + loc.n_chunks, 0
        for g in range(pf.metadata.num_row_groups):
            n = pf.metadata.row_group(g).num_rows
            lo, hi = max(start, row), min(stop, row + n)
            if lo < hi:
                values = pf.read_row_group(g, columns=[column]).column(0)
                yield from values.slice(lo - row, hi - lo).to_pylist()
            row += n
            if row >= stop:
                break

    def iter_chunk_ids(self, doc_id: str) -> Iterator[list[int]]:
        """The document's chunks of token ids, in order, one row group at a time."""
        return self._iter_column(self._loc(doc_id), "token_ids")

    def iter_texts(self, doc_id: str) -> Iterator[str]:
        """The document's chunk texts in order; joined they give the document text."""
        return self._iter_column(self._loc(doc_id), "text")
