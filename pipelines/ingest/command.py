"""`memagent ingest`: stream a corpus into the chunk store (resumable, idempotent).

    memagent ingest --source s3://corpus/raw --store s3://corpus/store ingest.chunk_size=1024
    memagent ingest --source 'data/*.jsonl.gz' --store .memagent/store ingest.text_field=body

Shows objects done (with documents and chunks) on stderr as they commit; prints a summary;
exits non-zero only when nothing could be ingested.
"""

from __future__ import annotations

import json
import time

from pipelines.errors import UserError


def add_arguments(p) -> None:
    p.add_argument("--source", required=True, help="s3://bucket/prefix, a local folder, file or glob")
    p.add_argument("--store", help="chunk store URI (default: data.store)")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")


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
