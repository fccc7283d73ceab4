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

from pipelines.config import Config
from pipelines.errors import UserError


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
    from pipelines.learn import runs
    from pipelines.learn.job import TrainRequest, main
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
