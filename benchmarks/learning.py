"""Learning evidence: held-out strict scores of the base model, after the SFT warm start, and after RL
from the SFT checkpoint, on documents as long as the training ones (1x) and 4x longer, with
the no-memory truncation baseline beside the longest, and the paired RL - SFT difference.

Every stage resumes: training runs checkpoint (`memagent train --resume`), evaluation cells
are the ladder's resumable cells under benchmarks/results/learning/ (commit them as they land),
so the benchmark can be stopped and re-run across sessions.

    .venv/bin/python benchmarks/learning.py                      # niah_single + niah_multikey
    .venv/bin/python benchmarks/learning.py --stages sft,eval    # some stages only
    .venv/bin/python benchmarks/learning.py --stages rl,eval --models rl --lengths 1K   # some cells only
    .venv/bin/python benchmarks/learning.py --quick              # n=16, short runs: the plumbing
    .venv/bin/python benchmarks/learning.py --suite hotpotqa     # HotpotQA at chunks of 512 (SUITES)
    .venv/bin/python benchmarks/learning.py --suite essay --rl-seeds 1   # the needles in essay text, 1x-16x
    .venv/bin/python benchmarks/learning.py --suite squad --stages sft,rl,seeds,eval   # SQuAD, 1x-16x, 3 RL seeds
    .venv/bin/python benchmarks/learning.py --stages eval --ladder rl   # a trained model at 1x..16x
    .venv/bin/python benchmarks/learning.py --stages sft,eval --models sft --work W --results R \
        --previous benchmarks/results/learning      # a changed SFT recipe, paired against the committed run

Needles: training documents are 2-4 chunks of 256 tokens (512-1024 tokens); 1x is 1K, 4x is 4K.
The cells that carry a target (SFT vs base at 1x, RL vs SFT and the memory agent vs truncation
at 4x) have n = --n (200); the others n = --n-other (64). HotpotQA (reported, not targeted):
documents of 4 chunks of 512 tokens (the question's 10 paragraphs and fillers), 1x 2K, 4x 8K,
n = 64 in every cell, its own presets, work and results subfolders. Rows are the ladder's
held-out split, the same questions for every model, so RL - SFT is a paired difference.
SQuAD (issue #35's targets, printed met / not met / pending): trained as the needles, held out
at 1x, 4x and 16x (1K, 4K, 16K), every 1x and 4x cell n = 200, 16x n = 64, the RL model's
truncation baseline at each length. A model is trained when its first cell comes up (plan), so
the cells land in the order they are worth, the other RL seeds last.

RL seeds (`--stages ...,seeds`, `--rl-seeds 3`): RL from the same SFT weights with learn.seed 1
and 2 beside RL's 0, each scored at 4x: "rl_seeds" holds each seed's paired RL - SFT and
"rl_seeds_spread" their range and standard deviation (the run-to-run spread any claim of RL's
effect must state).

Ablations (opt-in stages, `--stages sft,curriculum,eval`): RL from the same SFT weights with one
change to the preset (ABLATIONS: curriculum, rollout_mean, issue #35's tis and pass_filter, ground),
scored at 4x with n = --n (a suite with 16x: there too, n = --n-other) and paired against RL's
cells on the same rows. Cells already in the
results folder stand for a model this session did not train (each cell's model.json names the
weights it scored).
Scores: the strict score (pipelines.agent.reward: every gold item claimed and nothing else; SQuAD's
em for one-of rows) leads everywhere, in points with its 95% interval; the paper's lenient sub_em
stays beside it, labelled. `--rescore` scores the results folder's committed cells again from their
stored predictions (no model is run) and rewrites every summary, e.g. after the scorer changed:

    .venv/bin/python benchmarks/learning.py --rescore                     # benchmarks/results/learning
    .venv/bin/python benchmarks/learning.py --rescore --suite hotpotqa
    .venv/bin/python benchmarks/learning.py --rescore --results benchmarks/results/learning-cuts \
        --previous benchmarks/results/learning

The last line is one JSON object: {"score": "strict", "base", "sft", "rl": {task: {length: strict}},
"strict": {task: {length: {method: [mean, lo, hi, n]}}}, "f1" (QA tasks) and "sub_em (paper's,
lenient)": the same, "paired_rl_minus_sft": {task: {length: [mean, lo, hi, n]}} (strict),
"ablations": {name: {task: {"4K": [mean, lo, hi, n]}}} (the change minus RL), "ladder": {model:
{task: {length: {method: [mean, lo, hi, n]}}}}, "rl_seeds", "rl_seeds_spread", "targets" (squad),
"eval_minutes" (each cell's last invocation), "train_minutes"}; with --previous also
"paired_vs_previous": {model: {task: {length: [mean, lo, hi, n]}}} (this run minus that one).

The ladder (`--ladder MODEL`): one trained model at 1x, 2x, 4x, 8x and 16x the training length,
the memory agent and the truncation baseline, n = --n-other rows a cell, in one resumable
folder (MODEL/ladder-...) with its table and accuracy-against-length plot; the base model scores 0
in every cell measured (1x, 4x here; 4K-64K in benchmarks/eval_ladder.py), so it is not re-run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.common import finish  # noqa: E402
from benchmarks.learning_targets import Targets, judge, lines, spread  # noqa: E402
from pipelines.agent.reward import is_qa  # noqa: E402
from pipelines.eval.stats import paired_diff  # noqa: E402
from pipelines.learn.runs import INDEX  # noqa: E402


@dataclass(frozen=True)
class Suite:
    """One task family's recipe: presets (each choice explained there), the agent's sizes at
    evaluation (the presets'), the lengths, default n, and where its files go."""

    tasks: str
    presets: dict[str, str]
    agent: list[str]  # the agent's sizes and the rows' settings at evaluation
    lengths: tuple[str, ...]  # 1x (the training length), 4x[, 16x: every 1x and 4x cell then has n rows]
    n: tuple[int, int]  # (cells that carry a target, the others)
    steps: tuple[int, int]  # (SFT, RL)
    folder: str  # under the work and results folders ("" : at their top)
    targets: Targets | None = None  # printed met / not met when set
    quick: tuple[str, ...] = ()  # --quick's training overrides
    quick_n: tuple[int, int] = (16, 16)  # --quick's n
    train: tuple[str, ...] = ()  # every training's overrides of its preset


SUITES = {
    "needles": Suite("niah_single,niah_multikey", {"sft": "configs/sft-smollm2.yaml", "rl": "configs/rl-smollm2.yaml"},
                     ["agent.chunk_size=256", "agent.memory_budget=64", "agent.final_budget=32"], ("1K", "4K"),
                     (200, 64), (30, 40), ""),
    # The needles in real text (issue #35): Paul Graham's essays as the haystack, whose sentences look
    # like needles' ("One of Silicon Valley's biggest advantages is ..."), trained and held out there.
    # RL 20 steps: the recipe's training within 2 hours on 2 cores in float32 (SFT's 30 steps took
    # 38 min, an RL step about 3), where the noise haystack's RL ran 40 on faster cores.
    "essay": Suite("niah_single,niah_multikey", {"sft": "configs/sft-smollm2.yaml", "rl": "configs/rl-smollm2.yaml"},
                   ["agent.chunk_size=256", "agent.memory_budget=64", "agent.final_budget=32", "eval.haystack=essay"],
                   ("1K", "4K", "16K"), (200, 64), (30, 20), "essay", Targets(30, 20, 0.8, 5),
                   train=("learn.haystack=essay",)),
    "hotpotqa": Suite("hotpotqa", {"sft": "configs/sft-smollm2-hotpotqa.yaml", "rl": "configs/rl-smollm2-hotpotqa.yaml"},
                      ["agent.chunk_size=512", "agent.memory_budget=128", "agent.final_budget=64"], ("2K", "8K"),
                      (64, 64), (20, 12), "hotpotqa"),  # RL: 11.5 min a step (most groups all-equal)
    # SQuAD in long documents (issue #35's evidence): trained on 2-4 chunks of 256, held out at 1x-16x.
    # --quick: 16 rows a length for the traces; a 4-step SFT model answers none, so the pass filter
    # keeps never-right rows and RL trains on all-equal groups (else the filter refuses the run and
    # RL stops at learn.max_dropped_groups).
    "squad": Suite("squad", {"sft": "configs/sft-smollm2-squad.yaml", "rl": "configs/rl-smollm2-squad.yaml"},
                   ["agent.chunk_size=256", "agent.memory_budget=128", "agent.final_budget=64"], ("1K", "4K", "16K"),
                   # SFT: one epoch of the preset's 1,602 rows' traces (~200 steps); 768 rows of 256 questions
                   # scored 1.0 [0.3, 3.6] em at 1K after 30 steps, 2.0 [0.8, 5.0] after 91 (n = 200:
                   # results/learning/squad/sft-30steps, sft-768rows)
                   (200, 64), (260, 40), "squad", Targets(20, 15, 0.8, 3),
                   ("learn.task_n=16", "learn.pass_filter.low=0.0", "learn.eval_every=0", "rollout.drop_equal_rewards=false"),
                   (8, 2)),
}
# One change each to the RL preset, measured against its absence (RL as configured).
ABLATIONS = {
    # 16 rows of each task at 2 chunks, then 3, then 4, then all lengths mixed. RL's 40 steps took
    # 160 rows on 2026-12-02 (80 trained, 80 dropped with all-equal rewards): steps 1-10 read 2
    # chunks, 11-19 three, 20-29 four, the last ten the lengths mixed as without a curriculum.
    "curriculum": ["learn.curriculum=16"],
    "rollout_mean": ["learn.loss_agg=rollout_mean"],  # every rollout weighs the same, however many turns
    # Issue #35's two switches, off in the presets until measured: truncated importance sampling on
    # the learner/engine ratio (verl's cap, 2), and RL on the rows whose pass rate the starting model
    # leaves in [0.01, 0.99] (4 probes a row). Their steps/hour: each run's train_minutes over its steps.
    "tis": ["learn.tis_cap=2"],
    "pass_filter": ["learn.pass_filter={samples: 4}"],
    # Half the reward per memory turn that states a number its prompt does not hold: on needle-free
    # first chunks the essay RL model starts a needle sentence in 7 of 24 rows (SFT: 0 of 24), and
    # at 16x 20 of its 21 niah_single misses end on the needle sentence with a wrong number.
    "ground": ["learn.ground_cost=0.5"],
}
LADDER = (1, 2, 4, 8, 16)  # multiples of the training length (1x) a --ladder model is scored at
EVAL = ["engine.kind=vllm", "engine.max_model_len=4096", "agent.temperature=0.0", "eval.window=1024",
        "eval.concurrency=32"]


@dataclass(frozen=True)
class Cells:
    """One `memagent eval` run: a model's method at one length, on every task, n rows each."""

    model: str  # base | sft | rl | rl-<ablation>
    method: str  # memagent | truncation (a ladder: both, comma-separated)
    length: str  # a ladder: its lengths, comma-separated
    n: int

    @property
    def name(self) -> str:
        lengths = self.length.split(",")
        kind = f"ladder-{lengths[0]}-{lengths[-1]}" if len(lengths) > 1 else f"{self.method}-{self.length}"
        return f"{self.model}/{kind}-n{self.n}"


def ladder(model: str, one: str, n: int) -> Cells:
    """MODEL's ladder: both methods at every LADDER multiple of the training length ONE."""
    from pipelines.eval.stats import parse_length

    tokens = parse_length(one)
    return Cells(model, "truncation,memagent", ",".join(f"{tokens * k // 1024}K" for k in LADDER), n)


def plan(n: int, n_other: int, lengths: tuple[str, ...], seeds: int = 1) -> list[Cells]:
    """The cells in the order they are worth: a model is trained when its first cell comes up, so a
    session that runs out of time lands the cells that carry a target first. Two lengths: base at
    1x (scored once: the packaged model), the 4x cells that carry a target, the rest. Three: every
    1x and 4x cell has n rows, the longest n_other; SFT's 1x and 4x, then RL's 4x, truncation
    beside it, the longest length, RL's 1x, SFT's longest. Then the other RL seeds and each
    ablation at 4x (n), then (three lengths) each ablation at the longest (n_other)."""
    one, four, *longer = lengths
    if not longer:
        cells = [Cells("base", "memagent", one, n), Cells("sft", "memagent", four, n), Cells("rl", "memagent", four, n),
                 Cells("rl", "truncation", four, n), Cells("sft", "memagent", one, n),
                 Cells("rl", "memagent", one, n_other), Cells("sft", "truncation", four, n_other),
                 Cells("base", "memagent", four, n_other)]
    else:
        (far,) = longer
        cells = [Cells("base", "memagent", one, n), Cells("sft", "memagent", one, n), Cells("sft", "memagent", four, n),
                 Cells("rl", "memagent", four, n), Cells("rl", "truncation", four, n),
                 Cells("rl", "memagent", far, n_other), Cells("rl", "truncation", far, n_other),
                 Cells("rl", "memagent", one, n), Cells("rl", "truncation", one, n),
                 Cells("sft", "memagent", far, n_other)]
    return [*cells, *(Cells(seed_model(s), "memagent", four, n) for s in range(1, seeds)),
            *(Cells(f"rl-{a}", "memagent", four, n) for a in ABLATIONS),
            *(Cells(f"rl-{a}", "memagent", far, n_other) for far in longer for a in ABLATIONS)]


def seed_model(seed: int) -> str:
    """RL's model name for learn.seed=SEED from the same SFT weights (seed 0 is `rl`)."""
    return f"rl-seed{seed}" if seed else "rl"


ATTEMPTS = 3  # a failed stage runs again, resuming (on a shared machine Ray's memory monitor kills workers)


def sh(cmd: list[str], last: bool = True, stage: str | None = None) -> str | None:
    """CMD's last stdout line; on failure None, or the benchmark's exit when this was the LAST attempt.
    STAGE: its MLflow run is the benchmark run's child of that name."""
    import os

    from pipelines.track.tracker import stage_env

    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    env = {**os.environ, **(stage_env(stage) if stage else {})}
    out = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True, env=env)
    if out.returncode != 0:
        if last:
            sys.exit(f"learning: stage failed ({out.returncode}): {' '.join(cmd)}")
        print(f"learning: stage failed ({out.returncode}); running it again", file=sys.stderr, flush=True)
        return None
    return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""


