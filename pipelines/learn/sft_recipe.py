"""`memagent train --sft`: the warm start. The learner fine-tunes on programmatic memory traces
of task rows (the loop's exact prompts, responses written from each row's evidence: pipelines/
learn/traces.py), streamed in as a Ray Dataset, and keeps the model of lowest held-back loss as
OUT/best, the model RL starts from.

    memagent train --sft --out .memagent/train/sft       # the embedded SmolLM2 recipe's warm start

The recipe reads top to bottom: check the run, its data, the trainer (Ray Train:
pipelines/learn/launch.py -> trainer.sft_loop), the finish.
"""

from __future__ import annotations

from collections.abc import Callable

from pipelines.config import Config
from pipelines.learn.recipe import (Progress, TrainRequest, check_out, final_state, finish, log_inputs, run_spec,
                                    steps_of, training_rows)


def main(cfg: Config, req: TrainRequest, tracker=None, watch: Callable[[int, dict], None] | None = None) -> dict:
    """One SFT run to req.steps (default learn.steps; cfg.learn already holds learn.sft's
    settings: LearnConfig.for_mode); watch(step, metrics) beside each progress line. Returns
    the final model, its step, checkpoint, task rows and minutes."""
    from pipelines import runtime
    from pipelines.learn.launch import fit
    from pipelines.learn.sftdata import sft_datasets

    checked = check_out(cfg, req, steps_of(cfg, req), "sft")
    tasks = training_rows(cfg, req, checked, need_evidence=True)
    run = run_spec(cfg, req, checked, tasks, sft=True)
    runtime.connect()
    log_inputs(cfg, tracker, tasks, None)
    progress = Progress(checked, tracker, watch)
    result = fit(cfg, run, {}, sft_datasets(tasks, run.model, cfg), progress)
    return finish(cfg, run, final_state(checked), result, progress, tracker)
