"""`memagent data build`: offline long-context task datasets (rows + documents in the store).

    memagent data build --task niah_single --lengths 8K,32K --n 16 --seed 0 --out s3://b/tasks/niah
    memagent data build --task hotpotqa --split eval --lengths 8K --n 128 --out .memagent/tasks/hqa
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
    b.add_argument("--store", help="chunk store for the documents (default: ingest.store)")
    b.add_argument("--haystack", default="noise", choices=["noise", "essay"], help="RULER haystack")
    b.add_argument("--values", default="numbers", choices=["numbers", "uuids"], help="RULER needle values")
    return [b]


def run(cfg, args) -> None:
    from pipelines.ingest.builders.build import BuildRequest, build

    req = BuildRequest(task=args.task, lengths=args.lengths, n=args.n, seed=args.seed, split=args.split,
                       out=args.out, store=args.store or cfg.ingest.store, haystack=args.haystack,
                       values=args.values)
    print(build(req, cfg).line())
