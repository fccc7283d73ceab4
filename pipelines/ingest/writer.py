"""Writing one source object's chunks (and its document index) into the store."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pipelines.data.manifest import write_atomic
from pipelines.ingest.sources import SourceObject
from pipelines.data.store import CHUNK_SCHEMA, INDEX_SCHEMA, chunk_path, index_path


def file_name(obj: SourceObject) -> str:
    """Unique per attempt, so a killed attempt's leftovers never collide with a retry."""
    key = hashlib.sha1(obj.uri.encode()).hexdigest()[:16]
    ver = hashlib.sha1(obj.version.encode()).hexdigest()[:8]
    return f"{key}-{ver}-{uuid.uuid4().hex[:8]}"


class ChunkWriter:
    """Streams chunk rows into chunks/<file>.parquet in row groups; index written on close."""

    def __init__(self, fs: pafs.FileSystem, root: str, obj: SourceObject, tokenizer: str,
                 chunk_size: int, row_group_chunks: int):
        self.fs, self.root, self.obj = fs, root, obj
        self.tokenizer, self.chunk_size, self.group = tokenizer, chunk_size, row_group_chunks
        self.file = file_name(obj)
        self.rows: list[dict] = []
        self.index: list[dict] = []
        self.n_rows = 0
        self.tokens = 0
        self._writer: pq.ParquetWriter | None = None

    def add_doc(self, doc_id: str, n: int, n_tokens: int, chunks: Iterable[tuple[list[int], str]]) -> None:
        """One document's n chunks (ids, text) in order; rows go out a row group at a time."""
        self.index.append({"doc_id": doc_id, "first_row": self.n_rows, "n_chunks": n, "n_tokens": n_tokens,
                           "chunk_size": self.chunk_size, "tokenizer": self.tokenizer,
                           "source": self.obj.uri, "etag": self.obj.version})
        for i, (ids, text) in enumerate(chunks):
            self.rows.append({"doc_id": doc_id, "chunk_idx": i, "n_chunks": n, "token_ids": ids, "text": text,
                              "n_tokens": len(ids), "tokenizer": self.tokenizer, "chunk_size": self.chunk_size,
                              "source": self.obj.uri, "etag": self.obj.version})
            if len(self.rows) >= self.group:
                self._flush(self.group)
        self.n_rows += n
        self.tokens += n_tokens

    def _flush(self, group: int) -> None:
        if self._writer is None:
            if isinstance(self.fs, pafs.LocalFileSystem):
                self.fs.create_dir(f"{self.root}/chunks", recursive=True)
            self._writer = pq.ParquetWriter(chunk_path(self.root, self.file), CHUNK_SCHEMA, filesystem=self.fs,
                                            compression="zstd")
        while self.rows and (group == 0 or len(self.rows) >= group):
            take = self.rows[:group] if group else self.rows
            self._writer.write_table(pa.Table.from_pylist(take, schema=CHUNK_SCHEMA), row_group_size=len(take))
            del self.rows[:len(take)]

    @property
    def docs(self) -> int:
        return len(self.index)

    def close(self) -> str | None:
        """Finish both files; None when the object gave no documents (nothing written)."""
        if not self.index:
            self.abort()
            return None
        self._flush(0)
        self._writer.close()
        self._writer = None
        write_atomic(self.fs, index_path(self.root, self.file), pa.Table.from_pylist(self.index, schema=INDEX_SCHEMA))
        return self.file

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        for path in (chunk_path(self.root, self.file), index_path(self.root, self.file)):
            try:
                self.fs.delete_file(path)
            except (FileNotFoundError, OSError):
                pass
