"""Gated memory's speed and accuracy (issue #36): the same recipe trained with the gates
(`agent.gates=true agent.template=gated`: an empty reply keeps a chunk that adds nothing, [EXIT] once the memory
answers) and without, from the same rows, then both scored on the same held-out rows at 4x and
16x the training length by the memory agent on the same engine (learning.py's EVAL: vLLM,
max_model_len 4096, greedy, 32 documents in flight).

Built on benchmarks/learning.py: its training stages (`memagent train`, resumed from checkpoints,
`done.json` once finished), its resumable eval cells (each cell's model.json names the weights it
scored) and its paired strict differences. Stages: sft (both arms), rl (optional: RL of each arm
from its own SFT weights; the gated arm pays --turn-cost per chunk read), eval, batch (the latest
stage's two models through `memagent batch --runner data` on the --batch-tasks' rows at the
longest length: the same documents-per-hour ratio by the batch path, issue: within 10% of eval's).
A killed run resumes where it stopped; commit the results folder as cells land.

    .venv/bin/python benchmarks/gates.py                                   # SFT + RL, n=128, 3 tasks
    .venv/bin/python benchmarks/gates.py --stages sft,eval --tasks niah_single --eval-tasks niah_single \\
        --n 32 --sft-minutes 17 --train-set learn.sft_batch=8 --work .memagent/bench/gates-pilot \\
        --results benchmarks/results/gates-pilot                          # the committed pilot
    .venv/bin/python benchmarks/gates.py --quick                           # the plumbing, tiny sizes

Figures per cell (memory agent, rows that ran); each model and length is its own `memagent eval`, its
tasks' rows streamed one task after another (eval.concurrency in flight, the rest queued), so a
task's rows share the engine only with the next task's first rows at the boundary:
- documents per hour, a throughput: n over the cell's span, from its first row's start to its last
  row's end (the records' `finished` less `seconds`: engine start and row building left out). It
  reads as a throughput only when n is well above eval.concurrency (32), a steady queue: --n 128
  and up (the pilot's n = 32 put every row in flight at once and measured a latency instead). Its
  tail is the engine idling: once the queue is empty the last documents run with few others, and a
  gated document that never exits reads all 64 chunks at 16x from the first second to the last;
- steady documents per hour, the throughput of a job that never runs dry (batch QA over millions):
  turns finished while every slot was busy (until the last row's start), over that time, per the
  cell's mean turns per document, from every row's turn times (eval.traces = n). The issue's
  "engine time per document"; the ratio of it is `steady_ratio`;
- seconds per document: the mean of the records' `seconds` (a latency, beside it);
- generated tokens per document: the engine's count over every turn (the records' `generated`);
- chunks read (and the document's chunks), memory updates, the share of documents that exited;
- the strict score with its 95% interval, and gated - ungated paired over the same rows.
Cells recorded before the records kept `generated` and `finished` are refused (score them again).

The last line is one JSON object: {"stage": the latest trained stage scored, "docs_per_hour_ratio":
{task: {length: gated / ungated}}, "steady_ratio": the same of steady documents per hour, "tokens_ratio": {task: {length: ungated / gated}},
"paired_diff": {task: {length: [mean, lo, hi, n]}} (strict, points, gated - ungated), "batch":
{task: {length: {"docs_per_hour": {model: ...}, "ratio": gated / ungated, "vs_eval": ratio / eval's}}}, "cells":
{model: {task: {length: figures}}}, "by_stage": the three ratios of every stage scored, "models",
"train_minutes"}.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.common import finish  # noqa: E402
from benchmarks.learning import EVAL, SUITES, Cells, evaluate, pairs, points, sh, table_of, train  # noqa: E402

ARMS = {"ungated": [], "gated": ["agent.gates=true", "agent.template=gated"]}
MULTIPLES = (4, 16)  # of the training length (the suite's 1x), where the targets are read
# --quick: one SFT step of a few short traces, two rows at 2x: every stage's plumbing (two engine starts).
QUICK = {"train": ["learn.task_n=8", "learn.sft_batch=4", "learn.sft.checkpoint_every=1"], "n": 2, "multiples": (2,)}


def model_name(stage: str, arm: str) -> str:
    return stage if arm == "ungated" else f"{stage}-gated"


def lengths_of(one: str, multiples: tuple[int, ...]) -> list[str]:
    """The eval lengths: MULTIPLES of the training length ONE (e.g. 1K -> 4K, 16K)."""
    from pipelines.eval.stats import parse_length

    return [f"{parse_length(one) * k // 1024}K" for k in multiples]


def train_arms(stage: str, work: Path, tasks: str, steps: int, minutes: float | None, extra: list[str],
               start: dict[str, str] | None = None, gated: tuple[str, ...] = ()) -> dict[str, dict]:
    """Both arms of one training stage, from the same rows (learn.task and its seed); RL starts each arm
    from its own SFT weights (START); GATED: the gated arm's own overrides (learn.turn_cost).
    Returns {model name: run}."""
    suite, options = SUITES["needles"], ("--max-minutes", str(minutes)) if minutes else ()
    runs = {}
    for arm, gates in ARMS.items():
        begin = [f"model.path={start[model_name('sft', arm)]}"] if start else []
        own = list(gated) if arm == "gated" else []
        runs[model_name(stage, arm)] = train(stage, suite, work, tasks, steps, [*begin, *gates, *own, *extra],
                                             model_name(stage, arm), options)
    return runs


def plan(stages: list[str], lengths: list[str], n: int) -> list[Cells]:
    """One `memagent eval` per model and length: a record's seconds are its length's own only when the
    engine holds no rows of another length (one eval over 4K and 16K runs them side by side). Lengths
    in the order given; which arm runs first alternates from one length to the next (the machine's
    pace drifts over an hour: results/gates/README.md), the gated arm first at the first."""
    arms = ("gated", "ungated")
    return [Cells(model_name(s, arm), "memagent", length, n) for i, length in enumerate(lengths) for s in stages
            for arm in (arms if i % 2 == 0 else arms[::-1])]


def score_cells(cells: Cells, model: str, results: Path, tasks: str) -> Path:
    """One cell through learning.evaluate, with the arm's gates; the load average before and after it
    is written beside."""
    arm = "gated" if cells.model.endswith("-gated") else "ungated"
    folder = results / cells.name
    fresh = not (folder / "summary.json").exists()
    before = os.getloadavg()
    # Every row keeps its turns' times (eval.traces = n), for the steady-state documents per hour.
    agent = [*SUITES["needles"].agent, *ARMS[arm], f"eval.traces={cells.n}"]
    evaluate(cells, model, results, tasks, agent)
    if fresh:
        (folder / "load.json").write_text(json.dumps({"before": before, "after": os.getloadavg(),
                                                      "cpus": os.cpu_count()}))
    return folder


def span_hours(recs: list[dict]) -> float:
    """From the first row's start to the last row's end, in hours."""
    return (max(r["finished"] for r in recs) - min(r["finished"] - r["seconds"] for r in recs)) / 3600


def steady_docs_per_hour(recs: list[dict]) -> float | None:
    """Documents per hour while every slot was busy: until the last row's start the queue refilled
    each freed slot, so over [first start, T] the engine held eval.concurrency documents. Turns
    finished by T (a row's start plus its turns' seconds), over T, per the cell's mean turns per
    document. None when a row has no turn times (cells scored before eval.traces covered every row)."""
    if not recs or any(not r["steps"] for r in recs):
        return None
    t0 = min(r["finished"] - r["seconds"] for r in recs)
    starts = [r["finished"] - r["seconds"] - t0 for r in recs]
    until = max(starts)
    done = sum(start + end <= until for start, r in zip(starts, recs)
               for end in itertools.accumulate(t["seconds"] for t in r["steps"]))
    turns = sum(len(r["steps"]) for r in recs) / len(recs)
    return round(done / until * 3600 / turns, 1) if until > 0 else None


def figures(folder: Path, task: str, length: str) -> dict:
    """One memory-agent cell's speed and gate figures (rows that ran), its strict score beside."""
    from pipelines.eval.results import cell_uri, read_cell

    recs = [r for r in read_cell(cell_uri(str(folder), task, length, "memagent")) if r["error"] is None]
    if any(r.get("finished") is None or r.get("generated") is None for r in recs):
        sys.exit(f"gates: {folder} {task} {length}: rows recorded before records kept 'finished' and 'generated'; "
                 "delete the folder to score it again")
    n = len(recs)
    stamp = json.loads((folder / "model.json").read_text())
    return {"n": n, "strict": points(table_of(folder)[task][length]["memagent"]),
            "docs_per_hour": round(n / span_hours(recs), 1), "steady_docs_per_hour": steady_docs_per_hour(recs),
            "seconds_per_doc": round(sum(r["seconds"] for r in recs) / n, 2),
            "tokens_per_doc": round(sum(r["generated"] for r in recs) / n, 1),
            "chunks_read": round(sum(r["chunks_read"] for r in recs) / n, 2),
            "chunks": round(sum(r["chunks_read"] + r["chunks_unread"] for r in recs) / n, 2),
            "memory_updates": round(sum(r["memory_updates"] for r in recs) / n, 2),
            "exited": round(sum(r["exit_chunk"] is not None for r in recs) / n, 3),
            "malformed": sum(r["malformed"] for r in recs), "eval_minutes": stamp.get("minutes")}


