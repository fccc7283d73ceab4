"""The task row contract: question, gold answers (scored by answer kind: pipelines.agent.reward),
and a document reference.

A row names its document either by `doc_id` (in a chunk store) or carries it inline
(`context`). Rows are stored as parquet, locally or on s3://, and read back streamed.

Version 2 adds `evidence`: the document's pieces that answer the question, each with its
token offset in the document (tokens before it, in the tokenizer that built the document),
so programmatic memory traces hold at any chunk size. Files without the version in their
metadata are version 1 and read with `evidence=None` (not recorded), which eval and
rollout never need; `require_evidence` refuses such a row where it is needed (SFT).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, fields

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pipelines.agent.chunking import iter_chunks
from pipelines.agent.codec import ChatCodec
from pipelines.agent.reward import ANSWER_KINDS
from pipelines.errors import UserError
from pipelines.data.manifest import list_parquet
from pipelines.data.store import ChunkStore
from pipelines.data.tokenizer import same_vocab, tokenizer_id
from pipelines.storage import first_line, resolve, written

TASK_SCHEMA_VERSION = 2
VERSION_KEY = b"memagent.tasks.schema_version"
EVIDENCE_TYPE = pa.list_(pa.struct([("text", pa.string()), ("offset", pa.int64())]))
V1_COLUMNS = ("sample_id", "question", "answers", "answer_kind", "doc_id", "context", "doc_tokens", "task", "split")
SCHEMA = pa.schema([
    ("sample_id", pa.string()), ("question", pa.string()), ("answers", pa.list_(pa.string())),
    ("answer_kind", pa.string()), ("doc_id", pa.string()), ("context", pa.string()),
    ("doc_tokens", pa.int64()), ("task", pa.string()), ("split", pa.string()),
    ("evidence", EVIDENCE_TYPE),
], metadata={VERSION_KEY: str(TASK_SCHEMA_VERSION).encode()})
BATCH = 1024


@dataclass(frozen=True)
class Evidence:
    """One piece of the document that answers the question, verbatim."""

    text: str
    offset: int  # tokens of the document before the piece


@dataclass(frozen=True)
class TaskRow:
    sample_id: str
    question: str
    answers: list[str]
    answer_kind: str  # "one_of" | "all_of"
    doc_id: str | None
    context: str | None
    doc_tokens: int
    task: str
    split: str
    evidence: tuple[Evidence, ...] | None = None  # None: not recorded (version 1 rows, tasks without pieces)

    def __post_init__(self):
        if self.answer_kind not in ANSWER_KINDS:
            raise UserError(f"task row '{self.sample_id}': answer_kind '{self.answer_kind}' not one of {ANSWER_KINDS}")
        if (self.doc_id is None) == (self.context is None):
            raise UserError(f"task row '{self.sample_id}': needs exactly one of doc_id or context")
        if self.evidence is not None:
            object.__setattr__(self, "evidence", _evidence(self.sample_id, self.evidence))


def _evidence(sample_id: str, pieces) -> tuple[Evidence, ...]:
    """Pieces as Evidence (parquet gives dicts), in document order; bad ones refused."""
    out = [p if isinstance(p, Evidence) else Evidence(**p) for p in pieces]
    for p in out:
        if not isinstance(p.text, str) or not p.text or not isinstance(p.offset, int) or p.offset < 0:
            raise UserError(f"task row '{sample_id}': bad evidence piece "
                            f"(text {str(p.text)[:40]!r}, offset {p.offset})")
    return tuple(sorted(out, key=lambda p: p.offset))


def require_evidence(row: TaskRow) -> tuple[Evidence, ...]:
    """The row's evidence, or a one-line error naming the row where it was never recorded."""
    if row.evidence is None:
        raise UserError(f"task row '{row.sample_id}': no evidence recorded (rows from before task schema version "
                        f"{TASK_SCHEMA_VERSION}, or task '{row.task}' has none); rebuild with `memagent data build`")
    return row.evidence


