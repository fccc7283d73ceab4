"""Batch jobs: stream input rows in shards, answer them, write one parquet shard per input shard.

Shard k holds input rows [k*S, (k+1)*S) and is written whole (temporary name, then
rename; on S3 an object appears only when complete), so a restarted job skips the
shards that exist and redoes the rest: no duplicate and no missing row. The job's
settings and progress: pipelines.serve.jobstore. A row of a shard is an OutputRow (schema.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import re
import types
import typing
from collections.abc import Awaitable, Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pipelines.errors import UserError
from pipelines.serve.access import real, under
from pipelines.serve.schema import OutputRow, ServeError
from pipelines.storage import BLOCK, first_line, iter_lines, resolve, written

SHARD = re.compile(r"^part-(\d{6})\.parquet$")
INPUT_SUFFIXES = (".parquet", ".jsonl")


def _arrow_schema(row_type: type) -> pa.Schema:
    """Each field's arrow type: from its annotation (X | None is a nullable X), or its "arrow" metadata."""
    arrow = {str: pa.string(), int: pa.int64(), float: pa.float64(), list[str]: pa.list_(pa.string())}
    hints = typing.get_type_hints(row_type)
    columns = []
    for f in dataclasses.fields(row_type):
        hint = hints[f.name]
        if isinstance(hint, types.UnionType):
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        columns.append((f.name, f.metadata.get("arrow") or arrow[hint]))
    return pa.schema(columns)


OUTPUT_SCHEMA = _arrow_schema(OutputRow)
Answer = Callable[[dict], Awaitable[OutputRow]]


def job_id_for(input_uri: str, output_uri: str) -> str:
    """Same input and output -> same job: submitting it again resumes it."""
    return hashlib.sha1(f"{input_uri}\n{output_uri}".encode()).hexdigest()[:16]


def input_files(uri: str) -> list[tuple[pafs.FileSystem, str]]:
    fs, path = resolve(uri)
    try:
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.File:
            found = [path]
        elif info.type == pafs.FileType.Directory:
            infos = fs.get_file_info(pafs.FileSelector(path, recursive=True))
            found = sorted(i.path for i in infos if i.type == pafs.FileType.File
                           and i.base_name.endswith(INPUT_SUFFIXES) and not i.base_name.startswith(("_", ".")))
        else:
            raise UserError(f"input '{uri}': no such file or folder")
    except OSError as e:
        raise UserError(f"input '{uri}': unreadable ({first_line(e)})") from None
    if not found:
        raise UserError(f"input '{uri}': no .parquet or .jsonl files")
    bad = [p for p in found if not p.endswith(INPUT_SUFFIXES)]
    if bad:
        raise UserError(f"input '{uri}': expected .parquet or .jsonl rows, got '{bad[0]}'")
    if isinstance(fs, pafs.LocalFileSystem):
        check_links(uri, path, found)
    return [(fs, p) for p in found]


def check_links(uri: str, folder: str, files: list[str]) -> None:
    """A checked input folder may not hold symlinks that lead out of it."""
    root = real(folder)
    out = next((f for f in files if not under(real(f), root)), None)
    if out:
        raise ServeError(f"input '{uri}': '{out}' links outside the folder", 403)


def iter_rows(uri: str, batch_rows: int = 256) -> Iterator[dict]:
    """Every input row in order, streamed; a malformed JSON line becomes a row with `error`."""
    for fs, path in input_files(uri):
        yield from file_rows(fs, path, batch_rows=batch_rows)


def file_rows(fs: pafs.FileSystem, path: str, row: int = 0, offset: int = 0, line: int = 1,
              batch_rows: int = 256) -> Iterator[dict]:
    """A file's rows from its row `row` on: parquet skips the row groups before it; jsonl starts
    reading at byte `offset`, where line number `line` (that row's) begins (shards.py plans both)."""
    if path.endswith(".parquet"):
        with fs.open_input_file(path) as f:
            pf = pq.ParquetFile(f)
            groups, skip = _row_groups_from(pf.metadata, row)
            batches = pf.iter_batches(batch_size=batch_rows, row_groups=groups) if groups else ()
            yield from itertools.islice((r for b in batches for r in b.to_pylist()), skip, None)
        return
    with fs.open_input_file(path) as f:
        f.seek(offset)
        for _, n, raw in jsonl_lines(f, offset, line):
            yield _json_row(raw.decode("utf-8", errors="replace"), f"{path}:{n}")


def _row_groups_from(meta: pq.FileMetaData, row: int) -> tuple[list[int], int]:
    """The row groups from the one holding `row` on, and how many rows of that group come before it."""
    first = 0
    for g in range(meta.num_row_groups):
        n = meta.row_group(g).num_rows
        if row < first + n:
            return list(range(g, meta.num_row_groups)), row - first
        first += n
    return [], 0


