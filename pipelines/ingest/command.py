"""The ingest stage's commands: `memagent ingest` streams a corpus into the chunk store
(resumable, idempotent); `memagent data` builds offline long-context task datasets (build) or
imports your own QA rows (import), both leaving task rows and their documents in the store.

    memagent ingest --source s3://corpus/raw --store s3://corpus/store ingest.chunk_size=1024
    memagent ingest --source 'data/*.jsonl.gz' --store .memagent/store ingest.text_field=body
    memagent data build --task niah_single --lengths 8K,32K --n 16 --seed 0 --out s3://b/tasks/niah
    memagent data build --task hotpotqa --split eval --lengths 8K --n 128 --out .memagent/tasks/hqa
    memagent data build --task squad --split train --lengths 2K --n 256 --out .memagent/tasks/squad
    memagent data import --input my_qa.jsonl --out .memagent/tasks/mine.parquet

`ingest` shows objects done (with documents and chunks) on stderr as they commit, prints a
summary, and exits non-zero only when nothing could be ingested. `data import` rows: question,
answers, and one of document / document_uri / doc_id (pipelines/ingest/user_data.py); bad rows
go to <out>.quarantine.jsonl.
"""

from __future__ import annotations

import json
import time

from pipelines.errors import UserError


class Ingest:
    """`memagent ingest`."""

    @staticmethod
    def add_arguments(p) -> None:
        p.add_argument("--source", required=True, help="s3://bucket/prefix, a local folder, file or glob")
        p.add_argument("--store", help="chunk store URI (default: data.store)")
        p.add_argument("--json", action="store_true", help="print the summary as one JSON object")

    @staticmethod
    def run(cfg, args) -> None:
        from dataclasses import asdict

        from pipelines.ingest.pipeline import ingest
        from pipelines.progress import Progress
        from pipelines.track import metrics as m
        from pipelines.track.tracker import command_run, create_tracker

        store = args.store or cfg.data.store
        tracker = create_tracker(cfg)
        with (command_run(tracker, cfg, "ingest", tags={"source": args.source, "store": store}),
              Progress("ingest", unit="object") as bar):
            start = time.perf_counter()
            summary = ingest(args.source, store, cfg.ingest, cfg.model.path, cfg.home_path,
                             lambda s, n: bar.set(s.objects, n, documents=s.documents, chunks=s.chunks))
            seconds = max(time.perf_counter() - start, 1e-9)
            tracker.log_metrics({m.INGEST_DOCUMENTS: summary.documents, m.INGEST_CHUNKS: summary.chunks,
                                 m.INGEST_TOKENS: summary.tokens, m.INGEST_QUARANTINED: summary.quarantined,
                                 m.INGEST_TOKENS_PER_S: summary.tokens / seconds})
        for example in summary.examples:
            print(example)
        print(json.dumps(asdict(summary)) if args.json else summary.line())
        if summary.objects and summary.documents == 0 and summary.already == 0:
            raise UserError(f"source '{args.source}': nothing could be ingested "
                            f"({summary.quarantined} inputs quarantined; see the store's manifest)")
        if not summary.objects and not summary.already:
            raise UserError(f"source '{args.source}': no objects match {list(cfg.ingest.patterns)}")


class Data:
    """`memagent data build|import`."""

    @staticmethod
    def add_arguments(p) -> list:
        from pipelines.ingest.builders import TASKS

        sub = p.add_subparsers(dest="data_command", required=True)
        b = sub.add_parser("build", help="build a task dataset")
        b.add_argument("--task", required=True, choices=sorted(TASKS))
        b.add_argument("--lengths", required=True, help="document lengths in tokens, e.g. 8K,32K (K = 1024)")
        b.add_argument("--n", type=int, required=True, help="rows per length")
        b.add_argument("--seed", type=int, default=0)
        b.add_argument("--split", default="eval", choices=["train", "eval"])
        b.add_argument("--out", required=True, help="task rows: a .parquet file or a folder, local or s3://")
        b.add_argument("--store", help="chunk store for the documents (default: data.store)")
        b.add_argument("--haystack", default="noise", choices=["noise", "essay"], help="RULER haystack")
        b.add_argument("--values", default="numbers", choices=["numbers", "uuids"], help="RULER needle values")
        i = sub.add_parser("import", help="import your own QA rows (jsonl or parquet) as task rows")
        i.add_argument("--input", required=True, help="a .jsonl(.gz) or .parquet file of QA rows, local or s3://")
        i.add_argument("--out", required=True, help="task rows: a .parquet file or a folder, local or s3://")
        i.add_argument("--store", help="chunk store for the documents (default: data.store)")
        i.add_argument("--task", default="import", help="task name written in every row")
        i.add_argument("--split", default="train", choices=["train", "eval"], help="split of rows that name none")
        return [b, i]

    @staticmethod
    def run(cfg, args) -> None:
        if args.data_command == "import":
            from pipelines.ingest.user_data import ImportRequest, import_rows

            req = ImportRequest(input=args.input, out=args.out, store=args.store or cfg.data.store,
                                task=args.task, split=args.split)
            summary = import_rows(req, cfg)
            for example in summary.examples:
                print(example)
            print(summary.line(req))
            return
        from pipelines.ingest.builders.build import BuildRequest

        req = BuildRequest(task=args.task, lengths=args.lengths, n=args.n, seed=args.seed, split=args.split,
                           out=args.out, store=args.store or cfg.data.store, haystack=args.haystack,
                           values=args.values)
        print(build_with_progress(req, cfg).line())


def build_with_progress(req, cfg):
    """`data build` with a progress display: documents generated, then objects ingested."""
    from pipelines.ingest.builders.build import build
    from pipelines.ingest.builders.common import parse_lengths
    from pipelines.progress import Progress

    total = req.n * len(parse_lengths(req.lengths))
    with Progress(f"data build {req.task}", total=total, unit="doc") as docs, \
            Progress("ingest", unit="object") as objects:
        return build(req, cfg, lambda: docs.update(1),
                     lambda s, n: objects.set(s.objects, n, documents=s.documents, chunks=s.chunks))
