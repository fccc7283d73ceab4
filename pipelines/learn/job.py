"""One training run (`memagent train` without --continuous): RL with rollout workers, or SFT
on memory traces; its progress lines, metrics and curve. The CLI is pipelines/learn/command.py;
the quickstart and continuous training call `main` directly."""

from __future__ import annotations

import time
from dataclasses import dataclass

from pipelines import logs
from pipelines.config import Config
from pipelines.errors import UserError
from pipelines.learn import runs
from pipelines.learn.curve import load_history, merge_history, save_history
from pipelines.learn.trainer import RunSpec
from pipelines.learn.weights import FolderPublisher
from pipelines.models.settings import stamp
from pipelines.storage import absolute_uri, exists


@dataclass(frozen=True)
class TrainRequest:
    sft: bool = False
    tasks: str | None = None
    steps: int | None = None
    max_minutes: float | None = None
    out: str | None = None
    resume: bool = False
    heldout: str | None = None  # rows RL scores every learn.eval_every steps (default: learn.task's eval split)


def main(cfg: Config, req: TrainRequest, tracker=None, watch=None, workers: list | None = None) -> dict:
    """watch(step, metrics): called for every step as it lands, beside the progress line.
    workers: RL's rollout actors, already holding the run's starting policy, to use and leave
    running (default: started for the run and stopped after it)."""
    from pipelines import runtime
    from pipelines.learn.launch import fit
    from pipelines.learn.sftdata import sft_datasets
    from pipelines.models import absolute_ref, config_model_dir

    steps = req.steps or cfg.learn.steps
    if steps <= 0:
        raise UserError(f"--steps {steps}: must be positive")
    if not req.sft and cfg.rollout.top_p < 1.0:  # the ratio would divide by a cut distribution
        raise UserError(f"rollout.top_p={cfg.rollout.top_p}: training samples with top_p=1 (the learner "
                        "scores the full distribution)")
    model_dir = str(config_model_dir(cfg))  # here, for the driver's own reads (tokenizer, fingerprint)
    out = absolute_uri(req.out or str(cfg.home_path / "train" / ("sft" if req.sft else "rl")))
    prior = runs.latest_state(out, model_dir)
    if prior is not None and not req.resume:
        raise UserError(f"out '{out}': holds a run at step {prior.step}; pass --resume, or another --out")
    if prior is None and req.resume:
        raise UserError(f"--resume: no checkpoint under '{out}'")
    if prior is not None and steps < prior.step:
        raise UserError(f"--steps {steps}: the run in '{out}' is already at step {prior.step}")
    if prior is not None and prior.weights and not exists(f"{prior.weights}/config.json"):
        raise UserError(f"checkpoint of step {prior.step} in '{out}': its policy '{prior.weights}' is gone")
    tasks = req.tasks or runs.build_split(cfg, out, model_dir)
    runs.check_tasks(tasks, need_evidence=req.sft)
    minutes = req.max_minutes or cfg.learn.max_minutes
    start = runs.repair_index(out)
    if start is not None:
        print(f"resuming from {start} (step {prior.step}): Ray Train's checkpoint index was cut by a stop "
              "while it was being written", file=logs.console(), flush=True)
    run = RunSpec(out, absolute_ref(cfg.model.path), steps, time.time() + 60 * minutes if minutes else None,
                  req.sft, tasks, start_from=start)
    runtime.connect()
    hub = None
    if not req.sft:
        from pipelines.eval.heldout import task_scores
        from pipelines.rollout.hub import start_hub
        from pipelines.rollout.source import HubSource

        from pipelines.learn import teach

        if cfg.learn.pass_filter is not None or exists(teach.tasks_uri(out)):  # a resume reads them back
            tasks = teach.filtered(cfg, tasks, out, steps, workers, resuming=prior is not None)
            run = RunSpec(**{**run.__dict__, "tasks": tasks})
        hub = HubSource(start_hub(cfg, tasks, prior.version if prior else 0, prior.weights if prior else None,
                                  prior.cursor if prior else None, workers=workers, score=task_scores))
        evals = (req.heldout or runs.build_split(cfg, out, model_dir, "eval")) if cfg.learn.eval_every else ""
        run = RunSpec(**{**run.__dict__, "source": hub, "eval_tasks": evals})
    log_inputs(cfg, tracker, tasks, run.eval_tasks if not req.sft else None)
    started, last = time.perf_counter(), {}
    history = load_history(out) if prior else []  # the steps before a resume, for the curve
    try:
        datasets = sft_datasets(tasks, run.model, cfg) if req.sft else None
        def step_done(step: int, m: dict) -> None:
            nonlocal history  # on disk before the step is shown: a stop right after its line keeps it
            history = merge_history(history, [(step, {k: v for k, v in m.items() if isinstance(v, (int, float))})])
            save_history(out, history)
            on_step(step, steps, m, tracker)
            last.update({k: v for k, v in m.items() if k.startswith("eval/") or k == "train/heldout_loss"})
            if watch is not None:
                watch(step, m)

        result = fit(cfg, run, {}, datasets, step_done)
    finally:
        if hub is not None:
            hub.close()
    state = runs.latest_state(out, model_dir)
    if state is None:
        raise UserError(f"out '{out}': the run ended before its first checkpoint")
    if not req.sft:  # while the run lasted, versions its index might still name were kept too
        FolderPublisher(out, model_dir, cfg.learn.keep_versions).prune(state.version)
    model = runs.final_model(out, state, req.sft)
    stamp(model, cfg.agent)  # ask, serve, batch and eval run it with the settings it was trained with
    log_curve(history, out, req.sft, tracker)
    if tracker is not None:  # registering it later uploads its files into this logged model
        from pipelines.track.redact import flatten
        from pipelines.track.tracker import short_model

        name = f"{'sft' if req.sft else 'rl'}-{short_model(cfg.model.path)}"
        tracker.log_model(name, model, metrics=last, params=flatten({"agent": cfg.agent.model_dump(mode="json")}))
    return {"model": model, "steps": state.step, "version": state.version, "checkpoint": result.checkpoint.path,
            "tasks": tasks, "minutes": round((time.perf_counter() - started) / 60, 2), "metrics": last}


