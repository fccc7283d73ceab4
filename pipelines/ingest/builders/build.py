"""`data build`: generate samples, put their documents in the store through the ingest path,
then write task rows that point at them (doc_tokens as stored).

Documents are staged as JSON lines under `<store>/sources/<task>/...` (one object per
length), then ingested like any corpus: same tokenizer, same chunking, same manifest.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pipelines.errors import UserError
from pipelines.ingest.builders.common import Sample, check_length, parse_lengths
from pipelines.ingest.pipeline import IngestSummary, ingest
from pipelines.data.store import ChunkStore
from pipelines.data.tasks import TaskRow, write_task_rows
from pipelines.storage import resolve


@dataclass(frozen=True)
class BuildRequest:
    task: str
    lengths: str
    n: int
    out: str
    store: str
    seed: int = 0
    split: str = "eval"
    haystack: str = "noise"
    values: str = "numbers"


@dataclass
class BuildSummary:
    rows: int
    out: str
    store: str
    ingest: IngestSummary

    def line(self) -> str:
        return f"wrote {self.rows} task rows to {self.out}; documents in {self.store}: {self.ingest.line()}"


def sample_stream(req: BuildRequest, target: int, count) -> Iterator[tuple[str, Sample]]:
    from pipelines.ingest.builders import TASKS

    if req.task not in TASKS:
        raise UserError(f"task '{req.task}': unknown (known: {', '.join(TASKS)})")
    if req.task == "hotpotqa":
        from pipelines.ingest.builders.hotpotqa import HotpotQA

        yield from HotpotQA(count).samples(req.split, target, req.n, req.seed)
    elif req.task in ("squad", "squad_synth"):
        from pipelines.ingest.builders.squad import Squad, SquadSynth

        builder = Squad if req.task == "squad" else SquadSynth
        yield from builder(count).samples(req.split, target, req.n, req.seed)
    else:
        from pipelines.ingest.builders.ruler import Ruler, ruler_samples

        yield from ruler_samples(Ruler(count, req.haystack, req.values), req.task, req.split, target, req.n, req.seed)


def inline_rows(req: BuildRequest, target: int, count) -> Iterator[TaskRow]:
    """Rows with their documents inline, built lazily and written nowhere (splits built on the fly)."""
    for name, s in sample_stream(req, target, count):
        yield TaskRow(f"{tag(req)}/{req.split}/{target}/s{req.seed}/{name}", s.question, list(s.answers),
                      s.answer_kind, None, s.text, s.tokens, req.task, req.split, s.evidence)


def tag(req: BuildRequest) -> str:
    from pipelines.ingest.builders.ruler import variant

    if req.task in ("hotpotqa", "squad", "squad_synth"):
        return req.task
    return f"{req.task}/{variant(req.task, req.haystack, req.values)}"


def stage_documents(req: BuildRequest, target: int, count) -> Iterator[dict]:
    """Write one length's documents as JSON lines under the store; yield row stubs."""
    fs, root = resolve(req.store)
    path = f"{root}/sources/{tag(req)}/{req.split}/s{req.seed}/{target}.jsonl"
    if not req.store.startswith("s3://"):
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(path, compression=None) as out:
        for name, s in sample_stream(req, target, count):
            doc_id = f"{tag(req)}/{req.split}/{target}/s{req.seed}/{name}"
            check_length(s.text, target, count, f"{req.task} sample '{doc_id}'")
            out.write((json.dumps({"id": doc_id, "text": s.text}) + "\n").encode())
            yield {"sample_id": doc_id, "question": s.question, "answers": s.answers, "answer_kind": s.answer_kind,
                   "doc_id": doc_id, "task": req.task, "split": req.split, "evidence": s.evidence}


def build(req: BuildRequest, cfg, on_doc: Callable[[], None] | None = None,
          on_object: Callable[[IngestSummary, int], None] | None = None) -> BuildSummary:
    """on_doc(): after each document is generated; on_object: the ingest's (progress displays)."""
    from pipelines.data.tokenizer import load_backend

    if req.n <= 0:
        raise UserError(f"--n {req.n}: must be positive")
    lengths = parse_lengths(req.lengths)
    backend, _ = load_backend(cfg.model.path, cfg.home_path)
    count = lambda text: len(backend.encode(text, add_special_tokens=False).ids)  # noqa: E731
    stubs = []
    for stub in (stub for target in lengths for stub in stage_documents(req, target, count)):
        stubs.append(stub)
        if on_doc is not None:
            on_doc()
    fs, root = resolve(req.store)
    source = f"{'s3://' if req.store.startswith('s3://') else ''}{root}/sources/{tag(req)}/{req.split}/s{req.seed}"
    icfg = cfg.ingest.model_copy(update={"text_field": "text", "id_field": "id", "patterns": ("*.jsonl",)})
    summary = ingest(source, req.store, icfg, cfg.model.path, cfg.home_path, on_object)
    store = ChunkStore(req.store)
    missing = [s["doc_id"] for s in stubs if not store.has(s["doc_id"])]
    if missing:
        raise UserError(f"store '{req.store}': {len(missing)} built documents missing after ingest, e.g. '{missing[0]}'")
    rows = (TaskRow(**s, context=None, doc_tokens=store.info(s["doc_id"]).n_tokens) for s in stubs)
    return BuildSummary(write_task_rows(rows, req.out), req.out, req.store, summary)