def train(kind: str, suite: Suite, work: Path, tasks: str, steps: int, extra: list[str],
          name: str | None = None, options: tuple[str, ...] = ()) -> dict:
    """Run (or resume) one training stage of the suite's preset for KIND into WORK/NAME (default
    KIND), OPTIONS being `memagent train` flags (e.g. --max-minutes); returns its JSON line (model, steps, minutes)."""
    out = work / (name or kind)
    done = out / "done.json"
    if done.exists():
        return json.loads(done.read_text())
    flags = ["--sft"] if kind == "sft" else []
    line = None
    for attempt in range(1, ATTEMPTS + 1):
        resume = ["--resume"] if (out / "learner" / INDEX).exists() else []
        started = time.monotonic()
        try:
            line = sh([sys.executable, "-m", "pipelines.cli", "--config", suite.presets[kind], "train", *flags, *options,
                       *resume, "--steps", str(steps), "--out", str(out), f"learn.task={tasks}", *extra], attempt == ATTEMPTS,
                      stage=name or kind)
        finally:  # every invocation's wall time counts, interrupted ones too
            with (out / "wall.jsonl").open("a") as f:
                f.write(json.dumps({"minutes": round((time.monotonic() - started) / 60, 2), "resume": bool(resume)}) + "\n")
        if line is not None:
            break
    run = json.loads(line)
    run["minutes"] = round(sum(json.loads(w)["minutes"] for w in (out / "wall.jsonl").read_text().splitlines()), 2)
    done.write_text(json.dumps(run))
    return run


