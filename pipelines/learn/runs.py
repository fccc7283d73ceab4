"""A training run's folder: its checkpoints (Ray Train's), its task rows, its final model.

    OUT/learner/checkpoint_*/   Ray Train checkpoints (state.json + learner.pt)
    OUT/tasks/                  the train split, when built on the fly
    OUT/weights/vN/             published policies (the last few)
    OUT/best/ (SFT), OUT/final/ (RL)   the run's model, a plain HF folder
"""

from __future__ import annotations

import itertools
import json
import tempfile
import time
import zipfile
from pathlib import Path

from pipelines.errors import UserError
from pipelines.learn.checkpoint import LearnerState, model_fingerprint, read_state
from pipelines.storage import exists, first_line, is_s3, list_dirs, resolve, retried

INDEX = "checkpoint_manager_snapshot.json"  # Ray Train's index of the run's checkpoints, in OUT/learner/


def _read_text(uri: str) -> str | None:
    """The object's text, None when it does not exist. An S3 endpoint that refuses for a while is
    retried (storage.retried), never taken for "no such object": a resume would miss its checkpoint."""
    fs, path = resolve(uri)

    def read() -> str:
        with fs.open_input_stream(path) as f:
            return f.read().decode()

    try:
        return retried(uri, read)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise UserError(f"'{uri}': unreadable ({first_line(e)})") from None


def latest_state(out: str, model_dir: str) -> LearnerState | None:
    """The state of the run's newest checkpoint, None if it has none; another model's or a
    corrupt one is a one-line error naming it."""
    name = newest_checkpoint(out)
    if name is None:
        return None
    text = _read_text(f"{out}/learner/{name}/state.json")
    with tempfile.TemporaryDirectory() as d:
        Path(d, "state.json").write_text(text if text is not None else "")
        try:
            return read_state(Path(d), model_fingerprint(model_dir))
        except UserError as e:
            raise UserError(str(e).replace(d, f"{out}/learner/{name}")) from None


def newest_checkpoint(out: str) -> str | None:
    """The folder (under OUT/learner) of the run's newest checkpoint: the one Ray Train's index names.
    Ray Train rewrites that index in place after each checkpoint, so a kill at that moment leaves it
    empty or cut, and its write to an s3:// OUT is not retried, so an outage can leave none: then
    the newest complete checkpoint folder stands in (what the index would name, or the one before
    it). None when the run has neither."""
    _, name = _read_index(out)
    return name or newest_complete(out)


def _read_index(out: str) -> tuple[bool, str | None]:
    """(whether OUT has an index, the checkpoint it names: None when it is torn)."""
    text = _read_text(f"{out}/learner/{INDEX}")
    if text is None:
        return False, None
    try:
        return True, str(json.loads(text)["latest_checkpoint_result"]["checkpoint_dir_name"])
    except (ValueError, KeyError, TypeError):
        return True, None


def newest_complete(out: str) -> str | None:
    """The checkpoint_* folder with the highest step whose state and weights were written whole
    (a kill during an upload leaves a folder without one, or with a cut learner.pt)."""
    steps = {}
    for name in list_dirs(f"{out}/learner"):
        if name.startswith("checkpoint_") and (step := _complete_step(f"{out}/learner/{name}")) is not None:
            steps[name] = step
    return max(steps, key=lambda name: (steps[name], name)) if steps else None


def _complete_step(folder: str) -> int | None:
    try:
        step = int(json.loads(_read_text(f"{folder}/state.json") or "")["step"])
        fs, path = resolve(f"{folder}/learner.pt")
        with fs.open_input_file(path) as f:  # torch.save writes a zip: its directory is last
            return step if zipfile.is_zipfile(f) else None
    except (ValueError, KeyError, TypeError, OSError):
        return None


def repair_index(out: str) -> str | None:
    """Before a run starts in OUT: when the index is torn or missing (see newest_checkpoint), the URI
    of the checkpoint that stands in for it, for the learner to start from (a torn index is removed:
    Ray Train would fail to read it); None when the index is whole, or OUT holds no checkpoint."""
    present, name = _read_index(out)
    if name:
        return None
    stand_in = newest_complete(out)
    if present:
        fs, path = resolve(f"{out}/learner/{INDEX}")
        fs.delete_file(path)
    return f"{out}/learner/{stand_in}" if stand_in else None


def build_split(cfg, out: str, model_dir: str, split: str = "train") -> str:
    """A split of learn.task (one task or a comma list) at learn.task_lengths (documents inline) as
    task rows in OUT: the train split (learn.task_n rows per length and task), or the held-out eval
    split (learn.eval_n; the builders keep train and eval questions and keys apart). Lengths and
    tasks interleave; learn.curriculum = N stages the opening rows by length (curriculum_order)."""
    from transformers import AutoTokenizer

    from pipelines.ingest.builders.build import BuildRequest, inline_rows
    from pipelines.ingest.builders.common import parse_lengths
    from pipelines.data.tasks import write_task_rows

    uri = f"{out}/tasks" if split == "train" else f"{out}/{split}_tasks"
    if exists(uri):
        return uri
    lc = cfg.learn
    backend = AutoTokenizer.from_pretrained(model_dir).backend_tokenizer
    count = lambda text: len(backend.encode(text, add_special_tokens=False).ids)  # noqa: E731
    n = lc.task_n if split == "train" else lc.eval_n
    tasks = [t.strip() for t in lc.task.split(",") if t.strip()]
    streams = [inline_rows(BuildRequest(task=task, lengths=str(t), n=n, out=uri, store="", seed=lc.seed,
                                        split=split, haystack=lc.haystack), t, count)
               for t in sorted(parse_lengths(str(lc.task_lengths))) for task in tasks]
    by_length = [streams[i:i + len(tasks)] for i in range(0, len(streams), len(tasks))]  # sorted lengths
    ordered = curriculum_order(by_length, lc.curriculum) if split == "train" else interleave([streams])
    write_task_rows(ordered, uri)
    return uri


