"""The `memagent` command. Each subcommand parses its flags and calls one stage's main().

Config: --config FILE (default configs/local.yaml) plus dotted overrides as trailing
arguments, e.g. `memagent ask --doc d.txt --question q agent.chunk_size=1024`.
"""

from __future__ import annotations

import argparse
import os
import sys

from pipelines.errors import UserError


def _quiet_libraries() -> None:
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="memagent", description=__doc__.splitlines()[0])
    p.add_argument("--config", help="YAML config (default: configs/local.yaml)")
    sub = p.add_subparsers(dest="command", required=True)

    ask = sub.add_parser("ask", help="answer a question over one document (local path or s3://)")
    ask.add_argument("--doc", required=True)
    ask.add_argument("--question", required=True)
    ask.add_argument("--json", action="store_true", help="print one JSON object")
    ask.add_argument("--show-memory", action="store_true", help="print the memory after every chunk")

    model = sub.add_parser("model", help="the local model store")
    model_sub = model.add_subparsers(dest="model_command", required=True)
    imp = model_sub.add_parser("import", help="import a built-in model into the store")
    imp.add_argument("name", choices=["smollm2"])

    quick = sub.add_parser("quickstart", help="import the model, answer over a generated long document")
    quick.add_argument("--tokens", type=int, default=16000, help="document length in tokens")

    for sp in (ask, imp, quick):
        sp.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    return p


def dispatch(args: argparse.Namespace) -> None:
    from pipelines.config import load_config

    cfg = load_config(args.config, args.overrides)
    if args.command == "ask":
        from pipelines.ask import AskRequest, main as ask_main

        ask_main(cfg, AskRequest(args.doc, args.question, args.json, args.show_memory))
    elif args.command == "model":
        from pipelines.models import BUILTINS

        print(f"imported {args.name} -> {BUILTINS[args.name](cfg.home_path)}")
    elif args.command == "quickstart":
        from pipelines.quickstart import main as quick_main

        quick_main(cfg, args.tokens)


def main(argv: list[str] | None = None) -> int:
    _quiet_libraries()
    args = build_parser().parse_args(argv)
    try:
        dispatch(args)
    except UserError as e:
        print(f"memagent: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("memagent: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
