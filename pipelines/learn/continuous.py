"""`memagent train --continuous`: train on task files as they arrive; register a version only
when it beats @production on a fixed held-out set.

    memagent train --continuous --tasks s3://bucket/tasks --out s3://bucket/runs/continuous --once
    memagent train --continuous --sft --tasks data/tasks --heldout data/heldout --out runs/c --promote

Rounds. A round trains on the parquet files of --tasks that no finished round consumed (the set
of consumed files is the cursor, in OUT/continuous.json), their rows streamed into
OUT/rounds/NNN/tasks. It is an ordinary `memagent train` run in OUT/rounds/NNN (RL, or --sft),
starting from the previous round's model (round 1: model.path), so training carries on. Then
the gate (pipelines/learn/gate.py) scores it and the current @production version (none yet:
the starting model) on the same held-out rows (the strict score) and prints the paired gain with
its 95% interval; only a gain whose interval's lower bound is above learn.continuous.margin is
registered (gate.verdict), as @candidate (@production when the name has none yet, as the
quickstart does); --promote moves @production to it. In this mode the gate replaces the
learner's register-every-run. One pool of rollout workers serves every evaluation and RL round
of the process (policies loaded, engines kept).

Restarts. A round (its files, base model and a random id) is recorded before it trains; its
training result, its verdict and its version as each is done; the cursor moves when it ends;
each write replaces the file whole. A restarted process resumes the unfinished round (from its
checkpoint, on the same files: no row is lost or trained twice) and skips what was done. The
version's run is tagged with the round's id before the version is created, and a round about
to register first looks for a version of a run so tagged: a crash between registering and
recording never registers twice.

--once trains on what is new and exits (the nightly RayCronJob); without it the folder is
listed every learn.continuous.poll_s seconds while nothing is new, until --max-minutes (a round
that bound cuts resumes on the next start). New rows come as new files, each appearing whole
(moved in, or uploaded), e.g. `memagent data build --out FOLDER/batch-0002.parquet`; a file is
known by its name, so one rewritten in place is not seen again. The last line is one JSON
object: out, the rounds this process finished, production.
"""

from __future__ import annotations

import itertools
import json
import math
import time
import uuid
from dataclasses import dataclass

from pipelines import logs
from pipelines.config import Config
from pipelines.errors import UserError
from pipelines.learn.gate import decide, register, report, with_model
from pipelines.rollout.pool import Pool
from pipelines.storage import absolute_uri, exists, file_info, resolve, write_whole
from pipelines.track.tracker import nested_under, stage

STATE = "continuous.json"


@dataclass(frozen=True)
class Request:
    tasks: str
    out: str | None = None
    sft: bool = False
    promote: bool = False
    once: bool = False
    max_minutes: float | None = None  # the whole loop's bound
    steps: int | None = None  # per round (default learn.continuous.steps)


def main(cfg: Config, req: Request, tracker=None) -> dict:
    from pipelines.models.registry import alias_version
    from pipelines.track import NullTracker

    if not cfg.track.enabled:
        raise UserError("train --continuous: registers versions in MLflow; track.enabled=false turns that off")
    tracker = tracker or NullTracker()
    out = absolute_uri(req.out or str(cfg.home_path / "train" / "continuous"))
    state = load_state(cfg, out, absolute_uri(req.tasks))
    before = len(state["rounds"])
    deadline = time.time() + 60 * req.max_minutes if req.max_minutes else None
    pool = rollout_pool(cfg)
    try:
        loop(cfg, req, state, out, tracker, deadline, pool)
    finally:
        pool.close()
    production = alias_version(cfg.learn.registry_name, "production", cfg.home_path, cfg.track)
    return {"out": out, "rounds": [summary(r) for r in state["rounds"][before:]],
            "production": None if production is None else f"models:/{cfg.learn.registry_name}/{production}"}


def rollout_pool(cfg: Config) -> Pool:
    """The one pool of rollout workers for the process's evaluations and RL rounds, sized by the
    rollout section alone: RL's scheduler plans for rollout.loops_per_worker loops per engine."""
    return Pool(cfg)