def _flush(writer_ref: list, batch: list[dict], fs, path: str) -> None:
    if writer_ref[0] is None:
        writer_ref[0] = pq.ParquetWriter(path, SCHEMA, filesystem=fs)
    writer_ref[0].write_table(pa.Table.from_pylist(batch, schema=SCHEMA))


def _record(row: TaskRow) -> dict:
    rec = asdict(row)
    rec["evidence"] = None if row.evidence is None else [asdict(p) for p in row.evidence]
    return rec


def write_task_rows(rows: Iterable[TaskRow], uri: str) -> int:
    """Write rows to `uri` (a .parquet file, else a folder getting part-00000.parquet); streamed."""
    fs, path = resolve(uri)
    if not path.endswith(".parquet"):
        path = f"{path}/part-00000.parquet"
    writer, batch, n = [None], [], 0
    with written(fs, path) as target:
        try:
            for row in rows:
                batch.append(_record(row))
                n += 1
                if len(batch) >= BATCH:
                    _flush(writer, batch, fs, target)
                    batch = []
            if batch or writer[0] is None:
                _flush(writer, batch, fs, target)
        finally:
            if writer[0] is not None:
                writer[0].close()
    return n


def task_files(uri: str) -> list[str]:
    """The parquet files of task rows: the file itself, or a folder's / prefix's, sorted (as URIs)."""
    fs, path = resolve(uri)
    try:
        info = fs.get_file_info(path)
    except OSError as e:
        raise UserError(f"task rows '{uri}': cannot reach ({first_line(e)})") from None
    if info.type == pafs.FileType.NotFound:
        raise UserError(f"task rows '{uri}': no such file or folder")
    paths = [path] if info.type == pafs.FileType.File else list_parquet(fs, path)
    if not paths:
        raise UserError(f"task rows '{uri}': no parquet files")
    return [f"s3://{p}" if uri.startswith("s3://") else p for p in paths]


def read_task_rows(uri: str) -> Iterator[TaskRow]:
    """Rows of a parquet file or of every parquet file in a folder / prefix, streamed."""
    fs, _ = resolve(uri)
    for p in (resolve(f)[1] for f in task_files(uri)):
        try:
            pf = pq.ParquetFile(p, filesystem=fs)
            names = _columns(uri, pf.schema_arrow)
        except (OSError, pa.ArrowInvalid) as e:
            raise UserError(f"task rows '{uri}': not readable parquet ({first_line(e)})") from None
        for batch in pf.iter_batches(batch_size=BATCH, columns=names):
            for r in batch.to_pylist():
                yield TaskRow(**r)


def schema_version(schema: pa.Schema) -> int:
    raw = (schema.metadata or {}).get(VERSION_KEY)
    return int(raw) if raw else 1


def _columns(uri: str, schema: pa.Schema) -> list[str]:
    """The columns to read for this file's version; a newer version or a missing column is refused."""
    version = schema_version(schema)
    if version > TASK_SCHEMA_VERSION:
        raise UserError(f"task rows '{uri}': task schema version {version}, "
                        f"this code reads up to {TASK_SCHEMA_VERSION}")
    names = [f.name for f in fields(TaskRow)] if version >= 2 else list(V1_COLUMNS)
    missing = [n for n in names if n not in schema.names]
    if missing:
        raise UserError(f"task rows '{uri}': missing columns {missing}")
    return names


def task_chunks(row: TaskRow, store: ChunkStore | None, codec: ChatCodec, chunk_size: int) -> Iterator[list[int]]:
    """The row's document as token-id chunks of chunk_size, lazily, in the codec's tokenizer."""
    if row.doc_id is None:
        return iter_chunks([codec.encode(row.context or "")], chunk_size)
    if store is None:
        raise UserError(f"task row '{row.sample_id}': doc_id '{row.doc_id}' needs a chunk store")
    info = store.info(row.doc_id)
    mine = tokenizer_id(codec.tokenizer)
    if not same_vocab(info.tokenizer, mine):
        raise UserError(f"doc_id '{row.doc_id}': stored with tokenizer '{info.tokenizer}', "
                        f"the model's is '{mine}'; re-ingest with this model")
    return iter_chunks(store.iter_chunk_ids(row.doc_id), chunk_size)