def jsonl_lines(f, offset: int = 0, line: int = 1) -> Iterator[tuple[int, int, bytes]]:
    """(byte offset, line number, bytes) of each non-blank line read from `f`, which stands at
    byte `offset`, the start of line number `line`. Lines end at b"\\n" only."""
    for raw in iter_lines(iter(lambda: f.read(BLOCK), b"")):
        if raw.strip():
            yield offset, line, raw
        offset, line = offset + len(raw) + 1, line + 1


def _json_row(line: str, where: str) -> dict:
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return {"error": f"{where}: malformed JSON"}
    return row if isinstance(row, dict) else {"error": f"{where}: expected a JSON object"}


def count_rows(uri: str) -> int:
    total = 0
    for fs, path in input_files(uri):
        if path.endswith(".parquet"):
            with fs.open_input_file(path) as f:
                total += pq.ParquetFile(f).metadata.num_rows
        else:
            with fs.open_input_stream(path) as f:
                total += sum(1 for _ in jsonl_lines(f))
    return total


def request_of(row: dict, index: int) -> dict:
    """An input row (batch columns, or the task-row contract) -> what a replica answers."""
    rid = row.get("id", row.get("sample_id"))
    req = {"id": str(index if rid is None else rid), "question": row.get("question"),
           "document": row.get("document", row.get("context")), "doc_id": row.get("doc_id"),
           "uri": row.get("uri"), "error": row.get("error")}
    if req["error"]:
        return req
    if not isinstance(req["question"], str) or not req["question"].strip():
        req["error"] = "question: missing or empty"
    elif sum(req[k] is not None for k in ("document", "doc_id", "uri")) != 1:
        req["error"] = "row: give exactly one of document (or context), doc_id, uri"
    return req


def iter_shards(rows: Iterator[dict], shard_rows: int) -> Iterator[tuple[int, list[dict]]]:
    shard: list[dict] = []
    index = 0
    for row in rows:
        shard.append(request_of(row, index))
        index += 1
        if len(shard) == shard_rows:
            yield index // shard_rows - 1, shard
            shard = []
    if shard:
        yield (index - 1) // shard_rows, shard


def shard_name(k: int) -> str:
    return f"part-{k:06d}.parquet"


def finished_shards(output: str) -> dict[int, str]:
    fs, path = resolve(output)
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    return {int(m.group(1)): i.path for i in infos if (m := SHARD.match(i.base_name))}


def write_shard(output: str, k: int, rows: list[OutputRow]) -> None:
    fs, path = resolve(output)
    fs.create_dir(path, recursive=True)
    names = OUTPUT_SCHEMA.names
    table = pa.Table.from_pylist([{n: getattr(r, n) for n in names} for r in rows], schema=OUTPUT_SCHEMA)
    with written(fs, f"{path}/{shard_name(k)}") as target:
        pq.write_table(table, target, filesystem=fs)


SUMMED = ("tokens", "chunks_read", "chunks_unread", "memory_updates", "malformed")  # ShardCounts' column sums


@dataclasses.dataclass(frozen=True)
class ShardCounts:
    """What a job counts of a finished shard: its rows, error rows, document tokens read, and the
    sums of the gates' columns (schema.GATE_FIELDS; an unknown chunks_unread counts 0)."""

    rows: int = 0
    errors: int = 0
    tokens: int = 0
    chunks_read: int = 0
    chunks_unread: int = 0
    memory_updates: int = 0
    malformed: int = 0

    @classmethod
    def of_rows(cls, rows: list[OutputRow]) -> ShardCounts:
        return cls(len(rows), sum(r.error is not None for r in rows),
                   **{k: sum(getattr(r, k) or 0 for r in rows) for k in SUMMED})

    @classmethod
    def from_record(cls, rec: dict) -> ShardCounts:
        """From a record holding these fields among others (a Ray Dataset row: datarunner.py)."""
        return cls(**{f.name: int(rec[f.name]) for f in dataclasses.fields(cls)})


def shard_counts(fs: pafs.FileSystem, path: str) -> ShardCounts:
    """A finished shard's counts, from its small columns; a shard written before a column was
    added (a resumed job's older shards) counts 0 for it."""
    with fs.open_input_file(path) as f:
        shard = pq.ParquetFile(f)
        present = set(shard.schema_arrow.names)
        table = shard.read(columns=["error", *(c for c in SUMMED if c in present)])
    sums = {c: int(pc.sum(table[c]).as_py() or 0) for c in SUMMED if c in present}
    return ShardCounts(table.num_rows, table.num_rows - table["error"].null_count, **sums)

