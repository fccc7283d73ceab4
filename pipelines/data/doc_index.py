"""Where each document lives in the chunk store, in ~40 bytes per document.

A Python dict of doc_id -> location costs a few hundred bytes per document: gigabytes at
millions of documents, in every replica and rollout worker. This index keeps columns of
numbers instead: a 64-bit hash of each doc_id (sorted, for binary search), the index file
it is in, its first chunk row and its chunk and token counts. Per-file metadata (source,
tokenizer, chunk size) is kept once per file. A hash collision between two stored ids
(odds ~n^2/2^65) is resolved by reading the candidates' ids back from their index files.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa


def doc_hash(doc_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(doc_id.encode(), digest_size=8).digest(), "little", signed=True)


@dataclass(frozen=True)
class FileMeta:
    file: str
    chunk_size: int
    tokenizer: str
    source: str


@dataclass(frozen=True)
class Location:
    doc_id: str
    file: FileMeta
    first_row: int
    n_chunks: int
    n_tokens: int


class DocIndex:
    """Built once from (file, index batch) pairs in commit order; the first copy of an id wins."""

    def __init__(self, batches: Iterable[tuple[str, pa.RecordBatch]], hidden: set[tuple[str, str]],
                 read_ids: Callable[[str], list[str]]):
        self._read_ids = read_ids  # file -> doc_ids in index-row order (collision path only)
        files: dict[str, int] = {}
        self.files: list[FileMeta] = []
        cols: dict[str, list] = {k: [] for k in ("hash", "file", "row", "first_row", "n_chunks", "n_tokens")}
        rows_seen: dict[int, int] = {}
        for file, batch in batches:
            if file not in files:
                files[file] = len(self.files)
                first = batch.slice(0, 1).to_pylist()[0] if batch.num_rows else {}
                self.files.append(FileMeta(file, first.get("chunk_size", 0), first.get("tokenizer", ""),
                                           first.get("source", "")))
            no = files[file]
            self._add(cols, no, file, batch, rows_seen.get(no, 0), hidden)
            rows_seen[no] = rows_seen.get(no, 0) + batch.num_rows
        merged = {k: np.concatenate(v) if v else np.zeros(0, dtype=np.int64) for k, v in cols.items()}
        order = np.argsort(merged["hash"], kind="stable")
        self._hash, self._file, self._row = (merged[k][order] for k in ("hash", "file", "row"))
        self._first, self._chunks, self._tokens = (merged[k][order] for k in ("first_row", "n_chunks", "n_tokens"))

    def __len__(self) -> int:
        return len(self._hash)

    @staticmethod
    def _add(cols: dict, file_no: int, file: str, batch: pa.RecordBatch, start: int, hidden: set) -> None:
        """Appends one batch as numpy arrays (no per-document Python objects survive it)."""
        ids = batch.column("doc_id").to_pylist()
        keep = np.fromiter(((d, file) not in hidden for d in ids), dtype=bool, count=len(ids))
        hashes = np.fromiter((doc_hash(d) for d in ids), dtype=np.int64, count=len(ids))
        columns = {"hash": hashes, "file": np.full(len(ids), file_no, dtype=np.int32),
                   "row": np.arange(start, start + len(ids), dtype=np.int64),
                   "first_row": batch.column("first_row").to_numpy(zero_copy_only=False).astype(np.int64),
                   "n_chunks": batch.column("n_chunks").to_numpy(zero_copy_only=False).astype(np.int32),
                   "n_tokens": batch.column("n_tokens").to_numpy(zero_copy_only=False).astype(np.int64)}
        for key, values in columns.items():
            cols[key].append(values[keep])

    def find(self, doc_id: str) -> Location | None:
        h = doc_hash(doc_id)
        lo, hi = np.searchsorted(self._hash, h, "left"), np.searchsorted(self._hash, h, "right")
        if lo == hi:
            return None
        if hi - lo > 1 and not self._same_doc(lo, hi):
            lo = next((i for i in range(lo, hi) if self._id_at(i) == doc_id), None)
            if lo is None:
                return None
        return Location(doc_id, self.files[self._file[lo]], int(self._first[lo]), int(self._chunks[lo]),
                        int(self._tokens[lo]))

    def _same_doc(self, lo: int, hi: int) -> bool:
        """Several entries with one hash: copies of one id (the first wins), or a collision."""
        return len({self._id_at(i) for i in range(lo, hi)}) == 1

    def _id_at(self, i: int) -> str:
        return self._read_ids(self.files[self._file[i]].file)[int(self._row[i])]
