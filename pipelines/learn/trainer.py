"""The learner on Ray Train: each TorchTrainer worker runs `train_loop` (gloo on CPU, NCCL on GPU).

RL: rank 0 takes each step's complete groups and their rollout metrics from the rollout source
(pipelines.rollout.source: the hub actor, reached over Ray, not through the driver) and shares
them with the other ranks, so ranks stay in step;
each rank computes its share of the conversations with the whole batch's loss weights, and
summed gradients give the full-batch step. After the step, rank 0 publishes the policy
(OUT/weights/vN) and hands it to the source without waiting for the workers to load it.
SFT: the traces stream in as a Ray Dataset shard (Ray Data feeding Ray Train).

Restarts are Ray Train's: a checkpoint (pipelines.learn.checkpoint) goes with every report
that carries one, `FailureConfig` restarts a killed worker, which resumes from it.
"""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import ray
import torch

from pipelines.errors import UserError
from pipelines.learn import checkpoint as ckpt
from pipelines.learn.batch import rl_batch
from pipelines.learn.config import LearnConfig
from pipelines.learn.policy import Policy
from pipelines.learn.sftdata import CHOICE_TOKENS, Heldout, heldout_seqs, seq_of
from pipelines.learn.spec import RunSpec, user_error
from pipelines.learn.weights import FolderPublisher, save_hf_folder
from pipelines.rollout.source import Batch, Evaluation
from pipelines.storage import full_disk, no_space, staged_dir


def train_loop(config: dict) -> None:
    cfg, run = config["cfg"], config["run"]
    try:
        _train_loop(config, cfg, run)
    except Exception as e:
        # Bad input or a full disk is not a crash: the driver ends the run with its one line (no
        # restarts: they would fail the same way).
        err = user_error(e) or (no_space(run.out) if full_disk(e) else None)
        if run.board is not None and err is not None:
            ray.get(run.board.fail.remote(str(err)))
        raise


def _train_loop(config: dict, cfg, run: RunSpec) -> None:
    from ray import train

    from pipelines.models import config_model_dir

    run = replace(run, model_dir=str(config_model_dir(cfg, run.model)))  # fetched into this node's home
    ctx = train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    torch.manual_seed(cfg.learn.seed + rank)
    torch.set_num_threads(cfg.learn.threads or max(1, math.ceil(cfg.learn.cpus_per_worker)))
    if cfg.learn.cpu_cores:
        pin(cfg.learn.cpu_cores)
    fsdp = cfg.learn.strategy == "fsdp2" and world > 1
    policy = Policy(run.model_dir, cfg.learn, temperature=cfg.rollout.temperature,
                    sync=grad_sync(world, summed=not run.sft) if world > 1 and not fsdp else None,
                    fsdp=("mean" if run.sft else "sum") if fsdp else None, device=worker_device(cfg.learn.use_gpu))
    fingerprint = ckpt.model_fingerprint(run.model_dir)
    state = ckpt.LearnerState(fingerprint=fingerprint, cursor=config.get("cursor") or {})
    restored = train.get_checkpoint() or stand_in(run.start_from)
    if restored is not None:
        with restored.as_directory() as d:
            state = ckpt.load(Path(d), policy, fingerprint)
    if run.sft:
        sft_loop(cfg, run, policy, state, rank, world)
    else:
        rl_loop(cfg.learn, run, policy, state, rank, world)


def stand_in(uri: str | None):
    """The checkpoint at URI (local or s3://) as Ray Train's Checkpoint; None for None."""
    from ray.train import Checkpoint

    from pipelines.storage import resolve

    if uri is None:
        return None
    fs, path = resolve(uri)
    return Checkpoint(path, filesystem=fs)


def worker_device(use_gpu: bool) -> torch.device:
    """This worker's GPU (Ray Train assigned it and made it current), else the CPU."""
    if not use_gpu:
        return torch.device("cpu")
    from ray.train.torch import get_device

    return get_device()


def pin(cores: tuple[int, ...]) -> None:
    """Every thread of this process (torch's pool included) on these cores."""
    import os

    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except OSError as e:
            raise UserError(f"learn.cpu_cores={list(cores)}: {e.strerror}") from None


def grad_sync(world: int, summed: bool):
    """Sum (RL: each rank's loss already carries whole-batch weights) or average (SFT) gradients."""
    import torch.distributed as dist

    def sync(model: torch.nn.Module) -> None:
        for p in model.parameters():
            if p.requires_grad:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                dist.all_reduce(p.grad)
                if not summed:
                    p.grad /= world
    return sync