# The batch path's settings beside learning.EVAL's engine: one actor, as many rows in flight as the
# eval's 32 (shards of 16, four in flight, so the queue stays full), the job holding every slot.
BATCH = [*EVAL[:3], "serve.replicas=1", "serve.max_ongoing_requests=32", "serve.shard_rows=16",
         "serve.shards_in_flight=4", "serve.job_share=1.0"]


def batch_input(path: Path, task: str, length: str, n: int, model: str) -> Path:
    """The eval cell's rows (the same builder, seed and tokenizer as `memagent eval`) as batch input."""
    from transformers import AutoTokenizer

    from pipelines.eval.rows import built_rows
    from pipelines.eval.stats import parse_length

    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = built_rows(task, parse_length(length), n, 0, AutoTokenizer.from_pretrained(model))
        with open(f"{path}.part", "w") as f:
            for r in rows:
                f.write(json.dumps({"id": r.sample_id, "question": r.question, "document": r.context}) + "\n")
        os.replace(f"{path}.part", path)
    return path


def batch_docs_per_hour(name: str, model: str, task: str, length: str, n: int, work: Path) -> float:
    """One model's documents per hour through `memagent batch --runner data` (resumable: the job's own
    folder): the job's rate, over the time its shards were answered (engine start left out)."""
    folder = work / "batch" / f"{name}-{task}-{length}-n{n}"
    rows = batch_input(folder / "input.jsonl", task, length, n, model)
    arm = "gated" if name.endswith("-gated") else "ungated"
    sh([sys.executable, "-m", "pipelines.cli", "batch", "--runner", "data", "--input", str(rows), "--output",
        str(folder / "output"), f"model.path={model}", *SUITES["needles"].agent, *ARMS[arm], *BATCH],
       stage=f"batch-{folder.name}")
    state = json.loads((folder / "output" / "_job.json").read_text())
    return round(state["run_done"] / max(state["run_seconds"], 1e-9) * 3600, 1)


