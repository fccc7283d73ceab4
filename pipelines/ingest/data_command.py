"""`memagent data`: offline long-context task datasets (build), or your own QA rows (import);
both leave task rows, and their documents in the chunk store.

    memagent data build --task niah_single --lengths 8K,32K --n 16 --seed 0 --out s3://b/tasks/niah
    memagent data build --task hotpotqa --split eval --lengths 8K --n 128 --out .memagent/tasks/hqa
    memagent data build --task squad --split train --lengths 2K --n 256 --out .memagent/tasks/squad
    memagent data import --input my_qa.jsonl --out .memagent/tasks/mine.parquet

`data import` rows: question, answers, and one of document / document_uri / doc_id
(pipelines/ingest/user_data.py); bad rows go to <out>.quarantine.jsonl.
"""

from __future__ import annotations


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
