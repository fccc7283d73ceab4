"""What the two training recipes share (pipelines/learn/sft_recipe.py, rl_recipe.py): the
request, the checks of --steps, --out and --resume against what OUT holds, the run's progress
(its lines, metrics and curve, a step at a time) and the finish (the final model, stamped with
the agent settings it was trained with, its curve, its logged model). The CLI is
pipelines/learn/command.py; the quickstart and continuous training call a recipe's `main`."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from pipelines import logs
from pipelines.config import Config
from pipelines.errors import UserError
from pipelines.learn import runs
from pipelines.learn.checkpoint import LearnerState
from pipelines.learn.curve import load_history, merge_history, save_history
from pipelines.learn.spec import RunSpec
from pipelines.storage import absolute_uri, exists


@dataclass(frozen=True)
class TrainRequest:
    tasks: str | None = None
    steps: int | None = None
    max_minutes: float | None = None
    out: str | None = None
    resume: bool = False
    heldout: str | None = None  # rows RL scores every learn.eval_every steps (default: learn.task's eval split)


@dataclass(frozen=True)
class Checked:
    """A run's folder and bounds, checked against what the folder holds."""

    out: str  # absolute, local or s3://
    steps: int  # the last optimizer step, counted from the run's start
    model_dir: str  # the base model's folder on the driver (its tokenizer, its fingerprint)
    prior: LearnerState | None  # the newest checkpoint in OUT (resuming), else None


def steps_of(cfg: Config, req: TrainRequest) -> int:
    steps = req.steps or cfg.learn.steps
    if steps <= 0:
        raise UserError(f"--steps {steps}: must be positive")
    return steps


def check_out(cfg: Config, req: TrainRequest, steps: int, kind: str) -> Checked:
    """--out, --resume and --steps against the run OUT holds (default HOME/train/KIND): a run there
    needs --resume, --resume needs one, and a resume can neither go back nor start from a policy
    that is gone. A checkpoint index cut by a stop is repaired here (one line says so)."""
    from pipelines.models import config_model_dir

    model_dir = str(config_model_dir(cfg))
    out = absolute_uri(req.out or str(cfg.home_path / "train" / kind))
    prior = runs.latest_state(out, model_dir)
    if prior is not None and not req.resume:
        raise UserError(f"out '{out}': holds a run at step {prior.step}; pass --resume, or another --out")
    if prior is None and req.resume:
        raise UserError(f"--resume: no checkpoint under '{out}'")
    if prior is not None and steps < prior.step:
        raise UserError(f"--steps {steps}: the run in '{out}' is already at step {prior.step}")
    if prior is not None and prior.weights and not exists(f"{prior.weights}/config.json"):
        raise UserError(f"checkpoint of step {prior.step} in '{out}': its policy '{prior.weights}' is gone")
    return Checked(out, steps, model_dir, prior)


def training_rows(cfg: Config, req: TrainRequest, checked: Checked, need_evidence: bool) -> str:
    """--tasks, else learn.task's train split built into OUT; checked (SFT needs each row's evidence)."""
    tasks = req.tasks or runs.build_split(cfg, checked.out, checked.model_dir)
    runs.check_tasks(tasks, need_evidence=need_evidence)
    return tasks


def run_spec(cfg: Config, req: TrainRequest, checked: Checked, tasks: str, sft: bool) -> RunSpec:
    """What the learner workers are handed: the folder, model, bounds, rows and where to resume."""
    from pipelines.models import absolute_ref

    minutes = req.max_minutes or cfg.learn.max_minutes
    start = runs.repair_index(checked.out)
    if start is not None:
        print(f"resuming from {start} (step {checked.prior.step}): Ray Train's checkpoint index was cut or never "
              "written (a stop or an S3 outage while it was being written)", file=logs.console(), flush=True)
    return RunSpec(checked.out, absolute_ref(cfg.model.path), checked.steps,
                   time.time() + 60 * minutes if minutes else None, sft, tasks, start_from=start)


class Progress:
    """Each step as it lands: its curve point saved (before its line: a stop right after the line
    keeps the point), its progress line and metrics, then watch(step, metrics)."""

    def __init__(self, checked: Checked, tracker, watch: Callable[[int, dict], None] | None):
        self.out, self.steps, self.tracker, self.watch = checked.out, checked.steps, tracker, watch
        self.history = load_history(checked.out) if checked.prior else []  # the steps before a resume
        self.last: dict[str, float] = {}  # the newest held-out figures, for the logged model
        self.started = time.perf_counter()

    def __call__(self, step: int, m: dict) -> None:
        self.history = merge_history(self.history, [(step, {k: v for k, v in m.items()
                                                              if isinstance(v, (int, float))})])
        save_history(self.out, self.history)
        on_step(step, self.steps, m, self.tracker)
        self.last.update({k: v for k, v in m.items() if k.startswith("eval/") or k.startswith("train/heldout_")})
        if self.watch is not None:
            self.watch(step, m)


def final_state(checked: Checked) -> LearnerState:
    state = runs.latest_state(checked.out, checked.model_dir)
    if state is None:
        raise UserError(f"out '{checked.out}': the run ended before its first checkpoint")
    return state


def finish(cfg: Config, run: RunSpec, state: LearnerState, result, progress: Progress, tracker) -> dict:
    """The final model, stamped (ask, serve, batch and eval run it with the agent settings it was
    trained with), the curve, the logged model (registering it later uploads its files into it);
    the run's summary."""
    from pipelines.models.settings import stamp

    model = runs.final_model(run.out, state, run.sft)
    stamp(model, cfg.agent)
    log_curve(progress.history, run.out, run.sft, tracker)
    if tracker is not None:
        from pipelines.track.redact import flatten
        from pipelines.track.tracker import short_model

        name = f"{'sft' if run.sft else 'rl'}-{short_model(cfg.model.path)}"
        tracker.log_model(name, model, metrics=progress.last,
                          params=flatten({"agent": cfg.agent.model_dump(mode="json")}))
    return {"model": model, "steps": state.step, "version": state.version, "checkpoint": result.checkpoint.path,
            "tasks": run.tasks, "minutes": round((time.perf_counter() - progress.started) / 60, 2),
            "metrics": progress.last}


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
        ("heldout", "train/heldout_loss"), ("choice", "train/heldout_choice"), ("kl", "train/kl"),
        ("clip", "train/clip_high"), ("resp", "rollout/response_tokens"), ("mem", "rollout/memory_tokens"),
        ("stale", "rollout/staleness"), ("tok/s", "train/tokens_per_s"), ("push_s", "train/weight_push_s"))


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