def loop(cfg: Config, req: Request, state: dict, out: str, tracker, deadline: float | None, pool: Pool) -> None:
    """Rounds while there are new files; between them a listing every poll_s (--once: none)."""
    poll, waiting = cfg.learn.continuous.poll_s, False
    while deadline is None or time.time() < deadline:
        rnd = state["current"] or next_round(cfg, state, out)
        if rnd is None:
            if req.once:
                break
            if not waiting:
                print(f"continuous: waiting for new task files in {state['tasks']}", file=logs.console(), flush=True)
            waiting = True
            time.sleep(poll if deadline is None else max(0.0, min(poll, deadline - time.time())))
            continue
        waiting = False
        state["current"] = rnd
        save_state(out, state)
        if not run_round(cfg, req, state, out, tracker, deadline, pool):
            break


def load_state(cfg: Config, out: str, tasks: str) -> dict:
    """OUT's record (a new one for a new OUT); the held-out rows fixed at the first start."""
    cc = cfg.learn.continuous
    state = read_state(out) or {"version": 1, "tasks": tasks, "consumed": [], "rounds": [], "current": None,
                                "scores": {}}
    if state["tasks"] != tasks:
        raise UserError(f"out '{out}': continuous training of '{state['tasks']}', not '{tasks}'; use another --out")
    heldout = absolute_uri(cc.heldout) if cc.heldout else state.get("heldout")
    if state.get("heldout") and heldout != state["heldout"]:
        raise UserError(f"--heldout '{heldout}': the rounds in '{out}' were scored on '{state['heldout']}'; "
                        "use another --out")
    if heldout is None:
        from pipelines.learn.runs import build_split
        from pipelines.models import config_model_dir

        heldout = build_split(cfg, out, str(config_model_dir(cfg)), "eval")
    state["heldout"] = heldout
    return state


def save_state(out: str, state: dict) -> None:
    """Replaced whole: a local file by rename, an S3 object by its completed upload."""
    write_whole(f"{out}/{STATE}", json.dumps(state, indent=1).encode())


def read_state(out: str) -> dict | None:
    fs, path = resolve(f"{out}/{STATE}")
    if not exists(f"{out}/{STATE}"):
        return None
    with fs.open_input_stream(path) as f:
        try:
            return json.loads(f.read().decode())
        except ValueError:
            raise UserError(f"continuous state '{out}/{STATE}': not valid JSON") from None


def listing(uri: str) -> list[str]:
    """The task files there now; a folder with none yet (or a prefix with no objects) is no error."""
    import pyarrow.fs as pafs

    from pipelines.data.manifest import list_parquet
    from pipelines.data.tasks import task_files

    info = file_info(uri)
    if info.type == pafs.FileType.NotFound or (info.type == pafs.FileType.Directory
                                               and not list_parquet(*resolve(uri))):
        return []
    return task_files(uri)


def next_round(cfg: Config, state: dict, out: str) -> dict | None:
    consumed = set(state["consumed"])
    new = [f for f in listing(state["tasks"]) if f not in consumed]
    if not new:
        return None
    n = len(state["rounds"]) + 1
    base = state["rounds"][-1]["model"] if state["rounds"] else cfg.model.path
    return {"n": n, "key": uuid.uuid4().hex, "files": new, "base": base, "folder": f"{out}/rounds/{n:03d}"}


def run_round(cfg: Config, req: Request, state: dict, out: str, tracker, deadline: float | None, pool: Pool) -> bool:
    """The current round to its end; False if the deadline cut it (it resumes on the next start)."""
    rnd = state["current"]
    if "rows" not in rnd:  # the new files' rows, (re)written whole, then recorded
        rnd["rows"] = copy_rows(rnd["files"], f"{rnd['folder']}/tasks")
        check_heldout(state["heldout"], f"{rnd['folder']}/tasks", rnd["files"])
        save_state(out, state)
    with tracker.start_run(f"round-{rnd['n']:03d}", nested=True) as run_id:
        tracker.set_tags({"round": rnd["n"], "round_files": len(rnd["files"]), "base_model": rnd["base"]})
        if rnd["rows"] and "model" not in rnd:
            trained = train(cfg, req, state, tracker, deadline, pool)
            if trained is None:
                return False
            rnd.update(trained)
            save_state(out, state)
        if rnd["rows"] and "register" not in rnd:
            with nested_under(run_id), stage("eval-heldout"):  # the round's and the incumbent's evaluations
                rnd.update(decide(cfg, state, out, pool.load))
            save_state(out, state)
            tracker.log_metrics({"continuous/heldout_strict": rnd["strict"], "continuous/gain": rnd["gain"][0],
                                 "continuous/gain_lo": rnd["gain"][1]})
        if rnd.get("register") and "registered" not in rnd:
            rnd["registered"] = register(cfg, rnd, run_id, req.promote)
    state["consumed"] += rnd["files"]
    if rnd.get("registered"):
        state["scores"][rnd["registered"].rsplit("/", 1)[1]] = rnd["eval"]
    if rnd["rows"]:
        state["rounds"].append(rnd)
    state["current"] = None
    save_state(out, state)
    print(report(cfg, rnd), file=logs.console(), flush=True)
    return True


