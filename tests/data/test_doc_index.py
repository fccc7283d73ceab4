"""The compact document index: lookups, first copy wins, hidden rows, hash collisions."""

from __future__ import annotations

import pyarrow as pa

from pipelines.data import doc_index
from pipelines.data.doc_index import DocIndex
from pipelines.data.store import INDEX_SCHEMA


def batch(file: str, ids: list[str], first: int = 0) -> tuple[str, pa.RecordBatch]:
    rows = [{"doc_id": d, "first_row": first + 3 * i, "n_chunks": 3, "n_tokens": 100 + i, "chunk_size": 64,
             "tokenizer": "tok", "source": f"s3://b/{file}", "etag": "e"} for i, d in enumerate(ids)]
    return file, pa.RecordBatch.from_pylist(rows, schema=INDEX_SCHEMA)


def no_reads(file: str) -> list[str]:
    raise AssertionError(f"read {file} without a collision")


def test_finds_every_document_across_files_and_batches():
    ids = [f"doc-{i}" for i in range(5000)]
    index = DocIndex([batch("a", ids[:2000]), batch("a", ids[2000:3000], 6000), batch("b", ids[3000:])],
                     set(), no_reads)
    assert len(index) == 5000
    loc = index.find("doc-2500")
    assert (loc.file.file, loc.first_row, loc.n_chunks, loc.n_tokens) == ("a", 6000 + 3 * 500, 3, 600)
    assert index.find("doc-4999").file.source == "s3://b/b"
    assert index.find("doc-5000") is None


def test_first_copy_wins_and_hidden_rows_are_skipped():
    ids = {"a": ["x", "y"], "b": ["y", "z"]}
    index = DocIndex([batch("a", ids["a"]), batch("b", ids["b"])], {("x", "a")}, lambda f: ids[f])
    assert index.find("x") is None
    assert index.find("y").file.file == "a"
    assert index.find("z").file.file == "b"


def test_hash_collision_is_resolved_by_reading_ids(monkeypatch):
    monkeypatch.setattr(doc_index, "doc_hash", lambda doc_id: 7)  # every id collides
    ids = {"a": ["p", "q"], "b": ["r"]}
    index = DocIndex([batch("a", ids["a"]), batch("b", ids["b"])], set(), lambda f: ids[f])
    assert index.find("q").first_row == 3
    assert index.find("r").file.file == "b"
    assert index.find("s") is None