def batch_figures(stage: str, models: dict, tasks: list[str], length: str, n: int, work: Path, eval_ratio: dict) -> dict:
    """Both arms of STAGE through the batch path at LENGTH: documents per hour, their ratio, and that
    ratio over eval's (the issue: within 10%)."""
    out: dict = {}
    for task in tasks:
        rates = {m: batch_docs_per_hour(m, models[m], task, length, n, work)
                 for m in (model_name(stage, "gated"), model_name(stage, "ungated"))}
        ratio = round(rates[model_name(stage, "gated")] / rates[stage], 2)
        ev = eval_ratio.get(task, {}).get(length)
        out.setdefault(task, {})[length] = {"docs_per_hour": rates, "ratio": ratio,
                                            "vs_eval": round(ratio / ev, 2) if ev else None}
    return out


def compare(cells: dict, by: dict, stage: str, tasks: list[str], lengths: list[str]) -> dict:
    """One stage's ratios (gated over ungated) and the paired strict difference, where both arms scored."""
    ratios: dict = {"docs_per_hour_ratio": {}, "steady_ratio": {}, "tokens_ratio": {}}
    gated, ungated = cells.get(model_name(stage, "gated"), {}), cells.get(stage, {})
    for task in tasks:
        for length in lengths:
            g, u = gated.get(task, {}).get(length), ungated.get(task, {}).get(length)
            if g and u:
                ratios["docs_per_hour_ratio"].setdefault(task, {})[length] = round(g["docs_per_hour"] / u["docs_per_hour"], 2)
                ratios["tokens_ratio"].setdefault(task, {})[length] = round(u["tokens_per_doc"] / g["tokens_per_doc"], 2)
                if g.get("steady_docs_per_hour") and u.get("steady_docs_per_hour"):
                    ratios["steady_ratio"].setdefault(task, {})[length] = round(
                        g["steady_docs_per_hour"] / u["steady_docs_per_hour"], 2)
    return {**ratios, "paired_diff": pairs(by, tasks, stage, model_name(stage, "gated"), tuple(lengths))}