def fingerprint(model: str) -> str:
    """Which weights a cell scored: the base model by its store name (the packaged GGUF never
    changes), a trained one by the sha256 of its safetensors. Trained weights stay in the work
    folder, not in git: a session that trains again gets other weights, and every cell of the
    old ones is then scored again rather than mixed with the new."""
    if model == "smollm2":
        return model
    import hashlib

    h = hashlib.sha256()
    for f in sorted(Path(model).glob("*.safetensors")):
        with f.open("rb") as fh:
            while block := fh.read(1 << 24):
                h.update(block)
    return h.hexdigest()[:16]


def evaluate(cells: Cells, model: str, results: Path, tasks: str, agent: list[str], extra: tuple[str, ...] = ()) -> Path:
    """The ladder's cells (resumable), kept only if they scored these very weights with the same
    settings beyond the suite's (EXTRA: --agent; a stamp without them had none); returns their folder."""
    import shutil

    out, fp = results / cells.name, fingerprint(model)
    stamp = out / "model.json"
    old = json.loads(stamp.read_text()) if stamp.exists() else {"fingerprint": "smollm2"} if out.exists() else None
    extra = list(extra)
    if old is not None and (old["fingerprint"], old.get("agent", [])) != (fp, extra):
        print(f"learning: {cells.name} scored other weights or settings ({old['fingerprint']}, "
              f"{old.get('agent', [])}); scoring {fp} with {extra} again", file=sys.stderr)
        shutil.rmtree(out)
    if not (out / "summary.json").exists():
        out.mkdir(parents=True, exist_ok=True)
        meta = {"model": model, "fingerprint": fp, **({"agent": extra} if extra else {})}
        stamp.write_text(json.dumps(meta))
        started = time.monotonic()
        cmd = [sys.executable, "-m", "pipelines.cli", "eval", "--model", model, "--tasks", tasks, "--lengths",
               cells.length, "--n", str(cells.n), "--methods", cells.method, "--out", str(out), *agent, *EVAL, *extra]
        for attempt in range(1, ATTEMPTS + 1):  # a rerun resumes the cells
            if sh(cmd, attempt == ATTEMPTS, stage=f"eval-{cells.name.replace('/', '-')}") is not None:
                break
        minutes = round((time.monotonic() - started) / 60, 2)  # the last invocation's (a resumed cell: its rest)
        stamp.write_text(json.dumps({**meta, "minutes": minutes}))
    return out