def check_heldout(heldout: str, tasks: str, files: list[str]) -> None:
    """The gate scores rounds on held-out rows: none may be a row, or read a document, of the round."""
    from pipelines.data.tasks import read_task_rows
    from pipelines.learn.gate import shared_row

    if shared := shared_row(read_task_rows(heldout), read_task_rows(tasks)):
        raise UserError(f"held-out rows '{heldout}': {shared} is also in the new task files "
                        f"({', '.join(files[:3])}{', ...' if len(files) > 3 else ''}); the gate needs rows the "
                        "model never trained on")


def copy_rows(files: list[str], uri: str) -> int:
    """The files' rows streamed into one round's task rows (the round keeps what it trained on)."""
    from pipelines.data.tasks import read_task_rows, write_task_rows

    return write_task_rows(itertools.chain.from_iterable(map(read_task_rows, files)), uri)


def train(cfg: Config, req: Request, state: dict, tracker, deadline: float | None, pool: Pool) -> dict | None:
    """The round's training run (resumed from its checkpoint if one is there); None if the
    deadline cut it short."""
    from pipelines.learn import rl_recipe, runs, sft_recipe
    from pipelines.learn.recipe import TrainRequest
    from pipelines.models import config_model_dir

    rnd, cc = state["current"], cfg.learn.continuous
    tasks = f"{rnd['folder']}/tasks"
    rcfg = with_model(cfg, rnd["base"])
    steps = req.steps or cc.steps or (cfg.learn.steps if req.sft else math.ceil(rnd["rows"] / cfg.rollout.batch_groups))
    print(f"continuous: round {rnd['n']}: {rnd['rows']} rows of {len(rnd['files'])} new file(s), {steps} steps "
          f"from {rnd['base']}", file=logs.console(), flush=True)
    resume = runs.latest_state(rnd["folder"], str(config_model_dir(rcfg))) is not None
    minutes = None if deadline is None else max((deadline - time.time()) / 60, 1e-3)
    request = TrainRequest(tasks, steps, minutes, rnd["folder"], resume, state["heldout"])
    result = (sft_recipe.main(rcfg, request, tracker) if req.sft else
              rl_recipe.main(rcfg, request, tracker, workers=pool.load(rnd["base"])))
    if result["steps"] < steps and deadline is not None and time.time() >= deadline:
        return None
    return {"model": result["model"], "steps": result["steps"]}


def summary(rnd: dict) -> dict:
    return {k: rnd.get(k) for k in ("n", "files", "rows", "steps", "model", "strict", "incumbent", "gain",
                                    "registered")}


def run(cfg: Config, args) -> None:
    from pipelines.track.tracker import command_run, create_tracker, train_label

    if not args.tasks:
        raise UserError("train --continuous: --tasks FOLDER (the task files to watch, local or s3://) is required")
    if args.heldout:
        cc = cfg.learn.continuous.model_copy(update={"heldout": args.heldout})
        cfg = cfg.model_copy(update={"learn": cfg.learn.model_copy(update={"continuous": cc})})
    req = Request(args.tasks, args.out, args.sft, args.promote, args.once, args.max_minutes, args.steps)
    tracker = create_tracker(cfg)
    with command_run(tracker, cfg, "train", tags={"continuous": True, "dataset": args.tasks,
                                                   "base_model": cfg.model.path, "sft": args.sft},
                     label=f"--continuous {train_label(cfg, args.sft)}"):
        out = main(cfg, req, tracker)
    print(json.dumps(out))