def share(obj: Any, world: int) -> Any:
    """Rank 0's object on every rank."""
    if world == 1:
        return obj
    import torch.distributed as dist

    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def out_of_time(run: RunSpec) -> bool:
    return run.deadline is not None and time.time() > run.deadline


def rl_loop(lc: LearnConfig, run: RunSpec, policy: Policy, state: ckpt.LearnerState, rank: int,
            world: int) -> None:
    source = run.source
    publisher = FolderPublisher(run.out, run.model_dir, lc.keep_versions, policy.frozen_names()) if rank == 0 else None
    keep_from = state.version
    # a source that died and was restarted starts from this checkpoint (rollout/hub.py)
    if rank == 0 and source.resume(state.cursor, state.version, state.weights):
        ray.get(run.board.note.remote(f"the rollout hub was restarted: rollouts resume from the checkpoint of "
                                      f"step {state.step}"))
    while state.step < run.steps and not share(out_of_time(run), world):
        step = state.step + 1
        got = share(take_batch(lc, run, step, state.version) if rank == 0 else None, world)
        if not got.groups:
            break
        batch, fresh = rl_batch(got.groups, state.version, lc.norm_std)
        m = policy.step(batch, list(range(rank, len(batch), world)), fresh=fresh)
        metrics = {**learner_metrics(m), **got.metrics, "rollout/wait_s": got.wait_s}
        state.step = step
        if step % lc.push_every == 0 or step == run.steps:
            state.version, start = step, time.perf_counter()
            weights = policy.weights() if policy.sharded or rank == 0 else None  # sharded: collective
            if rank == 0:
                keep_from = registered_version(run, keep_from)
                state.weights = publisher.publish(policy.model, step, keep_from, weights)
                source.publish(state.weights, step)
                metrics["train/weight_push_s"] = time.perf_counter() - start
        if rank == 0:
            if run.eval_tasks and lc.eval_every and step % lc.eval_every == 0:
                source.evaluate(step, run.eval_tasks, lc.eval_n)
            metrics.update(evaluation_metrics(source.evaluations()))
            state.cursor = source.cursor(step)
            metrics.update({"rollout/" + k: float(v) for k, v in source.counters().items()
                            if k in ("filtered", "stale", "kept", "delivered")})
        report(lc, run, policy, state, metrics, rank)


def take_batch(lc: LearnConfig, run: RunSpec, step: int, version: int) -> Batch:
    """Step `step`'s batch from the source. While none is ready, a status line every learn.status_s
    (groups generated, dropped for equal rewards, their mean reward); a UserError once
    learn.max_dropped_groups groups in a row were dropped: RL without signal would wait forever."""
    last = time.monotonic()
    while (batch := run.source.next_batch(step, version, TAKE_POLL_S)) is None:
        stats = run.source.counters()
        if time.monotonic() - last >= lc.status_s:
            ray.get(run.board.note.remote(waiting_line(step, stats)))
            last = time.monotonic()
        check_signal(stats, lc.max_dropped_groups)
    return batch


TAKE_POLL_S = 5.0  # how often a waiting learner looks at the hub's counters


def waiting_line(step: int, stats: dict) -> str:
    dropped = stats["filtered"]
    mean = stats["filtered_reward"] / dropped if dropped else 0.0
    return (f"step {step}: waiting for a batch: {stats['started']} groups generated, {stats['kept']} kept, "
            f"{dropped} dropped for equal rewards (mean reward {mean:.2f}), {stats['filtered_in_a_row']} in a row")


def check_signal(stats: dict, limit: int) -> None:
    """One line naming the cause and the remedy once `limit` groups in a row had equal rewards."""
    if stats["filtered_in_a_row"] < limit:
        return
    mean = stats["filtered_reward"] / stats["filtered"]
    kind = "all right" if mean >= 0.999 else "all wrong" if mean <= 0.001 else "all equal"
    remedy = ("rows this easy teach nothing: harder or longer rows" if kind == "all right" else
              "a model that never earns a reward learns nothing from RL: SFT first (`memagent train --sft`), "
              "or easier rows")
    raise UserError(f"RL without signal: {stats['filtered_in_a_row']} groups in a row had equal rewards "
                    f"({kind}, mean reward {mean:.2f}; learn.max_dropped_groups={limit}): {remedy}")


def registered_version(run: RunSpec, default: int) -> int:
    """The policy version of the newest checkpoint in the run's index: what a resume restarts the
    rollout workers on. Ray Train's controller registers a reported checkpoint some time after
    `train.report` returns (seconds under load), so the worker cannot know it any other way;
    `default` while the index is being rewritten."""
    from pipelines.learn.runs import latest_state

    try:
        state = latest_state(run.out, run.model_dir)
    except UserError:
        return default
    return default if state is None else state.version