def scores(folder: Path, task: str, length: str, method: str, score: str = "strict") -> dict[str, float]:
    """{sample_id: score} of one cell (cells written before the strict score: scored when read)."""
    from pipelines.eval.results import read_cell

    path = folder / "cells" / task / length / f"{method}.parquet"
    return {r["sample_id"]: r[score] for r in read_cell(str(path))} if path.exists() else {}


LENIENT = "sub_em (paper's, lenient)"


def summarize(done: dict[Cells, Path], tasks: list[str], suite: Suite, seeds: int) -> dict:
    by_score: dict = {"strict": {}, "f1": {}, "sub_em": {}}
    for cells, folder in done.items():
        table = table_of(folder)
        label = cells.model if cells.method == "memagent" else f"{cells.model}/{cells.method}"
        for task in (t for t in tasks if t in table):  # a cell scored with --tasks holds only those
            for score, out in by_score.items():
                if score == "f1" and not is_qa(task):  # QA tasks only: SQuAD's f1 beside em
                    continue
                cell = table[task][cells.length][cells.method]
                out.setdefault(task, {}).setdefault(cells.length, {})[label] = points(cell, score)
    strict = by_score["strict"]
    by = {(c.model, c.method, c.length): f for c, f in done.items()}
    four = suite.lengths[1]
    paired = pairs(by, tasks, "sft", "rl", suite.lengths)
    ablations = {a: d for a in ABLATIONS if (d := pairs(by, tasks, "rl", f"rl-{a}", suite.lengths[1:]))}
    means = {model: {t: {ln: v[model][0] for ln, v in strict.get(t, {}).items() if model in v} for t in tasks}
             for model in ("base", "sft", "rl")}
    cells = {c.name: json.loads((f / "model.json").read_text()) for c, f in done.items() if (f / "model.json").exists()}
    per_seed = [{"seed": s, "model": seed_model(s), "paired_rl_minus_sft": {t: d[four] for t, d in found.items()}}
                for s in range(seeds) if (found := pairs(by, tasks, "sft", seed_model(s), (four,)))]
    seeds_out = {"rl_seeds": per_seed, "rl_seeds_spread": {
        t: spread([p["paired_rl_minus_sft"][t] for p in per_seed if t in p["paired_rl_minus_sft"]]) for t in tasks}
    } if seeds > 1 else {}
    return {"score": "strict", **means, "strict": strict, **({"f1": by_score["f1"]} if by_score["f1"] else {}),
            LENIENT: by_score["sub_em"], "paired_rl_minus_sft": paired, "ablations": ablations, **seeds_out,
            **({"targets": targets(by, tasks, suite, per_seed, seeds)} if suite.targets else {}),
            "scored": {name: c["fingerprint"] for name, c in cells.items()},
            "eval_minutes": {name: c["minutes"] for name, c in cells.items() if "minutes" in c}}