def curriculum_order(by_length: list[list], stage_rows: int):
    """Rows of streams grouped by length (shortest first, one stream per task): stage_rows rows of
    each task at each length in turn (tasks interleaved), then every remaining row with lengths
    interleaved; stage_rows = 0 interleaves them all from the start."""
    by_length = [[iter(s) for s in streams] for streams in by_length]
    stages = [[itertools.islice(s, stage_rows) for s in streams] for streams in by_length] if stage_rows else []
    return itertools.chain(interleave(stages), interleave([[s for streams in by_length for s in streams]]))


def interleave(stream_sets) -> "itertools.chain":
    """Rows of each set of streams taken in turn (one from each stream), the sets one after another."""
    return itertools.chain.from_iterable(
        (row for rows in itertools.zip_longest(*streams) for row in rows if row is not None) for streams in stream_sets)


def check_tasks(uri: str, need_evidence: bool) -> None:
    """Fail before anything starts: no rows, a row without answers, (SFT) a row without evidence."""
    from pipelines.data.tasks import read_task_rows, require_evidence

    first = next(read_task_rows(uri), None)
    if first is None:
        raise UserError(f"task rows '{uri}': no rows")
    for row in read_task_rows(uri):
        if not row.answers or not any(a.strip() for a in row.answers):
            raise UserError(f"task row '{row.sample_id}': no answers (in '{uri}')")
        if need_evidence:
            require_evidence(row)


def final_model(out: str, state: LearnerState, sft: bool) -> str:
    """SFT: the best held-back checkpoint (OUT/best); RL: the last policy, copied to OUT/final."""
    if sft:
        best = f"{out}/best"
        if not exists(f"{best}/config.json"):
            raise UserError(f"out '{out}': no best model (the run ended before its first checkpoint)")
        return best
    if not state.weights:
        raise UserError(f"out '{out}': no policy was published")
    from pipelines.storage import download_prefix, publish_dir

    with tempfile.TemporaryDirectory() as d:
        local = download_prefix(state.weights, Path(d) / "w") if is_s3(state.weights) else Path(state.weights)
        return publish_dir(local, f"{out}/final")


# A tracking server that restarts answers again within a few track.retry_s; one that does not
# should not hold a trained model hostage: the run ends, the model in OUT, the command printed.
REGISTER_TRIES = 3


def register(cfg, out: dict, run_id: str | None, sleep=time.sleep) -> str | None:
    """The run's model as a new registered version, tagged with its run and data (lineage). The
    model is already whole in OUT, so a tracking server that refuses does not fail the run: it is
    tried REGISTER_TRIES times, track.retry_s apart, then one line gives the command that
    registers the model once the server answers, and None is returned."""
    if not cfg.track.enabled:
        return None
    from pipelines.models import config_model_dir
    from pipelines.models.registry import register_model

    local = config_model_dir(cfg, out["model"])
    tags = {"train_run": run_id or "", "tasks": out["tasks"], "steps": str(out["steps"]),
            "base_model": cfg.model.path}
    for tried in range(1, REGISTER_TRIES + 1):
        try:
            return register_model(local, cfg.learn.registry_name, cfg.home_path, cfg.track,
                                  metrics=out.get("metrics"), tags=tags, run_id=run_id)
        except UserError as e:
            failed = e
            if tried < REGISTER_TRIES:
                sleep(cfg.track.retry_s)
    from pipelines import logs
    from pipelines.track.redact import env_secrets, redact

    print(redact(f"not registered after {REGISTER_TRIES} tries ({failed}); the model stays in '{out['model']}': "
                 f"once the server answers, run: {register_command(cfg, out['model'])}", env_secrets()),
          file=logs.console(), flush=True)
    return None


def register_command(cfg, model: str) -> str:
    """The `memagent model register` line that registers `model` where this run would have: the
    same config, tracking server, experiment and registered name (the lineage tags are the run's
    own and stay out)."""
    import shlex

    from pipelines.track.config import TrackConfig
    from pipelines.track.tracker import config_source, default_tracking_uri

    source = config_source()
    words = ["memagent", *(["--config", source] if source != "default" else []), "model", "register",
             "--model", model, "--name", cfg.learn.registry_name,
             f"track.tracking_uri={default_tracking_uri(cfg.home_path, cfg.track)}"]
    if cfg.track.experiment != TrackConfig().experiment:
        words.append(f"track.experiment={cfg.track.experiment}")
    return shlex.join(words)
