"""`memagent train`: the learner with rollout workers (RL: pipelines/learn/rl_recipe.py), or alone
on memory traces (--sft: pipelines/learn/sft_recipe.py).

    memagent train --sft --out .memagent/train/sft          # the embedded SmolLM2 recipe's warm start
    memagent train --steps 20 --out .memagent/train/rl model.path=.memagent/train/sft/best
    memagent train --resume --steps 40 --out .memagent/train/rl     # continues at step 21
    memagent train --continuous --tasks data/tasks --out .memagent/train/continuous --once  # pipelines.learn.continuous

--steps N stops after optimizer step N counted from the run's start, so a resumed run
continues to N. The last line is one JSON object: model, version, steps, checkpoint.
Without --config the settings are the SmolLM2-135M recipe (pipelines/learn/config.py); an SFT
run takes its rate, steps, threads and checkpoint interval from learn.sft. The first line on
stderr names the recipe; a model of another shape gets a notice naming the settings to review.
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


# SmolLM2-135M-Instruct's shape: the embedded recipe's rates, trained layers and budgets are its.
RECIPE_MODEL = {"num_hidden_layers": 30, "hidden_size": 576, "vocab_size": 49152}
MODEL_SETTINGS = ("learn.lr", "learn.sft.lr", "learn.freeze_layers", "learn.token_budget",
                  "agent.chunk_size", "agent.memory_budget", "agent.final_budget")


def recipe_line(cfg: Config, sft: bool, source: str | None, steps: int | None = None) -> str:
    """The one line naming the recipe a run uses: where it comes from and the settings that matter
    (steps: --steps, which wins over learn.steps)."""
    learn, a, r = cfg.learn, cfg.agent, cfg.rollout
    layers = f"layers above {learn.freeze_layers} trained" if learn.freeze_layers else "every layer trained"
    if learn.lora is not None:
        layers = f"LoRA rank {learn.lora.rank}"
    mode = (f"SFT: lr {learn.lr:g} (learn.sft.lr), {learn.sft_batch} conversations a step" if sft else
            f"RL: lr {learn.lr:g}, {r.batch_groups} groups of {r.group_size} a step, kl {learn.kl_coef:g}")
    origin = f"config '{source}'" if source else "the embedded SmolLM2-135M recipe (no --config)"
    return (f"recipe: {origin}; {mode}, {layers}, {steps or learn.steps} steps; agent chunk {a.chunk_size}, "
            f"memory {a.memory_budget}, answer {a.final_budget} tokens")


def model_notice(model_dir) -> str | None:
    """A line for a model whose shape is not the recipe's: the settings to review for it."""
    try:
        shape = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if all(shape.get(k) == v for k, v in RECIPE_MODEL.items()):
        return None
    return (f"notice: model '{model_dir.name}' is not SmolLM2-135M (the embedded recipe's); review "
            f"{', '.join(MODEL_SETTINGS)} for it")


def check_sft_overrides(overrides: list[str]) -> None:
    """An SFT run takes these from learn.sft: a learn.X=... override would be silently replaced."""
    from pipelines.learn.config import SftConfig

    for item in overrides:
        key = item.split("=", 1)[0].strip()
        if key.startswith("learn.") and key.removeprefix("learn.") in SftConfig.model_fields:
            raise UserError(f"override '{item}': an SFT run takes it from learn.sft.{key.removeprefix('learn.')} "
                            f"({key} is RL's)")


def announce(cfg: Config, sft: bool, source: str | None, steps: int | None = None) -> None:
    from pipelines import logs
    from pipelines.models import config_model_dir

    print(recipe_line(cfg, sft, source, steps), file=logs.console(), flush=True)
    if notice := model_notice(config_model_dir(cfg)):
        print(notice, file=logs.console(), flush=True)


def run(cfg: Config, args) -> None:
    from pipelines.engine import refuse_stand_in
    from pipelines.learn import runs
    from pipelines.learn import rl_recipe, sft_recipe
    from pipelines.learn.recipe import TrainRequest
    from pipelines.track.tracker import command_run, create_tracker, train_label

    refuse_stand_in(cfg.engine, "train")
    if args.sft:
        check_sft_overrides(getattr(args, "overrides", []) or [])
    cfg = cfg.model_copy(update={"learn": cfg.learn.for_mode(args.sft)})
    announce(cfg, args.sft, getattr(args, "config", None), args.steps)
    if args.continuous:
        from pipelines.learn import continuous

        return continuous.run(cfg, args)
    if args.heldout or args.promote or args.once:
        raise UserError("--heldout, --promote and --once go with --continuous")
    req = TrainRequest(args.tasks, args.steps, args.max_minutes, args.out, args.resume)
    tracker = create_tracker(cfg)
    with command_run(tracker, cfg, "train", tags={"dataset": args.tasks or "built", "base_model": cfg.model.path,
                                                   "sft": args.sft}, label=train_label(cfg, args.sft)) as run_id:
        out = (sft_recipe if args.sft else rl_recipe).main(cfg, req, tracker)
        out["registered"] = runs.register(cfg, out, run_id)
    print(json.dumps(out))