def targets(by: dict, tasks: list[str], suite: Suite, per_seed: list[dict], seeds: int) -> dict:
    """{task: {target: {"figure", "verdict"}}} from the landed cells (learning_targets.judge)."""
    one, far = suite.lengths[0], suite.lengths[-1]

    def mean(task: str, key: tuple[str, str, str]) -> float | None:
        return points(table_of(by[key])[task][key[2]][key[1]])[0] if key in by else None

    return {task: judge(suite.targets, suite.lengths, diff(by, task, ("base", "memagent", one), ("sft", "memagent", one)),
                        diff(by, task, ("rl", "truncation", far), ("rl", "memagent", far)),
                        mean(task, ("rl", "memagent", far)), mean(task, ("rl", "memagent", one)),
                        [p["paired_rl_minus_sft"][task] for p in per_seed if task in p["paired_rl_minus_sft"]], seeds)
            for task in tasks}


def table_of(folder: Path) -> dict:
    """An eval folder's scores: {task: {length: {method: cell}}}."""
    return json.loads((folder / "summary.json").read_text())["table"]


def points(cell: dict, score: str = "strict") -> list:
    """A cell's score in points: [mean, lo, hi, n]."""
    return [round(100 * cell[score], 1), round(100 * cell[f"{score}_lo"], 1), round(100 * cell[f"{score}_hi"], 1),
            cell["n"]]


