"""`data import`: a user's QA rows (jsonl or parquet, local or s3://) -> task rows + the chunk store.

    memagent data import --input s3://b/my_qa.jsonl --out s3://b/tasks/mine.parquet --store s3://b/store

A row: `question`; `answers` (a list, or one string); exactly one of `document` (the text),
`document_uri` (a UTF-8 text file, local or s3://; a relative path is taken from the input's
folder) or `doc_id` (a document already in the store). Optional: `id` (the sample id; default
`<file>#L<line>`, `#R<row>` for parquet), `answer_kind` (one_of | all_of), `split` (train |
eval; default --split). Other fields are ignored, and named in the summary.

A file that cannot be read as a whole (a bad JSON line, not parquet) is a one-line error naming
it and the line. A bad row is quarantined: one JSON line (source, line, sample_id, reason, as
in the ingest manifest's quarantine) in `<out>.quarantine.jsonl` beside the output.

Documents given inline or by URI get content ids (`import/<sha256>`): a document shared by
rows, or imported twice, is stored once. Those not yet in the store are staged as JSON lines
under `<store>/sources/import/` and ingested like any corpus; rows then take doc_tokens from
the store, and evidence (for the SFT warm start) from the sentences that hold a gold answer
(pipelines.ingest.answer_evidence).

Idempotent: a re-run over the same input stages nothing already in the store and rewrites
the output and its quarantine whole (written aside, then renamed), so no row is duplicated; a
killed run leaves the previous output, and its re-run redoes the rest. Streamed: jsonl lines
and parquet batches; rows wait for the ingest in a local temporary file, not in memory.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import posixpath
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO

from pipelines.errors import UserError
from pipelines.ingest.answer_evidence import answer_evidence
from pipelines.ingest.pipeline import IngestSummary, ingest
from pipelines.data.store import ChunkStore
from pipelines.data.tasks import TaskRow, write_task_rows
from pipelines.data.tokenizer import same_vocab
from pipelines.ingest.user_input import FIELDS, SPLITS, BadRow, input_rows, is_parquet, parse_row, sample_id
from pipelines.storage import BLOCK, aside, into_place, is_s3, resolve, written


@dataclass(frozen=True)
class ImportRequest:
    input: str
    out: str
    store: str
    task: str = "import"
    split: str = "train"


@dataclass
class ImportSummary:
    rows: int = 0
    staged: int = 0
    no_evidence: int = 0
    quarantined: int = 0
    quarantine: str = ""
    ignored: set[str] = field(default_factory=set)
    ingest: IngestSummary | None = None
    examples: list[str] = field(default_factory=list)

    def line(self, req: ImportRequest) -> str:
        parts = [f"imported {self.rows} task rows to {req.out}; {self.staged} new documents into {req.store}"
                 + (f" ({self.ingest.line()})" if self.ingest else "")]
        if self.no_evidence:
            parts.append(f"{self.no_evidence} rows with no sentence holding an answer (empty SFT evidence)")
        if self.ignored:
            parts.append(f"ignored fields: {', '.join(sorted(self.ignored))}")
        parts.append(f"quarantined {self.quarantined}" + (f" rows -> {self.quarantine}" if self.quarantined else ""))
        return "; ".join(parts)


class Quarantined:
    """Refused rows, one JSON line each, held in a local temporary file until published."""

    def __init__(self, source: str, file: IO[str]):
        self.source, self.file, self.count, self.examples = source, file, 0, []

    def add(self, line: int, sid: str, reason: str) -> None:
        rec = {"source": self.source, "line": line, "sample_id": sid, "reason": reason}
        self.file.write(json.dumps(rec) + "\n")
        self.count += 1
        if len(self.examples) < 8:
            self.examples.append(f"quarantined {self.source} line {line}: {reason}")

    def publish(self, uri: str) -> str:
        """The records at uri, whole (written aside and renamed, or one PUT); none: a stale file removed."""
        fs, path = resolve(uri)
        if not self.count:
            try:
                fs.delete_file(path)
            except OSError:
                pass
            return ""
        self.file.seek(0)
        with written(fs, path) as target, fs.open_output_stream(target, compression=None) as out:
            while block := self.file.read(BLOCK):
                out.write(block.encode())
        return uri


class Stager:
    """Documents not yet in the store, as JSON lines written aside, then renamed to a name made
    from their ids: another set of documents never replaces a staged file already ingested."""

    def __init__(self, store_uri: str):
        self.s3 = is_s3(store_uri)
        self.fs, root = resolve(store_uri)
        self.folder = f"{root}/sources/import"
        self.tmp = aside(f"{self.folder}/import.jsonl")
        self.out, self.ids, self.digest = None, set(), hashlib.sha256()

    def add(self, doc_id: str, text: str) -> None:
        if doc_id in self.ids:
            return
        if self.out is None:
            if not self.s3:
                self.fs.create_dir(self.folder, recursive=True)
            self.out = self.fs.open_output_stream(self.tmp, compression=None)
        self.out.write((json.dumps({"id": doc_id, "text": text}) + "\n").encode())
        self.ids.add(doc_id)
        self.digest.update(doc_id.encode() + b"\n")

    def close(self) -> str | None:
        """The staged file's URI, or None when nothing was new."""
        if self.out is None:
            return None
        self.out.close()
        final = f"{self.folder}/{self.digest.hexdigest()[:24]}.jsonl"
        into_place(self.tmp, final, self.fs)
        return f"s3://{final}" if self.s3 else final

    def abort(self) -> None:
        if self.out is not None:
            self.out.close()
            try:
                self.fs.delete_file(self.tmp)
            except OSError:
                pass


