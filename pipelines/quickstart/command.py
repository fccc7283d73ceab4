"""`memagent quickstart`: the whole product on embedded defaults, in one resumable job.

    .venv/bin/memagent --config quickstart quickstart        # ~20 min on 2 cores

Builds train and held-out needle questions and ingests their documents into a chunk store,
scores the base model on the held-out questions, warm-starts it (SFT on memory traces),
scores it, trains it with Multi-Conv DAPO for a few minutes, scores it again on the same rows
(the strict score), and registers the better of the two in MLflow by continuous training's
gate (SFT + RL only when its paired gain's 95% interval clears learn.continuous.margin, else
the SFT model; @production if the name has no production version yet, else @candidate),
serves that version and answers held-out questions as a batch job through it. Interrupted and
re-run, it skips finished stages (HOME/quickstart/stages.json). The last line is one JSON
object: held-out strict scores before, after SFT and after RL, which model was kept and why.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable

from pipelines import logs
from pipelines.config import Config
from pipelines.quickstart import stages
from pipelines.quickstart.report import summary_lines
from pipelines.quickstart.stages import Run

# Each stage's run in MLflow: a child of the quickstart's run, named here (the data stage logs
# its datasets on the parent).
RUN_NAMES = {"data": None, "eval_before": "eval-base", "sft": "sft", "eval_sft": "eval-sft", "rl": "rl",
             "eval_after": "eval-rl", "register": "register", "serve": "serve"}

STAGES: list[tuple[str, str, Callable[[Run], dict]]] = [
    ("data", "build train and held-out questions, ingest their documents", stages.data),
    ("eval_before", "score the base model on the held-out questions",
     lambda r: stages.evaluate(r, "eval_before", None)),
    ("sft", "warm start: fine-tune on memory traces", lambda r: stages.train(r, "sft")),
    ("eval_sft", "score the SFT model", lambda r: stages.evaluate(r, "eval_sft", r.done["sft"]["model"])),
    ("rl", "train with Multi-Conv DAPO on the rollout workers", lambda r: stages.train(r, "rl")),
    ("eval_after", "score the trained model", lambda r: stages.evaluate(r, "eval_after", r.done["rl"]["model"])),
    ("register", "register the better of SFT and SFT + RL in MLflow", stages.register),
    ("serve", "serve the registered version, run a batch job through it", stages.serve),
]


# What a stage's result must hold now; one recorded by an older quickstart without it is run again
# (an evaluation reads its finished cells back, so only the register stage does work again).
NEEDS = {"eval_before": "strict", "eval_sft": "strict", "eval_after": "strict", "register": "kept"}


def finished(done: dict, name: str) -> bool:
    return name in done and NEEDS.get(name, "seconds") in done[name]


def main(cfg: Config, fresh: bool = False) -> dict:
    from pipelines.storage import remove_tree
    from pipelines.track.tracker import create_tracker, pipeline_run

    root = cfg.home_path.absolute() / "quickstart"
    if fresh:
        remove_tree(str(root))
    root.mkdir(parents=True, exist_ok=True)
    ledger = root / "stages.json"
    done = json.loads(ledger.read_text()) if ledger.exists() else {}
    data = cfg.data.model_copy(update={"store": str(root / "store")})
    run = Run(cfg.model_copy(update={"data": data}), root, done)
    started = time.perf_counter()
    tracker = create_tracker(run.cfg)
    try:
        with pipeline_run(tracker, run.cfg, "quickstart", tags={"quickstart_root": str(root)}):
            run.tracker = tracker
            run_stages(run, done, ledger)
    finally:
        run.pool.close()
    minutes = round((time.perf_counter() - started) / 60, 2)
    evals = {"before": "eval_before", "after_sft": "eval_sft", "after": "eval_after"}
    reg = done["register"]
    return {"score": "strict", **{k: done[v]["strict"] for k, v in evals.items()},
            "sub_em": {k: done[v]["sub_em"] for k, v in evals.items()}, "n": done["eval_after"]["n"],
            "kept": reg["kept"], "rl_gain": reg["rl_gain"], "why": reg["why"], "model": reg["model"],
            "alias": reg["alias"], "minutes": minutes, "stage_seconds": {k: v["seconds"] for k, v in done.items()}}


def run_stages(run: Run, done: dict, ledger) -> None:
    """The stages not finished yet, in order, each a child run of the quickstart's."""
    from pipelines.track.tracker import stage as tracked

    for i, (name, what, stage) in enumerate(STAGES, 1):
        if finished(done, name):
            print(f"[{i}/{len(STAGES)}] {name}: done earlier", file=logs.console())
            if name == "data":
                stages.log_data(run)
            continue
        print(f"[{i}/{len(STAGES)}] {name}: {what} ...", file=logs.console(), flush=True)
        t0 = time.perf_counter()
        with tracked(RUN_NAMES[name]) if RUN_NAMES[name] else contextlib.nullcontext():
            done[name] = {**stage(run), "seconds": round(time.perf_counter() - t0, 1)}
        ledger.write_text(json.dumps(done, indent=1))
        print(f"[{i}/{len(STAGES)}] {name}: done in {done[name]['seconds']:.0f} s", file=logs.console(), flush=True)
        if name == "data":
            stages.log_data(run)


def add_arguments(p) -> None:
    p.add_argument("--fresh", action="store_true", help="start over: remove HOME/quickstart first")


def run(cfg: Config, args) -> None:
    from pipelines.track.tracker import config_named

    named = contextlib.nullcontext()
    if args.config is None:  # its own recipe unless told otherwise
        from pipelines.config import load_config

        cfg = load_config("quickstart", args.overrides)
        named = config_named("quickstart")
    with named:
        out = main(cfg, args.fresh)
    ledger = json.loads((cfg.home_path.absolute() / "quickstart" / "stages.json").read_text())
    print("\n".join(summary_lines(cfg, ledger, out)))
    print(json.dumps(out))