def ladders(results: Path, n: int) -> dict:
    """Every scored ladder under RESULTS: {model: {task: {length: {method: [mean, lo, hi, n]}}}}."""
    return {folder.parent.name: {task: {ln: {m: points(c) for m, c in cells.items()} for ln, cells in by.items()}
                                 for task, by in table_of(folder).items()}
            for folder in sorted(results.glob(f"*/ladder-*-n{n}")) if (folder / "summary.json").exists()}


def ladder_plot(folder: Path, base: list[Path], out: Path) -> Path:
    """OUT: the ladder in FOLDER (both methods) with the base model's memory-agent cells at the
    lengths both were scored."""
    from pipelines.eval.report import plot

    table = table_of(folder)
    lengths = list(dict.fromkeys(ln for by in table.values() for ln in by))
    summary = {(t, ln, m): c for t, by in table.items() for ln, cells in by.items() for m, c in cells.items()}
    for b in base:
        summary.update({(t, ln, "base"): cells["memagent"] for t, by in table_of(b).items() if t in table
                        for ln, cells in by.items() if ln in lengths})
    return plot(summary, list(table), lengths, ["memagent", "truncation", "base"], out)


def diff(by: dict, task: str, before: tuple[str, str, str], after: tuple[str, str, str]) -> list | None:
    """after - before (strict), paired over the rows both cells scored: [mean, lo, hi, n] in points;
    None when a cell is missing or they share no rows. Keys are (model, method, length)."""
    if before not in by or after not in by:
        return None
    m, lo, hi, n = paired_diff(scores(by[before], task, before[2], before[1]), scores(by[after], task, after[2], after[1]))
    return [round(100 * m, 1), round(100 * lo, 1), round(100 * hi, 1), n] if n else None


def pairs(by: dict, tasks: list[str], before: str, after: str, lengths: tuple[str, ...]) -> dict:
    """after - before, the memory agent's cells at each length: {task: {length: [mean, lo, hi, n]}} (points)."""
    out: dict = {}
    for task in tasks:
        for length in lengths:
            if d := diff(by, task, (before, "memagent", length), (after, "memagent", length)):
                out.setdefault(task, {})[length] = d  # none: a cell scored on other tasks (--tasks)
    return out


def against(done: dict[Cells, Path], previous: Path, tasks: list[str]) -> dict:
    """This run minus PREVIOUS's same-named memory-agent cells, paired over shared rows:
    {model: {task: {length: [mean, lo, hi, n]}}} (points)."""
    out: dict = {}
    for c, folder in done.items():
        old = previous / c.name
        if c.method == "memagent" and (old / "summary.json").exists():
            by = {("previous", c.method, c.length): old, ("this", c.method, c.length): folder}
            if d := pairs(by, tasks, "previous", "this", (c.length,)):
                for task, lengths in d.items():
                    out.setdefault(c.model, {}).setdefault(task, {}).update(lengths)
    return out


