"""Driver-side glue for one learner run: the TorchTrainer, its datasets, and a progress board.

Ray Train runs the loop on its workers; the driver only builds the trainer, streams the SFT
traces in as Ray Datasets, and follows the run through a small board actor that rank 0
writes each step's metrics to (for the progress display and MLflow).

This module is what the driver, the board actor and the controller load, so it imports no
torch or transformers: `train_loop` here hands over to pipelines.learn.trainer on the workers,
the only processes that need it (importing it costs seconds of CPU a process).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import ray

from pipelines import logs, runtime
from pipelines.errors import UserError
from pipelines.learn.spec import RunSpec, user_error


def train_loop(config: dict) -> None:
    """Each Ray Train worker's entry: the learner's loop (pipelines.learn.trainer)."""
    from pipelines.learn import trainer

    trainer.train_loop(config)


class Board:
    """Each step's metrics as rank 0 reports them, read by the driver."""

    def __init__(self):
        self.rows: list[tuple[int, dict]] = []
        self.notes: list[str] = []  # status lines between steps (RL waiting for a batch)
        self.error: str | None = None  # a learner worker's bad-input message

    def put(self, step: int, metrics: dict) -> None:
        self.rows.append((step, metrics))

    def note(self, line: str) -> None:
        self.notes.append(line)

    def fail(self, message: str) -> None:
        self.error = self.error or message

    def since(self, n: int, n_notes: int = 0) -> tuple[list[tuple[int, dict]], list[str], str | None]:
        return self.rows[n:], self.notes[n_notes:], self.error


def data_config(lc):
    """Ray Data's budget for the SFT traces: by default it excludes the learner's CPUs from the
    cluster, which on a small machine leaves it none (the read never starts); the trace map is
    light next to a training step, so it may use a share of the learner's CPU. Order is kept,
    so a resumed run skips exactly the batches it had trained on."""
    from ray.data import ExecutionOptions, ExecutionResources
    from ray.train import DataConfig

    return DataConfig(execution_options=ExecutionOptions(
        exclude_resources=ExecutionResources.zero(), preserve_order=True))


def storage_of(out: str) -> tuple[str, Any]:
    """(storage_path, filesystem) for RunConfig: S3 through the project's endpoint settings."""
    from pipelines.storage import is_s3, s3_filesystem

    if is_s3(out):
        return out[len("s3://"):], s3_filesystem()
    return out, None


def fit(cfg, run: RunSpec, cursor: dict, datasets: dict | None, on_step: Callable[[int, dict], None],
        started: Any = None):
    """Run the TorchTrainer to its end; on_step(step, metrics) for every step as it lands.
    started: a reference to something starting beside the learner (the rollout hub's workers,
    loading while Ray Train starts its workers); its failure ends the run with its own error."""
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    # Read by the controller TorchTrainer starts (Ray Train passes it on); a user's own wins.
    os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", str(cfg.learn.report_poll_s))
    board = ray.remote(Board).options(num_cpus=0).remote()
    run = RunSpec(**{**run.__dict__, "board": board})
    path, fs = storage_of(run.out)
    lc = cfg.learn
    cfg = runtime.portable(cfg)  # for nodes without MEMAGENT_HOME, and workers with another cwd
    trainer = TorchTrainer(
        train_loop, train_loop_config={"cfg": cfg, "run": run, "cursor": cursor},
        scaling_config=ScalingConfig(num_workers=lc.num_workers, use_gpu=lc.use_gpu,
                                     resources_per_worker={"CPU": lc.cpus_per_worker, **lc.worker_resources}),
        run_config=RunConfig(storage_path=path, storage_filesystem=fs, name="learner",
                             failure_config=FailureConfig(max_failures=lc.max_failures),
                             checkpoint_config=CheckpointConfig(num_to_keep=2)),
        datasets=datasets, dataset_config=data_config(lc) if datasets else None)
    box: dict = {}
    thread = threading.Thread(target=lambda: box.update(result=_fit(trainer)), daemon=True)
    thread.start()
    seen = noted = 0
    while True:
        done = not thread.is_alive()  # before the read, so the read sees every row
        if started is not None and (done or ray.wait([started], timeout=0)[0]):
            ray.get(started)  # a start failure is this run's error, before the learner's own
            started = None
        rows, notes, error = ray.get(board.since.remote(seen, noted))
        for line in notes:
            print(line, file=logs.console(), flush=True)
            noted += 1
        for step, metrics in rows:
            on_step(step, metrics)
            seen += 1
        if error is not None:  # bad input: Ray Train would only retry it; the run ends here
            raise UserError(error)
        if done:
            break
        thread.join(timeout=1.0)
    result = box.get("result")
    if isinstance(result, BaseException):
        raise user_error(result) or result
    return result


def _fit(trainer) -> Any:
    try:
        return trainer.fit()
    except BaseException as e:  # noqa: BLE001 - re-raised in the driver's thread
        return e
