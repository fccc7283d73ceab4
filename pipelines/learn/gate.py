"""The gate of continuous training (pipelines/learn/continuous.py): a round's model is scored
against the incumbent on the same held-out rows and registered only on a gain, once.

The incumbent is the @production version of learn.registry_name, or the loop's starting model
(model.path) while the name has none. Both go through the ladder (one memagent cell per task),
into folders under OUT/evals that a re-run reads back instead of scoring again. The verdict is
`verdict`'s, the one rule the quickstart's choice between SFT and SFT + RL uses too: the
paired difference of the strict score (eval.stats.paired_diff) must have its 95% interval's
lower bound above learn.continuous.margin, so a gain the held-out rows do not support (a mean
above the margin by luck of a few rows) registers nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pipelines.config import Config
from pipelines.errors import UserError
from pipelines.eval.heldout import RowKey


@dataclass(frozen=True)
class Verdict:
    gain: float  # mean of after - before over the rows both scored
    lo: float  # its 95% interval
    hi: float
    n: int
    better: bool  # lo > margin: keep `after`
    why: str

    @property
    def paired(self) -> list:
        return [self.gain, self.lo, self.hi, self.n]


def verdict(before: dict[RowKey, float], after: dict[RowKey, float], margin: float) -> Verdict:
    """Whether `after` beats `before` on the held-out rows both scored ({row: strict score}): only
    when the paired gain's 95% interval lies wholly above `margin` (its lower bound clears it)."""
    from pipelines.eval.stats import paired_diff

    gain, lo, hi, n = paired_diff(before, after)
    better = n > 0 and lo > margin
    span = f"paired gain {100 * gain:+.1f} points [{100 * lo:+.1f}, {100 * hi:+.1f}] on {n} rows"
    why = (f"{span}: the interval's lower bound clears the margin of {100 * margin:.1f} points" if better else
           f"{span}: the interval's lower bound does not clear the margin of {100 * margin:.1f} points" if n else
           "no row scored by both")
    return Verdict(gain, lo, hi, n, better, why)


def document_key(row) -> str:
    """What makes two rows read the same document: its store id, else a digest of its inline text."""
    import hashlib

    return f"doc:{row.doc_id}" if row.doc_id else "text:" + hashlib.sha1((row.context or "").encode()).hexdigest()


def shared_row(heldout: Iterable, train: Iterable) -> str | None:
    """The first training row that shares a sample id or a document with a held-out row (a gain
    measured on rows the model trained on means nothing), named; None when they are disjoint.
    The held-out rows are held in memory (a few hundred), the training rows streamed."""
    ids, docs = set(), set()
    for row in heldout:
        ids.add(row.sample_id)
        docs.add(document_key(row))
    for row in train:
        if row.sample_id in ids:
            return f"sample '{row.sample_id}'"
        if document_key(row) in docs:
            return f"the document of sample '{row.sample_id}'"
    return None


def with_model(cfg: Config, model: str) -> Config:
    return cfg.model_copy(update={"model": cfg.model.model_copy(update={"path": model})})


def decide(cfg: Config, state: dict, out: str, workers: Callable[[str], list]) -> dict:
    """The current round's model against the incumbent: the paired gain and the verdict.
    workers(model): rollout workers holding `model`, for the ladder."""
    from pipelines.models.registry import alias_version

    rnd, name = state["current"], cfg.learn.registry_name
    mine = f"{out}/evals/round-{rnd['n']:03d}"
    ours = score(cfg, rnd["model"], state["heldout"], mine, workers)
    production = alias_version(name, "production", cfg.home_path, cfg.track)
    if production is None:
        label, model, folder = "the base model", cfg.model.path, f"{out}/evals/base"
    else:
        label, model = f"@production v{production}", f"models:/{name}/{production}"
        folder = state["scores"].get(str(production), f"{out}/evals/v{production}")
    theirs = score(cfg, model, state["heldout"], folder, workers)
    v = verdict(theirs, ours, cfg.learn.continuous.margin)
    if v.n == 0:
        raise UserError(f"held-out rows '{state['heldout']}': none could be scored (see {mine})")
    return {"eval": mine, "strict": mean(ours), "heldout_n": len(ours), "incumbent": label,
            "incumbent_strict": mean(theirs), "gain": v.paired, "register": v.better, "why": v.why,
            "alias": "production" if production is None else "candidate"}