def evaluation_metrics(done: list[Evaluation]) -> dict[str, float]:
    """eval/{task}/strict of the held-out evaluations finished since the last step
    (each names the policy version it scored; the newest wins if several landed)."""
    out: dict[str, float] = {}
    for _, version, scores, n in done:
        out.update({f"eval/{key}/strict": v for key, v in scores.items()})
        out.update({"eval/version": float(version), "eval/n": float(n)})
    return out


def learner_metrics(m: dict[str, float]) -> dict[str, float]:
    """train/tokens_per_s: every token the step read (prompts and responses; this rank's)."""
    out = {f"train/{k}": v for k, v in m.items() if k not in ("tokens", "seq_tokens", "step_s")}
    out["train/tokens_per_s"] = m["seq_tokens"] / max(m["step_s"], 1e-9)
    out["train/step_s"] = m["step_s"]
    return out


def report(lc: LearnConfig, run: RunSpec, policy: Policy, state: ckpt.LearnerState, metrics: dict, rank: int,
           force_checkpoint: bool = False) -> None:
    """Every rank reports; rank 0 attaches a checkpoint every `checkpoint_every` steps (and at the end)."""
    from ray import train
    from ray.train import Checkpoint

    metrics = {**metrics, "step": state.step, "version": state.version, "time": time.time()}
    save = force_checkpoint or state.step % lc.checkpoint_every == 0 or state.step >= run.steps
    if rank == 0 and run.board is not None:
        run.board.put.remote(state.step, metrics)
    blob = policy.training_state() if save and (policy.sharded or rank == 0) else None  # sharded: collective
    if save and rank == 0:
        with tempfile.TemporaryDirectory(prefix="memagent-ckpt-") as d:
            ckpt.save(Path(d), blob, state)
            train.report(metrics, checkpoint=Checkpoint.from_directory(d), checkpoint_upload_fn=ckpt.upload_to(run.out))
        if run.source is not None:
            run.source.ack(state.step)
    else:
        train.report(metrics)


def sft_loop(cfg, run: RunSpec, policy: Policy, state: ckpt.LearnerState, rank: int, world: int) -> None:
    """Fine-tune on the trace conversations. At every checkpoint (and at the end) the held-back
    slice is scored and rank 0 keeps the best model so far as OUT/best (sharded, every rank
    takes part in both)."""
    from ray import train

    everyone = policy.sharded
    heldout = heldout_seqs(run.tasks, run.model_dir, cfg) if rank == 0 or everyone else Heldout([], [])
    done = state.cursor.get("batches", 0)  # batches of the run consumed before a restart
    shard, seen, metrics = train.get_dataset_shard("train"), 0, None
    for epoch in range(cfg.learn.sft_epochs):
        for rows in shard.iter_batches(batch_size=cfg.learn.sft_batch, batch_format="pandas"):
            seen += 1
            if seen <= done:
                continue
            if state.step >= run.steps or share(out_of_time(run), world):
                break
            m = policy.step([seq_of(r) for r in rows.to_dict("records")], sft=True)
            state.step, state.cursor = state.step + 1, {"batches": seen, "epoch": epoch}
            metrics = learner_metrics(m)
            due = state.step % cfg.learn.checkpoint_every == 0 or state.step >= run.steps
            if due and (rank == 0 or everyone):
                keep_best(run, policy, state, heldout, metrics, rank)
            report(cfg.learn, run, policy, state, metrics, rank)
            metrics = None if due else metrics
    if metrics is not None:  # the data ran out (or the clock) between checkpoints
        if rank == 0 or everyone:
            keep_best(run, policy, state, heldout, metrics, rank)
        report(cfg.learn, run, policy, state, metrics, rank, force_checkpoint=True)


def keep_best(run: RunSpec, policy: Policy, state: ckpt.LearnerState, heldout: Heldout, metrics: dict,
              rank: int = 0) -> None:
    """OUT/best: the model of lowest held-back loss so far; the latest one when no row is held back.
    Sharded, every rank calls it (the loss and the weights are collective); rank 0 writes."""
    loss = None
    if heldout.seqs:
        loss, choice = policy.eval_sft(heldout.seqs, heldout.choices, CHOICE_TOKENS)
        metrics["train/heldout_loss"] = loss
        if heldout.choices:
            metrics["train/heldout_choice"] = choice
    if loss is None or state.best_loss is None or loss < state.best_loss:
        state.best_loss = loss
        weights = policy.weights()
        if rank == 0:
            with staged_dir(f"{run.out}/best") as dest:
                save_hf_folder(policy.model, run.model_dir, dest, weights)

