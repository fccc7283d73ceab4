"""The store's commit log: which source objects are in the store, and what was refused.

Every commit is one small parquet file `manifest/<commit-id>.parquet` written in a single
PUT (or a local rename), so a commit is all-or-nothing. The live view is the latest entry
per source key; chunk files not named by a live entry are orphans of a killed run and are
invisible to readers (and deleted by the next ingest). Rows of kind "quarantine" are valid
while their object's live version is the one they were recorded for.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass, field

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pipelines.storage import written

SCHEMA = pa.schema([
    ("kind", pa.string()), ("key", pa.string()), ("version", pa.string()), ("size", pa.int64()),
    ("status", pa.string()), ("docs", pa.int64()), ("chunks", pa.int64()), ("tokens", pa.int64()),
    ("file", pa.string()), ("line", pa.int64()), ("doc_id", pa.string()), ("reason", pa.string()),
])
DONE, REFUSED = "done", "quarantined"


@dataclass(frozen=True)
class ObjectEntry:
    """One ingested source object. status: done (file holds its chunks) or quarantined."""
    key: str
    version: str
    size: int
    status: str
    docs: int = 0
    chunks: int = 0
    tokens: int = 0
    file: str | None = None


@dataclass(frozen=True)
class Quarantine:
    """An input refused, and why. line: 1-based line/row in the object, if any."""
    source: str
    reason: str
    line: int | None = None
    version: str = ""
    doc_id: str | None = None
    file: str | None = None


@dataclass
class ManifestView:
    objects: dict[str, ObjectEntry] = field(default_factory=dict)
    quarantine: list[Quarantine] = field(default_factory=list)

    def live_files(self) -> list[str]:
        return [e.file for e in self.objects.values() if e.status == DONE and e.file]

    def hidden(self) -> set[tuple[str, str]]:
        """(doc_id, file) pairs refused after they were written (duplicate ids)."""
        return {(q.doc_id, q.file) for q in self.quarantine if q.doc_id and q.file}


def write_atomic(fs: pafs.FileSystem, path: str, table: pa.Table, **kwargs) -> None:
    """A parquet table that appears at `path` whole (storage.written)."""
    with written(fs, path) as target:
        pq.write_table(table, target, filesystem=fs, **kwargs)


def list_parquet(fs: pafs.FileSystem, folder: str) -> list[str]:
    sel = pafs.FileSelector(folder, recursive=False, allow_not_found=True)
    return sorted(i.path for i in fs.get_file_info(sel)
                  if i.type == pafs.FileType.File and i.path.endswith(".parquet"))


def _object_row(e: ObjectEntry) -> dict:
    return {**asdict(e), "kind": "object", "line": None, "doc_id": None, "reason": None}


def _quarantine_row(q: Quarantine) -> dict:
    return {"kind": "quarantine", "key": q.source, "version": q.version, "size": None, "status": None,
            "docs": None, "chunks": None, "tokens": None, "file": q.file, "line": q.line,
            "doc_id": q.doc_id, "reason": q.reason}


class Manifest:
    def __init__(self, fs: pafs.FileSystem, root: str):
        self.fs, self.folder = fs, f"{root}/manifest"
        self.run = uuid.uuid4().hex[:8]
        self.seq = 0

    def commit(self, objects: list[ObjectEntry], quarantine: list[Quarantine]) -> str | None:
        rows = [_object_row(e) for e in objects] + [_quarantine_row(q) for q in quarantine]
        if not rows:
            return None
        self.seq += 1
        name = f"{time.time_ns():020d}-{self.run}-{self.seq:06d}.parquet"
        write_atomic(self.fs, f"{self.folder}/{name}", pa.Table.from_pylist(rows, schema=SCHEMA))
        return name

    def files(self) -> list[str]:
        return list_parquet(self.fs, self.folder)

    def load(self) -> ManifestView:
        view, quarantine = ManifestView(), []
        for path in self.files():
            for row in pq.read_table(path, filesystem=self.fs, schema=SCHEMA).to_pylist():
                kind = row.pop("kind")
                if kind == "object":
                    view.objects[row["key"]] = ObjectEntry(**{k: row[k] for k in ObjectEntry.__dataclass_fields__})
                else:
                    quarantine.append(Quarantine(row["key"], row["reason"], row["line"], row["version"],
                                                 row["doc_id"], row["file"]))
        live = {k: e.version for k, e in view.objects.items()}
        view.quarantine = [q for q in quarantine if live.get(q.source, q.version) == q.version]
        return view

    def compact(self) -> None:
        """Fold all commit files into one; readers see the same view before and after."""
        old = self.files()
        if len(old) < 2:
            return
        view = self.load()
        self.commit(list(view.objects.values()), view.quarantine)
        for path in old:
            self.fs.delete_file(path)