def table(cells: dict, lengths: list[str]) -> str:
    rows = ["| model | task | length | n | strict [95%] | docs/hour | steady docs/hour | s/doc | tokens/doc | "
            "chunks read / of | updates | exited | eval min |", "|" + "---|" * 13]
    for model, by_task in cells.items():
        for task, by_length in by_task.items():
            for ln in (x for x in lengths if x in by_length):
                f = by_length[ln]
                m, lo, hi, _ = f["strict"]
                rows.append(f"| {model} | {task} | {ln} | {f['n']} | {m} [{lo}, {hi}] | {f['docs_per_hour']} | "
                            f"{f.get('steady_docs_per_hour')} | {f['seconds_per_doc']} | {f['tokens_per_doc']} | {f['chunks_read']} / {f['chunks']} | "
                            f"{f['memory_updates']} | {f['exited']} | {f['eval_minutes']} |")
    return "\n".join(rows) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes: one SFT step, 2 rows at 2x")
    p.add_argument("--stages", help="sft, rl, eval, batch (default all four; --quick: sft,eval,batch)")
    p.add_argument("--tasks", default="niah_single,niah_multikey", help="training tasks")
    p.add_argument("--eval-tasks", default="niah_single,niah_multikey,squad", help="held-out tasks scored")
    p.add_argument("--n", type=int, help="rows a cell (default 128: four times eval.concurrency, a steady queue)")
    p.add_argument("--multiples", help=f"of the training length (default {','.join(map(str, MULTIPLES))})")
    p.add_argument("--sft-steps", type=int, help="default: the suite's (30)")
    p.add_argument("--rl-steps", type=int, help="default: the suite's (40)")
    p.add_argument("--sft-minutes", type=float, help="each SFT arm stops at the first step after this many minutes")
    p.add_argument("--rl-minutes", type=float, help="the same for RL")
    p.add_argument("--train-set", action="append", default=[], metavar="KEY=VALUE",
                   help="an override for both arms' training (repeatable), e.g. learn.sft_batch=8")
    p.add_argument("--turn-cost", type=float, default=0.0, help="the gated arm's learn.turn_cost in RL")
    p.add_argument("--batch-tasks", default="niah_single", help="tasks the batch stage runs (at the longest length)")
    p.add_argument("--work", default=str(REPO / ".memagent" / "bench" / "gates"))
    p.add_argument("--results", default=str(REPO / "benchmarks" / "results" / "gates"))
    args = p.parse_args()
    suite, stages = SUITES["needles"], set((args.stages or ("sft,eval,batch" if args.quick else "sft,rl,eval,batch")).split(","))
    n = args.n or (QUICK["n"] if args.quick else 128)
    multiples = tuple(int(k) for k in args.multiples.split(",")) if args.multiples else (
        QUICK["multiples"] if args.quick else MULTIPLES)
    lengths, small = lengths_of(suite.lengths[0], multiples), [*(QUICK["train"] if args.quick else []), *args.train_set]
    work, results = Path(args.work), Path(args.results)
    work.mkdir(parents=True, exist_ok=True)
    runs: dict[str, dict] = {}
    if "sft" in stages or all((work / model_name("sft", a) / "done.json").exists() for a in ARMS):
        runs |= train_arms("sft", work, args.tasks, args.sft_steps or (1 if args.quick else suite.steps[0]),
                           args.sft_minutes, small)
    if "rl" in stages or all((work / model_name("rl", a) / "done.json").exists() for a in ARMS):
        runs |= train_arms("rl", work, args.tasks, args.rl_steps or (1 if args.quick else suite.steps[1]), args.rl_minutes,
                           small, {k: r["model"] for k, r in runs.items()}, (f"learn.turn_cost={args.turn_cost}",))
    models = {k: r["model"] for k, r in runs.items()}
    trained = [s for s in ("sft", "rl") if s in models]
    done: dict = {}
    for c in plan(trained, lengths, n):
        if "eval" in stages:
            done[c] = score_cells(c, models[c.model], results, args.eval_tasks)
        elif (results / c.name / "summary.json").exists():
            done[c] = results / c.name
    cells: dict = {}
    for c, folder in done.items():
        for task, by_length in table_of(folder).items():
            for length in by_length:
                cells.setdefault(c.model, {}).setdefault(task, {})[length] = figures(folder, task, length)
    by = {(c.model, c.method, length): f for c, f in done.items() for length in c.length.split(",")}
    tasks = args.eval_tasks.split(",")
    by_stage = {s: compare(cells, by, s, tasks, lengths) for s in trained}
    if "batch" in stages and trained:
        by_stage[trained[-1]]["batch"] = batch_figures(trained[-1], models, args.batch_tasks.split(","), lengths[-1], n,
                                                       work, by_stage[trained[-1]]["docs_per_hour_ratio"])
    summary = {"stage": trained[-1] if trained else None, **(by_stage[trained[-1]] if trained else {}), "cells": cells,
               "by_stage": by_stage, "models": models, "train_minutes": {k: r.get("minutes") for k, r in runs.items()},
               "train_steps": {k: r.get("steps") for k, r in runs.items()},
               "load": {c.model: json.loads((f / "load.json").read_text()) for c, f in done.items() if (f / "load.json").exists()}}
    results.mkdir(parents=True, exist_ok=True)
    (results / "summary.json").write_text(json.dumps(summary, indent=1))
    (results / "table.md").write_text(table(cells, lengths))
    finish(summary)


if __name__ == "__main__":
    main()
