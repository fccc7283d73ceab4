"""`memagent eval`: accuracy against document length, the memory agent beside two baselines
(pipelines/eval/ladder.py: cells, resuming, the table, what MLflow gets).

    memagent eval --model smollm2 --tasks hotpotqa,niah_single --lengths 4K,8K,16K --n 64 \
        agent.chunk_size=1024 agent.memory_budget=64
"""

from __future__ import annotations

from pipelines.config import Config, validate
from pipelines.errors import UserError


def add_arguments(p) -> None:
    p.add_argument("--model", help="model reference (store name, folder, s3://, models:/NAME/VERSION)")
    p.add_argument("--tasks", help="comma-separated task names, e.g. hotpotqa,niah_single")
    p.add_argument("--lengths", help="comma-separated lengths, e.g. 8K,16K,32K")
    p.add_argument("--n", type=int, help="questions per task and length")
    p.add_argument("--seed", type=int)
    p.add_argument("--dataset", help="task rows (parquet file or folder, local or s3://)")
    p.add_argument("--store", help="chunk store for rows that reference documents by doc_id (default: data.store)")
    p.add_argument("--out", help="results folder (local or s3://); re-runs skip finished cells")
    p.add_argument("--methods", help="comma-separated: memagent,truncation,full")


def apply_args(cfg: Config, args) -> Config:
    tree = cfg.model_dump()
    if args.model:
        tree["model"]["path"] = args.model
    for key in ("tasks", "lengths", "methods"):
        if getattr(args, key):
            tree["eval"][key] = [x.strip() for x in getattr(args, key).split(",") if x.strip()]
    for key in ("n", "seed", "dataset", "out"):
        if getattr(args, key) is not None:
            tree["eval"][key] = getattr(args, key)
    if args.store is not None:
        tree["data"]["store"] = args.store
    return validate(tree, "command line")


def run(cfg: Config, args) -> None:
    if not cfg.eval.tasks and not args.tasks:
        raise UserError("eval: no tasks given (--tasks)")
    from pipelines.eval.ladder import main as ladder
    from pipelines.models import config_model_dir
    from pipelines.models.settings import with_model_settings

    cfg = apply_args(cfg, args)
    result = ladder(with_model_settings(cfg, config_model_dir(cfg), args.overrides))
    print(result["table"])
    print(f"results: {result['out']}")
