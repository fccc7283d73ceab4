"""Decoding source objects into documents: text files, JSON lines (.gz), parquet.

A reader yields `Doc`s (text streamed in blocks) and `Quarantine`s for refused records;
it raises `BadObject` when the whole object is unusable (binary, not parquet, unreadable).
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.data.manifest import Quarantine
from pipelines.ingest.sources import SourceObject
from pipelines.storage import first_line, iter_lines, resolve

BLOCK = 1 << 20


class BadObject(Exception):
    """The whole object is refused; the message is the quarantine reason."""


@dataclass
class Doc:
    doc_id: str
    blocks: Iterable[str]
    line: int | None = None


Item = Doc | Quarantine


def _open(obj: SourceObject) -> pa.NativeFile:
    fs, path = resolve(obj.uri)
    try:
        return fs.open_input_stream(path, compression="gzip" if path.endswith(".gz") else None)
    except OSError as e:
        raise BadObject(f"unreadable object ({first_line(e)})") from None


def _raw_blocks(obj: SourceObject) -> Iterator[bytes]:
    with _open(obj) as stream:
        first = True
        while True:
            try:
                raw = stream.read(BLOCK)
            except OSError as e:
                raise BadObject(f"unreadable object ({first_line(e)})") from None
            if not raw:
                return
            if first and b"\x00" in raw[:8192]:
                raise BadObject("binary content (NUL bytes), not text")
            first = False
            yield raw


def read_text(obj: SourceObject) -> Iterator[Item]:
    """One document per file; the text streams in blocks, checked as it is decoded."""
    if obj.size == 0:
        raise BadObject("empty file")

    def blocks() -> Iterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8")()
        offset = 0
        for raw in _raw_blocks(obj):
            try:
                text = decoder.decode(raw)
            except UnicodeDecodeError as e:
                raise BadObject(f"not UTF-8 text (bad byte at offset {offset + e.start})") from None
            if "\x00" in text:
                raise BadObject("binary content (NUL bytes), not text")
            offset += len(raw)
            yield text
        try:
            yield decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise BadObject("not UTF-8 text (truncated character at end)") from None

    yield Doc(obj.rel, blocks())


def parse_record(raw: bytes, n: int, obj: SourceObject, text_field: str, id_field: str | None) -> Item | None:
    if not raw.strip():
        return None
    q = lambda reason: Quarantine(obj.uri, reason, n, obj.version)  # noqa: E731
    try:
        rec = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return q("not UTF-8 text")
    except json.JSONDecodeError as e:
        return q(f"malformed JSON ({e.msg} at column {e.colno})")
    if not isinstance(rec, dict):
        return q("not a JSON object")
    if text_field not in rec:
        return q(f"missing text field '{text_field}'")
    text = rec[text_field]
    if not isinstance(text, str):
        return q(f"text field '{text_field}' is {type(text).__name__}, not a string")
    doc_id = rec.get(id_field) if id_field else None
    doc_id = str(doc_id) if isinstance(doc_id, (str, int)) and str(doc_id) else f"{obj.rel}#L{n}"
    return Doc(doc_id, [text], n)


def read_jsonl(obj: SourceObject, text_field: str, id_field: str | None) -> Iterator[Item]:
    if obj.size == 0:
        raise BadObject("empty file")
    n = 0
    try:
        for n, raw in enumerate(iter_lines(_raw_blocks(obj)), 1):
            item = parse_record(raw, n, obj, text_field, id_field)
            if item is not None:
                yield item
    except BadObject as e:
        if n <= 1:
            raise
        yield Quarantine(obj.uri, f"stopped after line {n - 1}: {e}", n, obj.version)


def read_parquet(obj: SourceObject, text_field: str, id_field: str | None) -> Iterator[Item]:
    fs, path = resolve(obj.uri)
    try:
        pf = pq.ParquetFile(path, filesystem=fs)
        names = pf.schema_arrow.names
    except (OSError, pa.ArrowException) as e:
        raise BadObject(f"not a readable parquet file ({first_line(e)})") from None
    if text_field not in names:
        raise BadObject(f"no text column '{text_field}' (columns: {', '.join(names)})")
    cols = [text_field] + ([id_field] if id_field and id_field in names else [])
    row = 0
    for batch in pf.iter_batches(batch_size=1024, columns=cols):
        ids = batch.column(1).to_pylist() if len(cols) > 1 else [None] * batch.num_rows
        for text, doc_id in zip(batch.column(0).to_pylist(), ids):
            row += 1
            if not isinstance(text, str):
                yield Quarantine(obj.uri, f"text column '{text_field}' is null or not a string", row, obj.version)
                continue
            yield Doc(str(doc_id) if doc_id not in (None, "") else f"{obj.rel}#R{row}", [text], row)


def read_object(obj: SourceObject, text_field: str, id_field: str | None) -> Iterator[Item]:
    if obj.fmt == "text":
        return read_text(obj)
    if obj.fmt == "jsonl":
        return read_jsonl(obj, text_field, id_field)
    return read_parquet(obj, text_field, id_field)

