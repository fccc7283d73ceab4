"""Reading and checking a user's QA rows for `data import` (the format: pipelines.ingest.user_data).

A file that cannot be read as a whole raises a one-line UserError naming it and the line; a
row that breaks the format raises BadRow, whose message is its quarantine reason.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pipelines.agent.reward import ANSWER_KINDS
from pipelines.errors import UserError
from pipelines.data.store import ChunkStore
from pipelines.storage import BLOCK, file_info, first_line, iter_lines, read_text_blocks, resolve

FIELDS = ("id", "question", "answers", "answer_kind", "split", "document", "document_uri", "doc_id")
DOC_FIELDS = ("document", "document_uri", "doc_id")
SPLITS = ("train", "eval")


class BadRow(Exception):
    """The row is quarantined; the message is the reason."""


def is_parquet(uri: str) -> bool:
    return uri.lower().endswith(".parquet")


def input_rows(uri: str) -> Iterator[tuple[int, dict]]:
    """(line or row number, record) of a .jsonl(.gz) or .parquet file, streamed."""
    info = file_info(uri)
    if info.type == pafs.FileType.NotFound:
        raise UserError(f"input '{uri}': no such file or object")
    if info.type == pafs.FileType.Directory:
        raise UserError(f"input '{uri}': is a folder; give one .jsonl or .parquet file")
    if is_parquet(uri):
        return _parquet_rows(uri)
    if uri.lower().endswith((".jsonl", ".jsonl.gz", ".json")):
        return _jsonl_rows(uri)
    raise UserError(f"input '{uri}': unknown format (expected .jsonl, .jsonl.gz or .parquet)")


def _jsonl_rows(uri: str) -> Iterator[tuple[int, dict]]:
    fs, path = resolve(uri)
    n = 0
    try:
        with fs.open_input_stream(path, compression="gzip" if path.endswith(".gz") else None) as stream:
            for n, raw in enumerate(iter_lines(iter(lambda: stream.read(BLOCK), b"")), 1):
                if raw.strip():
                    yield n, _json_record(raw, uri, n)
    except OSError as e:
        raise UserError(f"input '{uri}' line {n + 1}: unreadable ({first_line(e)})") from None


def _json_record(raw: bytes, uri: str, n: int) -> dict:
    try:
        rec = json.loads(raw)
    except UnicodeDecodeError:
        raise UserError(f"input '{uri}' line {n}: not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise UserError(f"input '{uri}' line {n}: malformed JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(rec, dict):
        raise UserError(f"input '{uri}' line {n}: not a JSON object")
    return rec


def _parquet_rows(uri: str) -> Iterator[tuple[int, dict]]:
    fs, path = resolve(uri)
    try:
        pf = pq.ParquetFile(path, filesystem=fs)
    except (OSError, pa.ArrowException) as e:
        raise UserError(f"input '{uri}': not a readable parquet file ({first_line(e)})") from None
    n = 0
    try:
        for batch in pf.iter_batches(batch_size=256):
            for rec in batch.to_pylist():
                n += 1
                yield n, rec
    except (OSError, pa.ArrowException) as e:
        raise UserError(f"input '{uri}' row {n + 1}: unreadable ({first_line(e)})") from None


def _text(rec: dict, key: str, missing: str) -> str:
    value = rec.get(key)
    if value is None:
        raise BadRow(missing)
    if not isinstance(value, str) or not value.strip():
        raise BadRow(f"{key} must be a non-empty string")
    return value


def _answers(rec: dict) -> list[str]:
    a = rec.get("answers")
    a = [a] if isinstance(a, str) else a
    if not isinstance(a, list) or not all(isinstance(x, str) for x in a):
        raise BadRow("no answers" if a is None else "answers must be a string or a list of strings")
    if not any(x.strip() for x in a):
        raise BadRow("no answers")
    return [x for x in a if x.strip()]


def _choice(rec: dict, key: str, default: str, allowed: tuple[str, ...]) -> str:
    value = rec.get(key) or default
    if value not in allowed:
        raise BadRow(f"{key} '{value}' not one of {list(allowed)}")
    return value


def sample_id(rec: dict, default: str) -> str:
    sid = rec.get("id")
    if sid is None:
        return default
    if isinstance(sid, bool) or not isinstance(sid, (str, int)) or not str(sid).strip():
        raise BadRow("id must be a non-empty string or an integer")
    return str(sid)


def content_id(text: str) -> str:
    """A document's store id from its text: the same document is stored once, whoever names it."""
    return f"import/{hashlib.sha256(text.encode()).hexdigest()[:32]}"


def _doc_uri(value: str, input_uri: str) -> str:
    if "://" in value or value.startswith(("/", "~")):
        return value
    return posixpath.join(posixpath.dirname(input_uri), value)


def _read_document(value: str, input_uri: str) -> str:
    uri = _doc_uri(value, input_uri)
    try:
        return "".join(read_text_blocks(uri))
    except UserError as e:
        raise BadRow(f"unreadable document_uri ({e})") from None
    except OSError as e:
        raise BadRow(f"unreadable document_uri '{uri}' ({first_line(e)})") from None


def document(rec: dict, store: ChunkStore, input_uri: str) -> tuple[str, str | None]:
    """(doc_id, the text to stage, or None when the document is already in the store)."""
    given = [f for f in DOC_FIELDS if rec.get(f) is not None]
    if not given:
        raise BadRow(f"no document: give one of {', '.join(DOC_FIELDS)}")
    if len(given) > 1:
        raise BadRow(f"{len(given)} document fields ({', '.join(given)}): give exactly one")
    key = given[0]
    value = _text(rec, key, "")
    if key == "doc_id":
        if not store.has(value):
            raise BadRow(f"doc_id '{value}' not in store '{store.uri}'")
        return value, None
    if key == "document_uri":
        value = _read_document(value, input_uri)
        if not value.strip():
            raise BadRow(f"document_uri '{rec[key]}': empty text")
    if "\x00" in value:
        raise BadRow(f"{key}: binary content (NUL bytes), not text")
    doc_id = content_id(value)
    return doc_id, (None if store.has(doc_id) else value)


def parse_row(rec: dict, n: int, sid: str, split: str, store: ChunkStore,
              input_uri: str) -> tuple[dict, str | None]:
    """A row's stub (all but doc_tokens and evidence) and the text to stage; BadRow if refused."""
    stub = {"line": n, "sample_id": sid, "question": _text(rec, "question", "missing question"),
            "answers": _answers(rec), "answer_kind": _choice(rec, "answer_kind", "one_of", ANSWER_KINDS),
            "split": _choice(rec, "split", split, SPLITS)}
    stub["doc_id"], text = document(rec, store, input_uri)
    return stub, text