def arguments() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--stages", default="sft,rl,eval",
                   help=f"sft, rl, seeds (RL's other seeds), eval and the ablations: {', '.join(ABLATIONS)}")
    p.add_argument("--suite", choices=list(SUITES), default="needles")
    p.add_argument("--tasks", help="default: the suite's")
    p.add_argument("--n", type=int, help="rows of the cells that carry a target (default: the suite's, 200 for needles)")
    p.add_argument("--n-other", type=int, help="rows of the other cells (default 64)")
    p.add_argument("--sft-steps", type=int)
    p.add_argument("--rl-steps", type=int)
    p.add_argument("--rl-seeds", type=int, default=3, help="RL runs from the same SFT weights with the seeds stage, "
                   "learn.seed 0 (rl) to N-1 (rl-seed1, ...), each scored at 4x (default 3; --quick 2)")
    p.add_argument("--models", help="evaluate only these models' cells, e.g. rl-rollout_mean (default: every trained one)")
    p.add_argument("--lengths", help="evaluate only the cells of these lengths, e.g. 1K (default: every length)")
    p.add_argument("--ladder", help="score this trained model (e.g. rl) at 1x-16x, both methods (with --stages eval)")
    p.add_argument("--previous", help="another run's results folder: each model's memory-agent cells paired "
                                      "against that run's same-named ones (e.g. a new SFT recipe against the old)")
    p.add_argument("--agent", action="append", default=[], help="an agent setting for every evaluation beyond the "
                   "suite's, e.g. agent.grounded=true (cells record it; give it its own --results and --previous)")
    p.add_argument("--rescore", action="store_true", help="score the results folder's cells again from their "
                   "stored predictions and rewrite every summary (no training, no evaluation)")
    p.add_argument("--work", default=str(REPO / ".memagent" / "bench" / "learning"))
    p.add_argument("--results", default=str(REPO / "benchmarks" / "results" / "learning"))
    args = p.parse_args()
    if args.rl_seeds < 1:
        sys.exit(f"learning: --rl-seeds {args.rl_seeds}: at least 1")
    if args.quick and args.rl_seeds == 3:
        args.rl_seeds = 2
    return args


@dataclass(frozen=True)
class Recipe:
    """How one model is trained: its preset kind, the stage that trains it, its changes to the preset."""

    kind: str  # sft | rl (from the SFT model)
    stage: str
    change: tuple[str, ...] = ()


def recipes(seeds: int) -> dict[str, Recipe]:
    return {"sft": Recipe("sft", "sft"), "rl": Recipe("rl", "rl"),
            **{seed_model(s): Recipe("rl", "seeds", (f"learn.seed={s}",)) for s in range(1, seeds)},
            **{f"rl-{a}": Recipe("rl", a, tuple(change)) for a, change in ABLATIONS.items()}}


class Models:
    """The run's models by name, each trained (or read back from its done.json) when first asked
    for, so training and evaluation interleave in plan order."""

    def __init__(self, args: argparse.Namespace, suite: Suite, work: Path, results: Path, tasks: str):
        self.args, self.suite, self.work, self.results, self.tasks = args, suite, work, results, tasks
        self.stages = set() if args.rescore else set(args.stages.split(","))
        self.recipes = recipes(args.rl_seeds)
        self.paths, self.runs = {"base": "smollm2"}, {}

    def get(self, name: str) -> str | None:
        """NAME's weights; None when its stage is not selected and it was never trained."""
        if name in self.paths or name not in self.recipes:
            return self.paths.get(name)
        r = self.recipes[name]
        if r.stage not in self.stages and not (self.work / name / "done.json").exists():
            return None
        extra = [*self.suite.train, *(self.suite.quick if self.args.quick else ())]
        if r.kind == "rl":
            if (sft := self.get("sft")) is None:
                sys.exit(f"learning: {name} starts from the SFT model: add sft to --stages (none in {self.work})")
            extra += [f"model.path={sft}", *r.change]
        a = self.args
        steps = (a.sft_steps or (4 if a.quick else self.suite.steps[0])) if r.kind == "sft" else \
            (a.rl_steps or (2 if a.quick else self.suite.steps[1]))
        self.runs[name] = train(r.kind, self.suite, self.work, self.tasks, steps, extra, name)
        self.paths[name] = self.runs[name]["model"]
        keep_record(self.work / name, self.results, name)
        return self.paths[name]


def keep_record(out: Path, results: Path, name: str) -> None:
    """A training's done.json, wall times and curve beside its cells (RESULTS/NAME-*), to commit. A
    record of another run of NAME already there (a new machine trains again) stays; this run's goes
    to RESULTS/NAME-<its checkpoint's time>-*."""
    import shutil

    results.mkdir(parents=True, exist_ok=True)
    done, kept = out / "done.json", results / f"{name}-done.json"
    if done.exists() and kept.exists() and kept.read_text() != done.read_text():
        name = f"{name}-{json.loads(done.read_text()).get('checkpoint', '').rsplit('checkpoint_', 1)[-1] or 'again'}"
        print(f"learning: another run's record is in {kept}; this run's: {results / name}-*", file=sys.stderr)
    for f in ("done.json", "wall.jsonl", "curve.png"):
        if (out / f).exists():
            shutil.copyfile(out / f, results / f"{name}-{f}")


