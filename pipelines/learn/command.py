"""`memagent train`: the learner with rollout workers (RL), or alone on memory traces (--sft).

    memagent train --sft --steps 40 --out .memagent/train/sft agent.chunk_size=256 agent.memory_budget=64
    memagent train --steps 20 --out .memagent/train/rl model.path=.memagent/train/sft/best
    memagent train --resume --steps 40 --out .memagent/train/rl     # continues at step 21
    memagent train --continuous --tasks data/tasks --out .memagent/train/continuous --once  # pipelines.learn.continuous

--steps N stops after optimizer step N counted from the run's start, so a resumed run
continues to N. The last line is one JSON object: model, version, steps, checkpoint.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from pipelines import logs
from pipelines.config import Config
from pipelines.errors import UserError
from pipelines.learn import runs
from pipelines.learn.trainer import RunSpec
from pipelines.learn.weights import FolderPublisher
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
    from pipelines.learn.launch import fit
    from pipelines.learn.sftdata import sft_datasets
    from pipelines.models import config_model_dir
    from pipelines.rollout.service import ensure_ray

    steps = req.steps or cfg.learn.steps
    if steps <= 0:
        raise UserError(f"--steps {steps}: must be positive")
    if not req.sft and cfg.rollout.top_p < 1.0:  # the ratio would divide by a cut distribution
        raise UserError(f"rollout.top_p={cfg.rollout.top_p}: training samples with top_p=1 (the learner "
                        "scores the full distribution)")
    model_dir = str(config_model_dir(cfg))
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
    run = RunSpec(out, model_dir, steps, time.time() + 60 * minutes if minutes else None, req.sft, tasks)
    ensure_ray()
    hub = None
    if not req.sft:
        from pipelines.rollout.hub import start_hub

        hub = start_hub(cfg, tasks, prior.version if prior else 0, prior.weights if prior else None,
                        prior.cursor if prior else None, workers=workers)
        evals = (req.heldout or runs.build_split(cfg, out, model_dir, "eval")) if cfg.learn.eval_every else ""
        run = RunSpec(**{**run.__dict__, "hub": hub, "eval_tasks": evals})
    started, last, history = time.perf_counter(), {}, []
    try:
        datasets = sft_datasets(tasks, model_dir, cfg) if req.sft else None
        def step_done(step: int, m: dict) -> None:
            on_step(step, steps, m, tracker)
            history.append((step, m))
            last.update({k: v for k, v in m.items() if k.startswith("eval/") or k == "train/heldout_loss"})
            if watch is not None:
                watch(step, m)

        result = fit(cfg, run, {}, datasets, step_done)
    finally:
        if hub is not None:
            import ray

            ray.get(hub.close.remote())
            ray.kill(hub)
    state = runs.latest_state(out, model_dir)
    if state is None:
        raise UserError(f"out '{out}': the run ended before its first checkpoint")
    if not req.sft:  # while the run lasted, versions its index might still name were kept too
        FolderPublisher(out, model_dir, cfg.learn.keep_versions).prune(state.version)
    model = runs.final_model(out, state, req.sft)
    log_curve(history, out, req.sft, tracker)
    return {"model": model, "steps": state.step, "version": state.version, "checkpoint": result.checkpoint.path,
            "tasks": tasks, "minutes": round((time.perf_counter() - started) / 60, 2), "metrics": last}


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
    return "  ".join(f"{k.removeprefix('eval/').removesuffix('/sub_em')} {v:.3f}" for k, v in metrics.items()
                     if k.startswith("eval/") and k.endswith("/sub_em"))


def on_step(step: int, steps: int, metrics: dict, tracker) -> None:
    """One progress line on stderr per step; every metric to MLflow."""
    shown = "  ".join(f"{label} {metrics[key]:.3g}" for label, key in SHOW if key in metrics)
    if evals := shown_evals(metrics):
        shown += f"  | held-out sub_em: {evals}"
    print(f"step {step}/{steps}  {shown}", file=logs.console(), flush=True)
    if tracker is not None:
        from pipelines.track.metrics import LEARNER

        tracker.log_metrics({k: v for k, v in metrics.items() if k in LEARNER or k.startswith("eval/")}, step=step)


def add_arguments(p) -> None:
    p.add_argument("--sft", action="store_true", help="warm start: fine-tune on programmatic memory traces")
    p.add_argument("--tasks", help="task rows from `memagent data build` (default: a train split built on the fly)")
    p.add_argument("--steps", type=int, help="stop after this optimizer step (default learn.steps)")
    p.add_argument("--max-minutes", type=float, help="stop at the first step boundary after this many minutes")
    p.add_argument("--out", help="run folder, local or s3:// (default HOME/train/sft or HOME/train/rl)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--continuous", action="store_true",
                   help="train round after round on the new files of --tasks; register only a held-out gain")
    p.add_argument("--heldout", help="--continuous: the fixed held-out task rows (default: learn.task's eval split)")
    p.add_argument("--promote", action="store_true", help="--continuous: move @production to a registered version")
    p.add_argument("--once", action="store_true", help="--continuous: train on what is new, then exit")


def run(cfg: Config, args) -> None:
    from pipelines.track.tracker import command_run, create_tracker

    if args.continuous:
        from pipelines.learn import continuous

        return continuous.run(cfg, args)
    if args.heldout or args.promote or args.once:
        raise UserError("--heldout, --promote and --once go with --continuous")
    req = TrainRequest(args.sft, args.tasks, args.steps, args.max_minutes, args.out, args.resume)
    tracker = create_tracker(cfg)
    with command_run(tracker, cfg, "train", tags={"dataset": args.tasks or "built", "base_model": cfg.model.path,
                                                   "sft": req.sft}) as run_id:
        out = main(cfg, req, tracker)
        out["registered"] = runs.register(cfg, out, run_id)
    print(json.dumps(out))
