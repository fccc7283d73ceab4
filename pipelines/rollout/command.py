"""`memagent rollout`: run rollout groups over task rows alone and write trajectories to parquet.

    memagent rollout --tasks .memagent/tasks/needle --out .memagent/rollouts/needle --limit 8 \\
        rollout.group_size=4 rollout.workers=1 agent.chunk_size=512 agent.memory_budget=64

Re-running with the same --out skips samples already written (resume). No learner runs, so
the policy never changes: no staleness bound applies. Shows the groups settled (written,
filtered, quarantined) on stderr as they come; prints the rollout metrics at the end.
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass

from pipelines.config import Config
from pipelines.errors import UserError


@dataclass(frozen=True)
class RolloutRequest:
    tasks: str
    out: str
    limit: int | None = None
    keep_all: bool = False


def command_config(cfg: Config, req: RolloutRequest) -> Config:
    update = {"max_staleness": None}
    if req.keep_all:
        update["drop_equal_rewards"] = False
    return cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update=update)})


def row_count(uri: str) -> int:
    """Rows in the task files, from parquet metadata: the total to show, without reading documents."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    from pipelines.data.manifest import list_parquet
    from pipelines.storage import resolve

    fs, path = resolve(uri)
    paths = [path] if fs.get_file_info(path).type == pafs.FileType.File else list_parquet(fs, path)
    return sum(pq.ParquetFile(p, filesystem=fs).metadata.num_rows for p in paths)


def show(bar, stats: dict) -> None:
    bar.set(stats["delivered"] + stats["filtered"] + stats["quarantined"], filtered=stats["filtered"],
            quarantined=stats["quarantined"])


def main(cfg: Config, req: RolloutRequest) -> dict:
    from pipelines.data.tasks import read_task_rows
    from pipelines.progress import Progress
    from pipelines.rollout.metrics import MetricsTally
    from pipelines.rollout.rewards import load_reward
    from pipelines.rollout.service import RolloutService
    from pipelines.rollout.writer import TrajectoryWriter

    if req.limit is not None and req.limit <= 0:
        raise UserError(f"--limit {req.limit}: must be positive")
    cfg = command_config(cfg, req)
    load_reward(cfg.rollout.reward)  # a bad reward path fails here, before any engine starts
    writer = TrajectoryWriter(req.out)
    done = writer.done_samples()
    first = next(read_task_rows(req.tasks), None)  # fails fast on a bad --tasks
    if first is None:
        raise UserError(f"task rows '{req.tasks}': no rows")
    rows = (r for r in read_task_rows(req.tasks) if r.sample_id not in done)
    rows = itertools.islice(rows, req.limit) if req.limit is not None else rows
    total = max(row_count(req.tasks) - len(done), 0)
    total = min(total, req.limit) if req.limit is not None else total
    tally, pending, written = MetricsTally(), [], 0
    with RolloutService(cfg, rows).start() as service, Progress("rollout", total, unit="group") as bar:
        start = time.perf_counter()
        while groups := service.take(1):
            pending += groups
            tally.add(groups, service.version)
            if len(pending) >= cfg.rollout.part_groups:
                writer.write(pending)
                written, pending = written + len(pending), []
            show(bar, service.stats())
        if pending:
            writer.write(pending)
            written += len(pending)
        seconds = time.perf_counter() - start
        stats = service.stats()
        show(bar, stats)
        writer.write_quarantine(service.quarantine)
    metrics = tally.metrics(stats["filtered"], seconds)
    return {"groups": written, "skipped_done": len(done), "filtered": stats["filtered"],
            "quarantined": stats["quarantined"], "retried": stats["retried"], "seconds": round(seconds, 2),
            "out": req.out, "metrics": metrics}


def print_summary(out: dict) -> None:
    print(f"wrote {out['groups']} groups to {out['out']} in {out['seconds']} s "
          f"(skipped {out['skipped_done']} already there; filtered {out['filtered']}, "
          f"quarantined {out['quarantined']}, re-run after worker loss {out['retried']})")
    for key, value in out["metrics"].items():
        print(f"  {key} = {value:.4g}")
    print(json.dumps(out))


def add_arguments(p) -> None:
    p.add_argument("--tasks", required=True, help="task rows: a parquet file or folder, local or s3://")
    p.add_argument("--out", required=True, help="folder or s3:// prefix for trajectory parts")
    p.add_argument("--limit", type=int, help="run at most this many new task rows")
    p.add_argument("--keep-all", action="store_true", help="write groups with all-equal rewards too")


def run(cfg: Config, args) -> None:
    from pipelines.track.tracker import command_run, create_tracker

    tracker = create_tracker(cfg)
    with command_run(tracker, cfg, "rollout", tags={"dataset": args.tasks, "output": args.out}):
        out = main(cfg, RolloutRequest(args.tasks, args.out, args.limit, args.keep_all))
        tracker.log_metrics(out["metrics"])
    print_summary(out)
