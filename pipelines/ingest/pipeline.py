"""The ingest driver: list the source, run the per-object pipeline, commit as objects finish.

Exactly-once: a source object's chunks become visible only when the manifest commit that
names its file is written; files of a killed run are orphans, deleted by the next run,
which redoes only the objects not committed. A changed object (new size/mtime) gets a new
file; its old file leaves the live view in the same commit and is then deleted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from pipelines import runtime
from pipelines.ingest.config import IngestConfig
from pipelines.data.manifest import REFUSED, Manifest, ManifestView, ObjectEntry, Quarantine, list_parquet
from pipelines.ingest.sources import SourceObject, list_sources
from pipelines.data.store import chunk_path, index_path
from pipelines.ingest.worker import ObjectIngester, ObjectResult
from pipelines.storage import absolute_uri, resolve


@dataclass
class IngestSummary:
    objects: int = 0
    already: int = 0
    not_matching: int = 0
    documents: int = 0
    chunks: int = 0
    tokens: int = 0
    quarantined: int = 0
    refused_objects: int = 0
    examples: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (f"ingested {self.objects} objects ({self.already} already in the store, {self.not_matching} "
                f"not matching the patterns): {self.documents} documents, {self.chunks} chunks, "
                f"{self.tokens} tokens; quarantined {self.quarantined} ({self.refused_objects} whole objects)")


class Committer:
    """Batches finished objects into manifest commits; refuses duplicate doc ids across objects."""

    def __init__(self, manifest: Manifest, view: ManifestView, fs, root: str, every_s: float):
        self.manifest, self.view, self.fs, self.root, self.every_s = manifest, view, fs, root, every_s
        self.hidden = view.hidden()
        self.owner: dict[str, str] = {}  # doc_id -> source key: one entry per stored document
        for e in view.objects.values():
            self._claim(e)
        self.entries: list[ObjectEntry] = []
        self.quarantine: list[Quarantine] = []
        self.replaced: list[str] = []
        self.last = time.monotonic()

    def _doc_ids(self, file: str) -> list[str]:
        return pq.read_table(index_path(self.root, file), filesystem=self.fs, columns=["doc_id"]).column(0).to_pylist()

    def _claim(self, e: ObjectEntry, doc_ids: list[str] | None = None) -> list[str]:
        if e.status != "done" or not e.file:
            return []
        dups = []
        for d in doc_ids if doc_ids is not None else self._doc_ids(e.file):
            if (d, e.file) in self.hidden:
                continue
            if self.owner.setdefault(d, e.key) != e.key:
                dups.append(d)
        return dups

    def add(self, r: ObjectResult, summary: IngestSummary) -> None:
        old = self.view.objects.get(r.entry.key)
        if old and old.file:
            self.replaced.append(old.file)
            for d in self._doc_ids(old.file):
                if self.owner.get(d) == old.key:
                    del self.owner[d]
        for d in self._claim(r.entry, r.doc_ids):
            r.quarantine.append(Quarantine(r.entry.key, f"duplicate doc_id '{d}' (kept the copy from "
                                           f"'{self.owner[d]}')", None, r.entry.version, d, r.entry.file))
        self.view.objects[r.entry.key] = r.entry
        self.entries.append(r.entry)
        self.quarantine.extend(r.quarantine)
        _count(summary, r)
        if time.monotonic() - self.last >= self.every_s:
            self.flush()

    def flush(self) -> None:
        self.manifest.commit(self.entries, self.quarantine)
        for file in self.replaced:
            _delete_files(self.fs, self.root, [file])
        self.entries, self.quarantine, self.replaced = [], [], []
        self.last = time.monotonic()


def _count(s: IngestSummary, r: ObjectResult) -> None:
    s.objects += 1
    dup = sum(1 for q in r.quarantine if q.doc_id)
    s.documents += r.entry.docs - dup
    s.chunks += r.entry.chunks
    s.tokens += r.entry.tokens
    s.quarantined += len(r.quarantine)
    s.refused_objects += r.entry.status == REFUSED
    for q in r.quarantine[: max(0, 8 - len(s.examples))]:
        s.examples.append(f"quarantined {q.source}{f' line {q.line}' if q.line else ''}: {q.reason}")


def _delete_files(fs, root: str, files: list[str]) -> None:
    for file in files:
        for path in (chunk_path(root, file), index_path(root, file)):
            try:
                fs.delete_file(path)
            except (FileNotFoundError, OSError):
                pass


def remove_orphans(fs, root: str, view: ManifestView) -> int:
    """Delete chunk/index files no commit names (left by a killed run). Single writer only."""
    live = set(view.live_files())
    orphans = set()
    for folder in ("chunks", "index"):
        for path in list_parquet(fs, f"{root}/{folder}"):
            name = path.rsplit("/", 1)[-1][: -len(".parquet")]
            if name not in live:
                orphans.add(name)
    _delete_files(fs, root, sorted(orphans))
    return len(orphans)


def run_local(pending: list[SourceObject], store: str, cfg: IngestConfig, model_ref: str,
              home: Path) -> Iterator[ObjectResult]:
    worker = ObjectIngester(store, cfg, model_ref=model_ref, home=str(home))
    for obj in pending:
        yield worker.ingest(obj)


def run_ray(pending: list[SourceObject], store: str, cfg: IngestConfig, model_ref: str,
            home: Path) -> Iterator[ObjectResult]:
    """list -> [read, decode, tokenize (one tokenizer per actor), slice, write] -> results."""
    import ray

    logging.getLogger("ray.data").setLevel(logging.WARNING)
    with runtime.session(log_to_driver=False, importable=False, configure_logging=False):
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        workers = min(cfg.workers or cpus, len(pending))
        ds = ray.data.from_items([asdict(o) for o in pending], override_num_blocks=len(pending))
        # One tokenizer thread per actor: the actors are the parallelism.
        env = runtime.worker_env(TOKENIZERS_PARALLELISM="false")
        ds = ds.map_batches(ObjectIngester, batch_size=1, compute=ray.data.ActorPoolStrategy(size=workers),
                            num_cpus=min(1.0, cpus / workers), runtime_env={"env_vars": env},
                            fn_constructor_kwargs=dict(store_uri=store, cfg=cfg, model_ref=model_ref, home=str(home)))
        for row in ds.iter_rows():
            yield ObjectResult.from_row(row)


def ingest(source: str, store: str, cfg: IngestConfig, model_ref: str, home: Path,
           on_object: Callable[[IngestSummary, int], None] | None = None) -> IngestSummary:
    """Ingest every object of `source` not yet in `store` at its current version.
    on_object(summary, n_pending) runs after each object is counted (progress displays)."""
    objects, not_matching = list_sources(source, cfg.patterns)
    store = absolute_uri(store)  # actors have another cwd
    fs, root = resolve(store)
    manifest = Manifest(fs, root)
    view = manifest.load()
    remove_orphans(fs, root, view)
    pending = [o for o in objects if (e := view.objects.get(o.uri)) is None or e.version != o.version]
    summary = IngestSummary(already=len(objects) - len(pending), not_matching=len(not_matching))
    summary.examples += [f"skipped {uri}: no pattern of ingest.patterns matches" for uri in not_matching[:3]]
    if pending:
        from pipelines.models import absolute_ref, resolve_model

        resolve_model(model_ref, home)  # fails here in one line; imported / fetched once on this node
        model_ref = absolute_ref(model_ref)  # each actor resolves it in its own node's home
        run = run_ray if cfg.runner == "ray" else run_local
        committer = Committer(manifest, view, fs, root, cfg.commit_every_s)
        try:
            for result in run(pending, store, cfg, model_ref, home):
                committer.add(result, summary)
                if on_object is not None:
                    on_object(summary, len(pending))
        finally:
            committer.flush()
        manifest.compact()
    return summary