def mean(scores: dict[RowKey, float]) -> float:
    return sum(scores.values()) / len(scores) if scores else math.nan


def score(cfg: Config, model: str, heldout: str, out: str, workers: Callable[[str], list]) -> dict[RowKey, float]:
    """Per-row held-out strict score ({(task, sample_id): score}: eval.heldout) of `model`: one memagent
    cell per task at one length label (every row falls in it); finished cells are read back, not run again."""
    from pipelines.data.tasks import read_task_rows
    from pipelines.eval.heldout import record_scores
    from pipelines.eval.ladder import main as ladder
    from pipelines.eval.results import cell_uri, has_cell, read_cell

    tasks, longest = {}, 1
    for row in read_task_rows(heldout):
        tasks[row.task], longest = None, max(longest, row.doc_tokens)
    length = str(longest)
    e = cfg.eval.model_copy(update={"dataset": heldout, "tasks": tuple(tasks), "lengths": (length,), "out": out,
                                    "n": cfg.learn.continuous.eval_n, "methods": ("memagent",)})
    cells = {t: cell_uri(out, t, length, "memagent") for t in tasks}
    if not all(has_cell(c) for c in cells.values()):
        ladder(with_model(cfg, model).model_copy(update={"eval": e}), workers(model))
    return {key: v for c in cells.values() for key, v in record_scores(read_cell(c)).items()}


def register(cfg: Config, rnd: dict, run_id: str | None, promote: bool) -> str:
    """The round's model as a version (once: a version of a run tagged with the round's id is
    taken as it), its alias set; with promote, @production moved to it."""
    from mlflow import MlflowClient

    from pipelines.models import config_model_dir
    from pipelines.models.registry import register_model
    from pipelines.track.tracker import default_tracking_uri, prepare_environment

    name = cfg.learn.registry_name
    prepare_environment(cfg.track)
    uri = default_tracking_uri(cfg.home_path, cfg.track)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    version = round_version(client, cfg.track.experiment, name, rnd["key"])
    if version is None:
        gain, lo, hi, n = rnd["gain"]
        metrics = {"heldout_strict": rnd["strict"], "heldout_n": rnd["heldout_n"], "heldout_gain": gain,
                   "heldout_gain_lo": lo, "heldout_gain_hi": hi}
        tags = {"continuous_round": rnd["key"], "round": str(rnd["n"]), "tasks": f"{rnd['folder']}/tasks",
                "steps": str(rnd["steps"]), "base_model": rnd["base"]}
        ref = register_model(config_model_dir(cfg, rnd["model"]), name, cfg.home_path, cfg.track, metrics=metrics,
                             tags=tags, run_id=run_id)
        version = int(ref.rsplit("/", 1)[1])
    for alias in {rnd["alias"], *(("production",) if promote else ())}:
        client.set_registered_model_alias(name, alias, str(version))
    return f"models:/{name}/{version}"


def round_version(client, experiment: str, name: str, key: str) -> int | None:
    """The version registered from a run tagged with this round's id, if one is."""
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return None
    for run in client.search_runs([found.experiment_id], filter_string=f"tags.continuous_round = '{key}'"):
        for v in client.search_model_versions(f"run_id = '{run.info.run_id}'"):
            if v.name == name:
                return int(v.version)
    return None


def report(cfg: Config, rnd: dict) -> str:
    if not rnd["rows"]:
        return f"continuous: {len(rnd['files'])} new file(s) without rows: nothing to train"
    gain, lo, hi, n = rnd["gain"]
    outcome = (f"registered {rnd['registered']} @{rnd['alias']}" if rnd.get("registered")
               else "not registered (the interval's lower bound must exceed "
                    f"learn.continuous.margin={cfg.learn.continuous.margin})")
    return (f"continuous: round {rnd['n']}: held-out strict {rnd['strict']:.3f} vs {rnd['incumbent']} "
            f"{rnd['incumbent_strict']:.3f} on {n} rows: gain {gain:+.3f} (95% interval {lo:+.3f} .. {hi:+.3f}); "
            f"{outcome}")