def quarantine_uri(out: str) -> str:
    """Beside the output, never inside a task folder (readers take every .parquet there)."""
    base = out.rstrip("/")
    return f"{base[:-len('.parquet')] if base.endswith('.parquet') else base}.quarantine.jsonl"


def read_input(req: ImportRequest, store: ChunkStore, stager: Stager, stubs: IO[str], quarantine: Quarantined,
               summary: ImportSummary) -> int:
    """Check every row, stage new documents, keep good rows' stubs; the number of rows read."""
    first: dict[str, int] = {}
    mark, name, n = "R" if is_parquet(req.input) else "L", posixpath.basename(req.input), 0
    for n, (line, rec) in enumerate(input_rows(req.input), 1):
        summary.ignored |= rec.keys() - set(FIELDS)
        sid = f"{name}#{mark}{line}"
        try:
            sid = sample_id(rec, sid)
            if sid in first:
                raise BadRow(f"duplicate id '{sid}' (first at line {first[sid]})")
            stub, text = parse_row(rec, line, sid, req.split, store, req.input)
        except BadRow as e:
            quarantine.add(line, sid, str(e))
            continue
        first[sid] = line
        if text is not None:
            stager.add(stub["doc_id"], text)
        stubs.write(json.dumps(stub) + "\n")
    return n


def task_rows(stubs: Iterable[dict], req: ImportRequest, store: ChunkStore, backend, mine: str,
              quarantine: Quarantined, summary: ImportSummary) -> Iterator[TaskRow]:
    """Rows with doc_tokens from the store and evidence from its text, streamed."""
    decode = lambda ids: backend.decode(ids, skip_special_tokens=False)  # noqa: E731
    for s in stubs:
        doc = s["doc_id"]
        if not store.has(doc):
            quarantine.add(s["line"], s["sample_id"], f"document '{doc}' not in the store after ingest "
                                                      "(refused: see the store's manifest)")
            continue
        info = store.info(doc)
        if not same_vocab(info.tokenizer, mine):
            quarantine.add(s["line"], s["sample_id"], f"doc_id '{doc}': stored with tokenizer "
                                                      f"'{info.tokenizer}', the model's is '{mine}'")
            continue
        evidence = answer_evidence(zip(store.iter_texts(doc), store.iter_chunk_ids(doc)), s["answers"], decode)
        summary.no_evidence += not evidence
        yield TaskRow(s["sample_id"], s["question"], s["answers"], s["answer_kind"], doc, None, info.n_tokens,
                      req.task, s["split"], evidence)


def stage_and_ingest(req: ImportRequest, cfg, store: ChunkStore, stubs: IO[str], quarantine: Quarantined,
                     summary: ImportSummary) -> None:
    stager = Stager(req.store)
    try:
        if not read_input(req, store, stager, stubs, quarantine, summary):
            raise UserError(f"input '{req.input}': no rows")
        staged = stager.close()
    except BaseException:
        stager.abort()
        raise
    summary.staged = len(stager.ids)
    if staged:
        icfg = cfg.ingest.model_copy(update={"text_field": "text", "id_field": "id", "patterns": ("*.jsonl",)})
        summary.ingest = ingest(staged, req.store, icfg, cfg.model.path, cfg.home_path)
        store.refresh()


def import_rows(req: ImportRequest, cfg) -> ImportSummary:
    """Stage and ingest the rows' documents, then write the task rows; bad rows quarantined."""
    from pipelines.data.tokenizer import load_backend

    if req.split not in SPLITS:
        raise UserError(f"--split '{req.split}': not one of {list(SPLITS)}")
    summary, store = ImportSummary(), ChunkStore(req.store)
    with tempfile.TemporaryFile("w+", encoding="utf-8") as stubs, \
            tempfile.TemporaryFile("w+", encoding="utf-8") as refused:
        quarantine = Quarantined(req.input, refused)
        stage_and_ingest(req, cfg, store, stubs, quarantine, summary)
        backend, mine = load_backend(cfg.model.path, cfg.home_path)
        stubs.seek(0)
        rows = task_rows((json.loads(line) for line in stubs), req, store, backend, mine, quarantine, summary)
        head = next(rows, None)
        if head is not None:
            summary.rows = write_task_rows(itertools.chain([head], rows), req.out)
        summary.quarantine = quarantine.publish(quarantine_uri(req.out))
    summary.quarantined, summary.examples = quarantine.count, quarantine.examples
    if summary.rows == 0:
        raise UserError(f"input '{req.input}': nothing could be imported ({summary.quarantined} rows "
                        f"quarantined; see {summary.quarantine})")
    return summary
