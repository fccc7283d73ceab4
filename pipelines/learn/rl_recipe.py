"""`memagent train`: Multi-Conv DAPO with rollout workers. The rollout hub (an actor:
pipelines/rollout/hub.py) runs the memory agent on the training rows, pass after pass, and
hands each optimizer step its complete groups; the learner (Ray Train: pipelines/learn/
launch.py -> trainer.rl_loop) takes them as a typed RolloutSource, steps, publishes each
policy to OUT/weights/vN and hands it to the workers without waiting. Every learn.eval_every
steps the hub scores the current policy on held-out rows (pipelines.eval.heldout) beside
training.

    memagent train --steps 20 --out .memagent/train/rl model.path=.memagent/train/sft/best
    memagent train --resume --steps 40 --out .memagent/train/rl     # continues at step 21

The recipe reads top to bottom: check the run, its data, the rollout hub, the trainer, the
finish.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pipelines.config import Config
from pipelines.errors import UserError
from pipelines.learn.recipe import (Checked, Progress, TrainRequest, check_out, final_state, finish, log_inputs,
                                    run_spec, steps_of, training_rows)
from pipelines.rollout.config import RolloutConfig
from pipelines.rollout.source import HubSource


def main(cfg: Config, req: TrainRequest, tracker=None, watch: Callable[[int, dict], None] | None = None,
         workers: list | None = None) -> dict:
    """One RL run to req.steps (default learn.steps); watch(step, metrics) beside each progress
    line. workers: rollout actors already holding the run's starting policy, to use and leave
    running (default: started for the run and stopped after it). Returns the final model, its
    step and version, checkpoint, task rows, minutes and last held-out figures."""
    from pipelines import runtime
    from pipelines.learn.launch import fit
    from pipelines.learn.weights import FolderPublisher

    steps = steps_of(cfg, req)
    check_rollouts(cfg.rollout)
    checked = check_out(cfg, req, steps, "rl")
    tasks = training_rows(cfg, req, checked, need_evidence=False)
    run = run_spec(cfg, req, checked, tasks, sft=False)
    runtime.connect()
    tasks = teach_filter(cfg, tasks, checked, workers)
    heldout = heldout_rows(cfg, req, checked)
    log_inputs(cfg, tracker, tasks, heldout)
    source, started = start_source(cfg, tasks, checked, workers)
    run = replace(run, tasks=tasks, source=source, eval_tasks=heldout)
    progress = Progress(checked, tracker, watch)
    try:
        result = fit(cfg, run, {}, None, progress, started=started)
    finally:
        source.close()
    state = final_state(checked)
    # while the run lasted, versions its index might still name were kept too
    FolderPublisher(checked.out, checked.model_dir, cfg.learn.keep_versions).prune(state.version)
    return finish(cfg, run, state, result, progress, tracker)


def check_rollouts(r: RolloutConfig) -> None:
    """What the rollout workers would only find once started: a reward that does not import, and
    a cut sampling distribution (the ratio would divide by it: the learner scores the full one)."""
    from pipelines.rollout.rewards import load_reward

    load_reward(r.reward)
    if r.top_p < 1.0:
        raise UserError(f"rollout.top_p={r.top_p}: training samples with top_p=1 (the learner "
                        "scores the full distribution)")


def teach_filter(cfg: Config, tasks: str, checked: Checked, workers: list | None) -> str:
    """The rows that teach (learn.pass_filter: pipelines/learn/teach.py), or `tasks` without one;
    a resume reads the kept rows back."""
    from pipelines.learn import teach
    from pipelines.storage import exists

    if cfg.learn.pass_filter is None and not exists(teach.tasks_uri(checked.out)):
        return tasks
    return teach.filtered(cfg, tasks, checked.out, checked.steps, workers, resuming=checked.prior is not None)


def heldout_rows(cfg: Config, req: TrainRequest, checked: Checked) -> str:
    """The rows scored every learn.eval_every steps: --heldout, else learn.task's eval split built
    into OUT; none when learn.eval_every is 0."""
    from pipelines.learn import runs

    if not cfg.learn.eval_every:
        return ""
    return req.heldout or runs.build_split(cfg, checked.out, checked.model_dir, "eval")


def start_source(cfg: Config, tasks: str, checked: Checked, workers: list | None) -> tuple[HubSource, Any]:
    """The rollout hub on `tasks`, from the checkpoint's policy and data cursor when resuming, and
    the reference that resolves once its workers are loaded (rollout.hub.start_hub)."""
    from pipelines.eval.heldout import task_scores
    from pipelines.rollout.hub import start_hub

    prior = checked.prior
    hub, started = start_hub(cfg, tasks, prior.version if prior else 0, prior.weights if prior else None,
                             prior.cursor if prior else None, workers=workers, score=task_scores)
    return HubSource(hub), started
