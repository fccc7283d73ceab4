"""`memagent model`: import a built-in model into the store, or register a folder in MLflow.

    memagent model import smollm2
    memagent model register --model smollm2 --name memagent-smollm2 --metrics out/summary.json --alias champion
"""

from __future__ import annotations

from pipelines.models.registry import read_metrics_file, register_model
from pipelines.models.resolve import resolve_model
from pipelines.models.store import BUILTINS


def add_arguments(p) -> list:
    sub = p.add_subparsers(dest="model_command", required=True)
    imp = sub.add_parser("import", help="import a built-in model into the store")
    imp.add_argument("name", choices=sorted(BUILTINS))
    reg = sub.add_parser("register", help="log a model folder and register it as a new version in MLflow")
    reg.add_argument("--model", required=True, help="model reference (store name, folder, s3://)")
    reg.add_argument("--name", required=True, help="registered model name")
    reg.add_argument("--metrics", help="JSON of eval metrics to attach (e.g. an eval's summary.json)")
    reg.add_argument("--alias", help="alias to point at the new version, e.g. champion")
    return [imp, reg]


def run(cfg, args) -> None:
    if args.model_command == "register":
        run_register(cfg, args)
        return
    print(f"imported {args.name} -> {BUILTINS[args.name](cfg.home_path)}")


def run_register(cfg, args) -> str:
    folder = resolve_model(args.model, cfg.home_path)
    metrics = read_metrics_file(args.metrics) if args.metrics else None
    ref = register_model(folder, args.name, cfg.home_path, cfg.track, metrics, args.alias,
                         tags={"model": args.model})
    print(f"registered {args.model} -> {ref}" + (f" (alias {args.alias})" if args.alias else ""))
    return ref
