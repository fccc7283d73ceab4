"""The quickstart's stages. Each takes the run (`Run`) and returns a JSON-able result, which the
command saves as the stage finishes, so an interrupted quickstart skips what is done.

One pool of rollout workers (one engine each) serves the evaluations and RL: the policy a
stage needs is loaded into the running engines (`reset`), never by starting new ones.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines.config import Config
from pipelines.eval.heldout import RowKey
from pipelines.learn.config import LearnConfig
from pipelines.rollout.pool import Pool


@dataclass
class Run:
    cfg: Config  # the quickstart's, its store under root
    root: Path  # HOME/quickstart
    done: dict[str, Any]  # results of finished stages, by name
    pool: Pool = field(init=False)  # the rollout workers every evaluation and RL stage uses
    tracker: Any = None  # the quickstart's run in MLflow (pipelines.track), the stages' parent

    def __post_init__(self) -> None:
        self.pool = Pool(eval_config(self, self.cfg.model.path, ""))

    @property
    def store(self) -> str:
        return self.cfg.data.store


def data(run: Run) -> dict:
    """Train and held-out task rows; their documents built and ingested into the chunk store
    through the ingest pipeline (`memagent data build`'s path). The builders keep the two
    splits' keys and values apart."""
    from pipelines.ingest.builders.build import BuildRequest, build

    q, out = run.cfg.quickstart, {}
    for split, lengths, n in (("train", q.train_lengths, q.train_n), ("eval", q.heldout_length, q.heldout_n)):
        uri = str(run.root / "tasks" / split)
        summary = build(BuildRequest(task=q.task, lengths=lengths, n=n, out=uri, store=run.store, split=split,
                                     seed=run.cfg.learn.seed, haystack=q.haystack), run.cfg)
        out[split] = {"tasks": uri, "rows": summary.rows}
    return {**out, "store": run.store}


def log_data(run: Run) -> None:
    """The train and held-out rows and the chunk store, datasets of the quickstart's own run."""
    from pipelines.track.datasets import HELD_OUT, TRAINING, refs

    data = run.done["data"]
    run.tracker.log_datasets([*refs(TRAINING, data["train"]["tasks"], data["store"]),
                              *refs(HELD_OUT, data["eval"]["tasks"])])


def eval_config(run: Run, model: str, out: str) -> Config:
    q = run.cfg.quickstart
    e = run.cfg.eval.model_copy(update={
        "dataset": str(run.root / "tasks" / "eval"), "tasks": (q.task,),
        "lengths": (q.heldout_length,), "n": q.heldout_n, "methods": ("memagent",), "out": out})
    return run.cfg.model_copy(update={"eval": e, "model": run.cfg.model.model_copy(update={"path": model})})


def evaluate(run: Run, name: str, model: str | None) -> dict:
    """Held-out strict score of `model` (None: the base) on the held-out rows, through the ladder;
    the paper's lenient sub_em beside it."""
    from pipelines.eval.ladder import main as ladder

    workers = run.pool.load(model)
    out = str(run.root / name)
    cfg = eval_config(run, model or run.cfg.model.path, out)
    cell = ladder(cfg, workers)["summary"][cfg.eval.tasks[0]][cfg.eval.lengths[0]]["memagent"]
    return {"strict": cell["strict"], "lo": cell["strict_lo"], "hi": cell["strict_hi"], "n": cell["n"],
            "sub_em": cell["sub_em"], "sub_em_lo": cell["sub_em_lo"], "sub_em_hi": cell["sub_em_hi"],
            "rows": f"{out}/cells/{cfg.eval.tasks[0]}/{cfg.eval.lengths[0]}/memagent.parquet"}


def row_scores(rows: str) -> dict[RowKey, float]:
    """{(task, sample_id): strict score} of one evaluation's cell."""
    from pipelines.eval.heldout import record_scores
    from pipelines.eval.results import read_cell

    return record_scores(read_cell(rows))


def learn_config(run: Run, updates: dict, model: str) -> Config:
    learn = LearnConfig.model_validate({**run.cfg.learn.model_dump(), **updates})
    return run.cfg.model_copy(update={"learn": learn, "model": run.cfg.model.model_copy(update={"path": model})})


def train(run: Run, kind: str) -> dict:
    """SFT on traces of the train rows, or RL from the SFT model on the pool's workers; an
    interrupted run resumes from its last checkpoint."""
    from pipelines.learn import rl_recipe, runs, sft_recipe
    from pipelines.learn.recipe import TrainRequest
    from pipelines.models import config_model_dir
    from pipelines.track.tracker import command_run, create_tracker

    sft = kind == "sft"
    q = run.cfg.quickstart
    model = run.cfg.model.path if sft else run.done["sft"]["model"]
    cfg = learn_config(run, q.sft if sft else q.rl, model)
    out = str(run.root / kind)
    resume = runs.latest_state(out, str(config_model_dir(cfg))) is not None
    workers = None if sft else run.pool.load(model)
    rates: dict[str, list[float]] = {"train/tokens_per_s": [], "rollout/tokens_per_s": []}

    def watch(step: int, m: dict) -> None:
        for k, v in rates.items():
            if k in m:
                v.append(m[k])

    tracker = create_tracker(cfg)
    with command_run(tracker, cfg, "train", tags={"quickstart": kind, "base_model": model, "sft": sft}) as run_id:
        req = TrainRequest(tasks=run.done["data"]["train"]["tasks"], out=out, resume=resume)
        result = (sft_recipe.main(cfg, req, tracker, watch) if sft else
                  rl_recipe.main(cfg, req, tracker, watch, workers=workers))
    rate = {k.replace("/", "_"): sum(v) / len(v) for k, v in rates.items() if v}
    return {"model": result["model"], "steps": result["steps"], "minutes": result["minutes"], "run_id": run_id,
            **rate}


def register(run: Run) -> dict:
    """The better of SFT and SFT + RL on the same held-out rows, by continuous training's gate
    (learn.gate.verdict: RL only when its paired gain's 95% interval clears
    learn.continuous.margin, else the SFT model), as a new version with its held-out figures:
    @production if the name has none yet, else @candidate (promoting it is a person's decision)."""
    from pipelines.learn.gate import verdict
    from pipelines.models import config_model_dir
    from pipelines.models.registry import alias_version, register_model
    from pipelines.track.tracker import command_run, create_tracker

    cfg, q, done = run.cfg, run.cfg.quickstart, run.done
    v = verdict(row_scores(done["eval_sft"]["rows"]), row_scores(done["eval_after"]["rows"]),
                cfg.learn.continuous.margin)
    kept = "rl" if v.better else "sft"
    chosen = done["eval_after" if v.better else "eval_sft"]
    production = alias_version(q.registry_name, "production", cfg.home_path, cfg.track)
    alias = "production" if production is None else "candidate"
    metrics = {"heldout_strict_before": done["eval_before"]["strict"],
               "heldout_strict_after_sft": done["eval_sft"]["strict"],
               "heldout_strict_after_rl": done["eval_after"]["strict"], "heldout_strict": chosen["strict"],
               "heldout_sub_em": chosen["sub_em"], "heldout_n": chosen["n"], "heldout_rl_gain": v.gain,
               "heldout_rl_gain_lo": v.lo, "heldout_rl_gain_hi": v.hi}
    tags = {"train_run": done[kept]["run_id"], "base_model": cfg.model.path, "kept": kept, "why": v.why}
    tracker = create_tracker(cfg)
    with command_run(tracker, cfg, "register", tags=tags):
        ref = register_model(config_model_dir(cfg, done[kept]["model"]), q.registry_name, cfg.home_path, cfg.track,
                             metrics=metrics, alias=alias, tags=tags, run_id=done[kept]["run_id"])
        tracker.log_metrics(metrics)
        tracker.set_tags({"registered": ref, "alias": alias})
    return {"model": ref, "alias": alias, "kept": kept, "why": v.why, "rl_gain": v.paired}


def serve(run: Run) -> dict:
    """Serve the registered version and answer held-out questions as a batch job through it."""
    from pipelines.data.tasks import read_task_rows
    from pipelines.serve.batch import main as batch

    run.pool.close()  # the served replica needs the cores the pool's engines held
    q, folder = run.cfg.quickstart, run.root / "batch"
    folder.mkdir(parents=True, exist_ok=True)
    inputs = folder / "input.jsonl"
    with inputs.open("w") as f:
        for i, row in enumerate(read_task_rows(run.done["data"]["eval"]["tasks"])):
            if i >= q.batch_n:
                break
            f.write(json.dumps({"id": row.sample_id, "question": row.question, "doc_id": row.doc_id}) + "\n")
    model = run.done["register"]["model"]
    cfg = run.cfg.model_copy(update={"model": run.cfg.model.model_copy(update={"path": model})})
    st = batch(cfg, str(inputs), str(folder / "output"), None)
    return {"job": st["job_id"], "rows": st["done"], "errors": st["errors"], "output": st["output"], "model": model}
