"""The `memagent` command. Each subcommand lives in its package's `command.py`, which provides
`add_arguments(parser)` (returning its leaf sub-parsers, if it has nested ones) and
`run(cfg, args)`, and keeps heavy imports inside `run`; a package with two commands (ingest:
ingest and data; serve: serve and batch) holds one class per command there, named
`module:Class` below.

Config: --config PRESET|FILE (a packaged preset's name such as rl-smollm2, or a YAML file; default
the local preset) plus dotted overrides as trailing
arguments, e.g. `memagent ask --doc d.txt --question q agent.chunk_size=1024`.

SIGTERM stops a command as Ctrl-C does, and a local Ray it started is shut down with it
(pipelines/runtime.py); the exit status is then 128 + the signal's number.

Library logs (vLLM, Ray, transformers, their tqdm bars and warnings) go to a file under the
home, named once on stderr; `--verbose` or MEMAGENT_LOG=debug shows them (pipelines/logs.py).
Errors print as one line; an unexpected one also leaves its traceback in that file.
SIGUSR1 writes every thread's stack to stderr, so to that log file unless --verbose (what a
command that seems hung is waiting on).
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import os
import signal
import sys

from pipelines import __version__, logs, runtime
from pipelines.errors import UserError

# name -> (module or module:Class, help). Adding a command is one line here plus its command.py.
COMMANDS: dict[str, tuple[str, str]] = {
    "quickstart": ("pipelines.quickstart.command", "the whole product: ingest, evaluate, train, register, serve"),
    "ask": ("pipelines.ask.command", "answer a question over one document (local path or s3://)"),
    "model": ("pipelines.models.command", "model store and registry (import built-ins, register a version)"),
    "serve": ("pipelines.serve.command:Serve", "serve the agent over HTTP (Ray Serve): answers, batch jobs, OpenAI chat"),
    "batch": ("pipelines.serve.command:Batch", "run a batch QA job (on a running server, or start one here)"),
    "eval": ("pipelines.eval.command", "accuracy against document length: memory agent vs baselines"),
    "ingest": ("pipelines.ingest.command:Ingest", "stream a corpus (local or s3://) into the chunk store"),
    "data": ("pipelines.ingest.command:Data", "build task datasets (data build), import your own QA rows (data import)"),
    "rollout": ("pipelines.rollout.command", "run rollout groups over task rows, write trajectories to parquet"),
    "config": ("pipelines.cluster.command", "check a config without starting anything (keys, resources, window), or show it"),
    "train": ("pipelines.learn.command", "train the agent: SFT warm start (--sft) or Multi-Conv DAPO with rollout workers"),
    "plan": ("pipelines.plan.command", "what a run costs before it starts: tokens, seconds, steps/hour, accelerator-hours"),
}


VERBOSE = "show library logs (vLLM, Ray, transformers) here instead of in a log file under the home"


def add_overrides(p: argparse.ArgumentParser) -> None:
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE)


def command(target: str):
    """'module' or 'module:Class': what provides the command's add_arguments and run."""
    module, _, name = target.partition(":")
    found = importlib.import_module(module)
    return getattr(found, name) if name else found


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="memagent", description="Train and serve MemAgent memory agents on Ray.")
    p.add_argument("--config", help="a preset's name (rl-smollm2, ...) or a YAML file (default: the local preset)")
    p.add_argument("--version", action="version", version=f"memagent {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help=VERBOSE)
    sub = p.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in COMMANDS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        for leaf in command(module).add_arguments(sp) or [sp]:
            add_overrides(leaf)
    return p


def dispatch(args: argparse.Namespace) -> None:
    from pipelines.config import load_config, writable_home

    cfg = load_config(args.config, args.overrides)
    logs.route(writable_home(cfg.home_path), args.verbose)
    if cfg.s3.endpoint_url:
        os.environ["AWS_ENDPOINT_URL"] = cfg.s3.endpoint_url
    command(COMMANDS[args.command][0]).run(cfg, args)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True)
    try:
        with runtime.guard():
            dispatch(args)
    except UserError as e:
        error(str(e))
        return 2
    except KeyboardInterrupt as e:
        signum = getattr(e, "signum", signal.SIGINT)
        stopped = "memagent: interrupted" if signum == signal.SIGINT else f"memagent: stopped ({e})"
        print(stopped, file=logs.console())
        return 128 + signum
    except Exception as e:
        if logs.log_path() is None:
            raise
        logs.log_exception(e)
        error(f"{e.__class__.__name__}: {(str(e).strip().splitlines() or [''])[-1]} (traceback in {logs.log_path()})")
        return 1
    finally:
        logs.restore()
    return 0


def error(message: str) -> None:
    from pipelines.track.redact import env_secrets, redact

    print(f"memagent: error: {redact(message, env_secrets())}", file=logs.console())


def entry() -> None:
    """The console script: main(), and if a Ray shutdown it waited on never returned, the exit
    does not wait on it again (Ray's own atexit shutdown would)."""
    code = main()
    if runtime.stuck:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