def log_inputs(cfg: Config, tracker, tasks: str, heldout: str | None) -> None:
    """The training rows, the chunk store their documents come from, RL's held-out rows: the run's datasets."""
    if tracker is None:
        return
    from pipelines.track.datasets import HELD_OUT, TRAINING, refs

    tracker.log_datasets([*refs(TRAINING, tasks, cfg.data.store), *refs(HELD_OUT, heldout)])


def log_curve(history: list, out: str, sft: bool, tracker) -> None:
    """OUT/curve.png (local runs) and the run's `train/curve.png` artifact in MLflow."""
    import tempfile
    from pathlib import Path

    from pipelines.learn.curve import plot_curve
    from pipelines.storage import is_s3

    with tempfile.TemporaryDirectory() as d:
        png = plot_curve(history, Path(d) / "curve.png", sft)
        if png is None:
            return
        if not is_s3(out):
            Path(out, "curve.png").write_bytes(png.read_bytes())
        if tracker is not None:
            tracker.log_artifact(png, "train")


SHOW = (("reward", "rollout/reward_mean"), ("acc", "rollout/accuracy"), ("loss", "train/loss"),
        ("heldout", "train/heldout_loss"), ("kl", "train/kl"), ("clip", "train/clip_high"),
        ("resp", "rollout/response_tokens"), ("mem", "rollout/memory_tokens"), ("stale", "rollout/staleness"),
        ("tok/s", "train/tokens_per_s"), ("push_s", "train/weight_push_s"))


def shown_evals(metrics: dict) -> str:
    return "  ".join(f"{k.removeprefix('eval/').removesuffix('/strict')} {v:.3f}" for k, v in metrics.items()
                     if k.startswith("eval/") and k.endswith("/strict"))


def on_step(step: int, steps: int, metrics: dict, tracker) -> None:
    """One progress line on stderr per step; every metric to MLflow."""
    shown = "  ".join(f"{label} {metrics[key]:.3g}" for label, key in SHOW if key in metrics)
    if evals := shown_evals(metrics):
        shown += f"  | held-out strict: {evals}"
    print(f"step {step}/{steps}  {shown}", file=logs.console(), flush=True)
    if tracker is not None:
        from pipelines.track.metrics import LEARNER

        tracker.log_metrics({k: v for k, v in metrics.items() if k in LEARNER or k.startswith("eval/")}, step=step)
