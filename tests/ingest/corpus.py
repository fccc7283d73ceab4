"""A small mixed corpus: every supported format plus each kind of bad input."""

from __future__ import annotations

import gzip
import io
import json

import pyarrow as pa
import pyarrow.parquet as pq

GOOD_TEXT = "Hello world.\nThis is a text doc with an emoji \U0001F600 and accents: caf\u00e9.\n" * 40
MD_TEXT = "# Title\n\nSome *markdown* text.\n\n- a list item\n" * 30


def parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def mixed_corpus() -> tuple[dict[str, bytes], dict[str, str], dict[str, str]]:
    """(files by relative key, expected documents {doc_id: text}, expected quarantine {where: reason part})."""
    jsonl = "\n".join([
        json.dumps({"id": "j1", "text": "first json document " * 50}),
        json.dumps({"text": "a document without an id"}),
        "{not json",
        json.dumps({"body": "no text field"}),
        json.dumps({"id": "j5", "text": ""}),
    ]) + "\n"
    files = {
        "docs/a.txt": GOOD_TEXT.encode(),
        "docs/b.md": MD_TEXT.encode(),
        "lines/c.jsonl": jsonl.encode(),
        "lines/d.jsonl.gz": gzip.compress((json.dumps({"id": "g1", "text": "gzipped document " * 30}) + "\n").encode()),
        "tables/e.parquet": parquet_bytes(pa.table({"id": ["p1", "p2", None], "text": ["parquet one", "parquet two", None]})),
        "bad/empty.txt": b"",
        "bad/binary.txt": bytes(range(256)) * 8,
        "bad/latin1.md": "caf\xe9 cr\xe8me".encode("latin-1"),
        "bad/nocol.parquet": parquet_bytes(pa.table({"body": ["x"]})),
        "bad/notparquet.parquet": b"PAR1 this is not really parquet",
        "notes.csv": b"a,b\n1,2\n",
    }
    docs = {"docs/a.txt": GOOD_TEXT, "docs/b.md": MD_TEXT, "j1": "first json document " * 50,
            "lines/c.jsonl#L2": "a document without an id", "g1": "gzipped document " * 30,
            "p1": "parquet one", "p2": "parquet two"}
    quarantine = {"bad/empty.txt": "empty file", "bad/binary.txt": "binary content",
                  "bad/latin1.md": "not UTF-8", "bad/nocol.parquet": "no text column 'text'",
                  "bad/notparquet.parquet": "not a readable parquet", "lines/c.jsonl:3": "malformed JSON",
                  "lines/c.jsonl:4": "missing text field 'text'", "lines/c.jsonl:5": "empty text",
                  "tables/e.parquet:3": "null or not a string"}
    return files, docs, quarantine


def quarantine_map(view) -> dict[str, str]:
    out = {}
    for q in view.quarantine:
        key = q.source.split("/corpus/", 1)[-1] + (f":{q.line}" if q.line else "")
        out[key] = q.reason
    return out
