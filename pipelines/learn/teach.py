"""Only questions that teach: before an RL run, the starting model's pass rate on each training
question (a few samples each) keeps the rows it sometimes answers and drops the rest.

A group whose rewards are all equal carries no advantage, and DAPO's dynamic sampling drops it
after all G rollouts were paid for (HotpotQA at SmolLM2's level: 168 of 192 groups, 11.5 min a
step). Probing with `samples` < G rollouts first pays a fraction of that for each row that
cannot teach. The rate is the starting model's, so a row it always fails may become learnable
later; the range (learn.pass_filter.low/high) says how much to keep.

    memagent train model.path=SFT_OUT/best learn.pass_filter={samples: 4}

The kept rows go to OUT/teach/tasks (the run's task rows from then on, a resume included) and
every probed row's rate to OUT/teach/rates.jsonl.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pipelines import logs
from pipelines.errors import UserError
from pipelines.learn.config import PassFilterConfig
from pipelines.storage import exists, write_whole


@dataclass(frozen=True)
class Probe:
    sample_id: str
    rate: float  # mean reward of the samples
    verdict: str  # kept / always_wrong / always_right / out_of_range / failed


def verdict(rate: float, f: PassFilterConfig) -> str:
    """Kept when low <= rate <= high; else why not (rates are means of 0..1 rewards)."""
    if f.low <= rate <= f.high:
        return "kept"
    if rate <= 0.0:
        return "always_wrong"
    if rate >= 1.0:
        return "always_right"
    return "out_of_range"


def rows_needed(steps: int, batch_groups: int, margin: float = 1.25) -> int:
    """Kept rows that cover a run of `steps` steps once, with room for groups lost on the way."""
    return int(steps * batch_groups * margin) + 1


def select(results: Iterable[tuple[Any, float | None]], f: PassFilterConfig, need: int) -> Iterator[Probe]:
    """Probes in arrival order until `need` rows were kept; rate None is a row that could not run."""
    kept = 0
    for row, rate in results:
        p = Probe(row.sample_id, -1.0 if rate is None else rate, "failed" if rate is None else verdict(rate, f))
        yield p
        kept += p.verdict == "kept"
        if kept >= need:
            return


def summary_line(counts: Counter, probed: int) -> str:
    parts = ", ".join(f"{counts[k]} {k.replace('_', ' ')}" for k in ("always_wrong", "always_right", "out_of_range",
                                                                       "failed") if counts[k])
    return f"teach: {probed} rows probed, {counts['kept']} kept" + (f" ({parts} dropped)" if parts else "")


def rates(cfg, rows: Iterable[Any], workers: list | None) -> Iterator[tuple[Any, float | None]]:
    """(row, pass rate) as groups of learn.pass_filter.samples finish, on the starting model."""
    from pipelines.rollout.core import RolloutSpec
    from pipelines.rollout.service import Quarantined, run_groups

    by_id: dict[str, Any] = {}

    def remembered() -> Iterator[Any]:
        for row in rows:
            by_id[row.sample_id] = row
            yield row

    r = cfg.rollout
    spec = RolloutSpec(r.temperature, r.top_p, reward=r.reward)
    for item in run_groups(cfg, remembered(), spec, cfg.learn.pass_filter.samples, workers=workers):
        if isinstance(item, Quarantined):
            yield by_id.pop(item.sample_id), None
        else:
            yield by_id.pop(item.sample_id), sum(item.rewards) / len(item.rewards)


def tasks_uri(out: str) -> str:
    return f"{out}/teach/tasks"


def filtered(cfg, tasks: str, out: str, steps: int, workers: list | None = None, resuming: bool = False) -> str:
    """OUT/teach/tasks: the rows of `tasks` whose pass rate is in range, enough for `steps` steps
    (made once; a resumed run reads them back)."""
    from pipelines.data.tasks import read_task_rows, write_task_rows

    uri = tasks_uri(out)
    if exists(uri):
        return uri
    if resuming:  # its data cursor counts the rows of the unfiltered split
        raise UserError(f"learn.pass_filter: the run in '{out}' started on every row of its split; resume it "
                        "without the filter, or start the filtered run in another --out")
    f = cfg.learn.pass_filter
    need = rows_needed(steps, cfg.rollout.batch_groups)
    kept, counts, log = [], Counter(), []
    results = rates(cfg, read_task_rows(tasks), workers)
    for i, probe in enumerate(select(results, f, need), 1):
        counts[probe.verdict] += 1
        log.append(probe)
        if probe.verdict == "kept":
            kept.append(probe.sample_id)
        if i % 20 == 0:
            print(summary_line(counts, i), file=logs.console(), flush=True)
    results.close()  # stops the probing workers' remaining groups
    print(summary_line(counts, len(log)), file=logs.console(), flush=True)
    if not kept:
        raise UserError(f"learn.pass_filter: none of {len(log)} rows of '{tasks}' has a pass rate in "
                        f"[{f.low}, {f.high}] ({summary_line(counts, len(log))}): SFT first, or other rows")
    write_whole(f"{out}/teach/rates.jsonl", "".join(json.dumps(p.__dict__) + "\n" for p in log).encode())
    wanted = set(kept)
    write_task_rows((r for r in read_task_rows(tasks) if r.sample_id in wanted), uri)
    return uri
