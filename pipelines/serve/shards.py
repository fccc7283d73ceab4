"""Where each shard of a batch job's input lies, so that a worker anywhere reads only its own rows.

    for shard in plan(input_uri, shard_rows=64):    # on the driver: one small record a shard
        rows = read(input_uri, shard)               # on a worker: that shard's requests

Shard k holds input rows [k*S, (k+1)*S) in the order jobs.iter_rows reads them, across files,
as the Serve runner numbers them (rows without an `id` are named by that index), so either
runner resumes the other's output. The plan takes one pass over the input: a parquet file's
row count is in its footer; a jsonl file is read once, noting the byte offset and line at
which each shard's first row starts, so a worker seeks there instead of reading from the top.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pipelines.errors import UserError
from pipelines.serve.jobs import file_rows, input_files, jsonl_lines, request_of
from pipelines.storage import first_line, resolve


@dataclass(frozen=True)
class Segment:
    """`rows` consecutive rows of one file from its row `row` (jsonl: at byte `offset`, line `line`)."""

    path: str  # within the input's filesystem, as jobs.input_files lists it
    row: int
    rows: int
    offset: int = 0
    line: int = 1


@dataclass(frozen=True)
class Shard:
    k: int
    start: int  # the job-wide index of its first row
    segments: tuple[Segment, ...]

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.segments)

    def record(self) -> dict:
        """As a row of a Ray Dataset (from_record inverts it)."""
        return {"k": self.k, "start": self.start, "segments": [asdict(s) for s in self.segments]}

    @classmethod
    def from_record(cls, rec: dict) -> Shard:
        return cls(rec["k"], rec["start"], tuple(Segment(**s) for s in rec["segments"]))


def plan(uri: str, shard_rows: int) -> Iterator[Shard]:
    """Every shard of the input, in order; a file that cannot be read is a one-line UserError."""
    k, segments, filled = 0, [], 0
    for fs, path in input_files(uri):
        for seg in _cut(path, _marks(fs, path), shard_rows - filled, shard_rows):
            segments.append(seg)
            filled += seg.rows
            if filled == shard_rows:
                yield Shard(k, k * shard_rows, tuple(segments))
                k, segments, filled = k + 1, [], 0
    if segments:
        yield Shard(k, k * shard_rows, tuple(segments))


def _cut(path: str, marks: Iterator[tuple[int, int]], first: int, size: int) -> Iterator[Segment]:
    """A file's rows (their (offset, line) marks) as segments: `first` rows that complete the
    shard in progress, then `size` each."""
    seg, n = None, -1
    for n, (offset, line) in enumerate(marks):
        if seg is None or (n >= first and (n - first) % size == 0):
            if seg is not None:
                yield replace(seg, rows=n - seg.row)
            seg = Segment(path, n, 0, offset, line)
    if seg is not None:
        yield replace(seg, rows=n + 1 - seg.row)


def _marks(fs: pafs.FileSystem, path: str) -> Iterator[tuple[int, int]]:
    """(byte offset, line number) of each row of a file; parquet rows need neither."""
    try:
        if path.endswith(".parquet"):
            with fs.open_input_file(path) as f:
                return itertools.repeat((0, 1), pq.ParquetFile(f).metadata.num_rows)
        return _jsonl_marks(fs, path)
    except (OSError, pa.ArrowException) as e:
        raise UserError(f"input '{path}': not a readable parquet file ({first_line(e)})") from None


def _jsonl_marks(fs: pafs.FileSystem, path: str) -> Iterator[tuple[int, int]]:
    try:
        with fs.open_input_stream(path) as f:
            for offset, line, _ in jsonl_lines(f):
                yield offset, line
    except OSError as e:
        raise UserError(f"input '{path}': unreadable ({first_line(e)})") from None


def read(uri: str, shard: Shard) -> list[dict]:
    """The shard's rows as requests (jobs.request_of), read from where the plan found them."""
    fs, _ = resolve(uri)
    rows = itertools.chain.from_iterable(
        itertools.islice(file_rows(fs, s.path, s.row, s.offset, s.line), s.rows) for s in shard.segments)
    requests = [request_of(r, shard.start + i) for i, r in enumerate(rows)]
    if len(requests) != shard.rows:
        raise UserError(f"input '{uri}': shard {shard.k} has {len(requests)} rows, not the {shard.rows} planned "
                        f"(did the input change during the job?)")
    return requests