def write_summary(args: argparse.Namespace, suite: Suite, models: Models, results: Path, tasks: str) -> dict:
    """RESULTS/summary.json from every landed cell (written after each cell, so a stopped run has one)."""
    n, n_other = cell_sizes(args, suite)
    cells = plan(n, n_other, suite.lengths, args.rl_seeds)
    done = {c: results / c.name for c in cells if (results / c.name / "summary.json").exists()}
    summary = {**summarize(done, tasks.split(","), suite, args.rl_seeds), "ladder": ladders(results, n_other),
               **({"paired_vs_previous": against(done, Path(args.previous), tasks.split(","))} if args.previous else {}),
               "models": models.paths, "train_minutes": {k: r.get("minutes") for k, r in models.runs.items()}}
    old = json.loads((results / "summary.json").read_text()) if (results / "summary.json").exists() else {}
    if args.rescore:  # what rescoring cannot recompute (the models trained, their minutes) stays as it was
        summary = {**{k: v for k, v in old.items() if k in ("models", "train_minutes", "paired_vs_previous")},
                   **{k: v for k, v in summary.items() if k not in ("models", "train_minutes")}}
    else:  # models trained by an earlier invocation of this run keep their minutes
        summary["train_minutes"] = {**old.get("train_minutes", {}), **summary["train_minutes"]}
    results.mkdir(parents=True, exist_ok=True)
    (results / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def cell_sizes(args: argparse.Namespace, suite: Suite) -> tuple[int, int]:
    n, n_other = suite.quick_n if args.quick else suite.n
    return args.n or n, args.n_other or n_other


def main() -> None:
    args = arguments()
    with tracked(args.suite):
        run(args)


def tracked(suite: str):
    """The benchmark's own MLflow run (`learning-SUITE`, in the home's tracking store): every training
    and evaluation it runs is a child run named by its stage (sft, rl, rl-seed1, eval-sft-memagent-4K-n200)."""
    from pipelines.config import load_config
    from pipelines.track.tracker import create_tracker, pipeline_run

    cfg = load_config(None, [])
    return pipeline_run(create_tracker(cfg), cfg, f"learning-{suite}")


def run(args: argparse.Namespace) -> None:
    suite = SUITES[args.suite]
    tasks = args.tasks or suite.tasks
    work, results = Path(args.work) / suite.folder, Path(args.results) / suite.folder
    work.mkdir(parents=True, exist_ok=True)
    if args.rescore:
        from pipelines.eval.rescore import eval_folders, rescore

        for folder in eval_folders(results):
            rescore(folder)
    models = Models(args, suite, work, results, tasks)
    n, n_other = cell_sizes(args, suite)
    lad = ladder(args.ladder, suite.lengths[0], n_other) if args.ladder else None
    if "eval" in models.stages:
        for c in plan(n, n_other, suite.lengths, args.rl_seeds):
            if (not args.models or c.model in args.models.split(",")) and \
                    (not args.lengths or c.length in args.lengths.split(",")) and (model := models.get(c.model)):
                evaluate(c, model, results, tasks, suite.agent, tuple(args.agent))
                write_summary(args, suite, models, results, tasks)
        if args.ladder:
            if (model := models.get(args.ladder)) is None:
                sys.exit(f"learning: --ladder {args.ladder}: no trained model of that name in {work} ({', '.join(models.paths)})")
            evaluate(lad, model, results, tasks, suite.agent, tuple(args.agent))
    for name in models.recipes:  # the selected stages no cell asked for (e.g. --stages sft,rl)
        models.get(name)
    summary = write_summary(args, suite, models, results, tasks)
    if lad and (results / lad.name / "summary.json").exists():
        base = [results / c.name for c in plan(n, n_other, suite.lengths)
                if c.model == "base" and c.method == "memagent" and (results / c.name / "summary.json").exists()]
        ladder_plot(results / lad.name, base, results / "ladder.png")
    for line in lines(summary.get("targets", {})):
        print(line)
    finish(summary)


if __name__ == "__main__":
    main()
