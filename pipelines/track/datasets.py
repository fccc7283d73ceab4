"""Task rows, chunk stores and batch inputs as MLflow datasets: the inputs of the runs that read them.

A dataset's digest comes from its file listing (paths, sizes, modification times), its row
count and schema from parquet footers: a corpus is never read whole to be described. The
context (`training`, `held-out`, `batch-input`) says what the run used it for.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import pyarrow as pa

TRAINING, HELD_OUT, BATCH_INPUT = "training", "held-out", "batch-input"
MAX_FOOTERS = 2000  # beyond this many parquet files the row count is left out (a listing stays cheap)
DIGEST_CHARS = 12
_TYPES = {"string": "string", "large_string": "string", "int32": "integer", "int64": "long", "float": "float",
          "double": "double", "bool": "boolean", "binary": "binary"}


@dataclass(frozen=True)
class DatasetRef:
    uri: str
    context: str  # TRAINING, HELD_OUT or BATCH_INPUT
    kind: str = "tasks"  # tasks (parquet rows), store (a chunk store: its chunks are the rows), input


def refs(context: str, tasks: str | None = None, store: str | None = None) -> list[DatasetRef]:
    """The task rows and chunk store a stage read, those it names."""
    return [*([DatasetRef(tasks, context)] if tasks else []), *([DatasetRef(store, context, "store")] if store else [])]


@dataclass(frozen=True)
class Listed:
    """What a dataset's files say without reading them: name, digest, rows, schema."""

    name: str
    digest: str
    rows: int | None
    files: int
    bytes: int
    schema: pa.Schema | None


def listing_digest(entries: list[tuple[str, int, int]]) -> str:
    """Digest of (relative path, size, mtime in ns) entries, order-free."""
    h = hashlib.sha256()
    for path, size, mtime in sorted(entries):
        h.update(f"{path}\0{size}\0{mtime}\n".encode())
    return h.hexdigest()[:DIGEST_CHARS]


def dataset_name(uri: str) -> str:
    """The last two parts of the URI (`tasks/eval`, `quickstart/store`)."""
    return "/".join(uri.rstrip("/").split("/")[-2:])


def colspec(schema: pa.Schema | None) -> str | None:
    """An arrow schema as MLflow's column spec JSON (what the Datasets view shows)."""
    if schema is None:
        return None
    cols = [{"name": f.name, "type": _TYPES.get(str(f.type), str(f.type))} for f in schema]
    return json.dumps({"mlflow_colspec": cols})


def describe(ref: DatasetRef) -> Listed | None:
    """List the dataset's files; footers of its row files give rows and schema. None: no such dataset."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    from pipelines.storage import resolve

    fs, root = resolve(ref.uri)
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.NotFound:
        return None
    if info.type == pafs.FileType.File:
        files, base = [info], root.rsplit("/", 1)[0]
    else:
        files = [f for f in fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
                 if f.type == pafs.FileType.File]
        base = root
    entries = [(f.path.removeprefix(base), f.size or 0, f.mtime_ns or 0) for f in files]
    rows_of = [f.path for f in files if f.path.endswith(".parquet")
               and (ref.kind != "store" or "/chunks/" in f.path.removeprefix(base))]
    rows, schema = None, None  # JSONL inputs: not read for a count
    if rows_of and len(rows_of) <= MAX_FOOTERS:
        rows = 0
        for path in sorted(rows_of):
            meta = pq.ParquetFile(path, filesystem=fs).metadata
            rows += meta.num_rows
            schema = schema or meta.schema.to_arrow_schema()
    return Listed(dataset_name(ref.uri), listing_digest(entries), rows, len(files),
                  sum(e[1] for e in entries), schema)


def dataset_input(ref: DatasetRef):
    """The MLflow DatasetInput of a dataset (a listing of it, taken now); None if it does not exist."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    listed = describe(ref)
    if listed is None:
        return None
    profile = {"files": listed.files, "bytes": listed.bytes, **({"num_rows": listed.rows} if listed.rows is not None
                                                                else {})}
    dataset = Dataset(name=listed.name, digest=listed.digest, source_type="s3" if ref.uri.startswith("s3://")
                      else "local", source=json.dumps({"uri": ref.uri}), schema=colspec(listed.schema),
                      profile=json.dumps(profile))
    tags = [InputTag("mlflow.data.context", ref.context), InputTag("memagent.kind", ref.kind)]
    return DatasetInput(dataset, tags)
