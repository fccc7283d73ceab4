"""The evaluation ladder (what `memagent eval` runs: eval/command.py): accuracy against document
length, the memory agent beside two baselines.

Every (task, length, method) cell runs n questions through the rollout machinery (Ray
worker actors, pipelines.rollout) at evaluation temperature: one set of workers for the
whole ladder, one stream per method over all its unfinished cells. A cell is saved the
moment its last row is in, so a re-run skips finished cells; the records of an unfinished
cell are checkpointed every eval.checkpoint_rows rows (and when the run stops on an error or
Ctrl-C), so a re-run also skips the rows already done. Prints the table in the paper's
layout (the strict score % with a 95% interval, the paper's lenient sub_em beside it) and logs
metrics, table, plot and memory traces to MLflow as `eval/{task}/{length}/{strict,em,f1,sub_em}`;
the rows read are the run's held-out datasets, the first eval.traces questions of each
memory-agent cell MLflow traces (pipelines/eval/traces.py).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

from pipelines import logs
from pipelines.config import Config
from pipelines.data.tasks import TaskRow
from pipelines.errors import UserError
from pipelines.eval.records import gate_metrics
from pipelines.eval.report import (Summary, flat_metrics, format_table, length_series, plot, table_csv,
                                   trace_markdown)
from pipelines.eval.results import (RECORD_VERSION, cell_uri, check_meta, clear_parts, has_cell, parts_uri,
                                    read_cell, read_parts, summarize, write_cell, write_part)
from pipelines.eval.stats import parse_length
from pipelines.eval.traces import eval_traces
from pipelines.storage import write_whole
from pipelines.track import Tracker, command_run, create_tracker
from pipelines.track.datasets import HELD_OUT, refs

Cell = tuple[str, str, str]


def output_uri(cfg: Config) -> str:
    if cfg.eval.out:
        return cfg.eval.out
    name = cfg.model.path.replace("models:/", "").replace("/", "_").replace("@", "_").strip("_")
    return str(cfg.home_path / "eval" / f"{name}-seed{cfg.eval.seed}")


def plan(cfg: Config) -> list[Cell]:
    e = cfg.eval
    for ln in e.lengths:
        parse_length(ln)
    if e.dataset is None:  # built on the fly: only the builders' tasks exist
        from pipelines.ingest.builders import TASKS

        unknown = [t for t in e.tasks if t not in TASKS]
        if unknown:
            raise UserError(f"task '{unknown[0]}': unknown (known: {', '.join(TASKS)}); or pass --dataset")
    return [(t, ln, m) for t in e.tasks for ln in e.lengths for m in e.methods]


def window(cfg: Config) -> int:
    return cfg.eval.window or cfg.engine.max_model_len


def check_budgets(cfg: Config) -> None:
    """Fail before an engine starts rather than on the first prompt the engine refuses."""
    a, limit = cfg.agent, cfg.engine.max_model_len
    if window(cfg) > limit:
        raise UserError(f"eval.window={window(cfg)}: larger than engine.max_model_len={limit}")
    turn = a.chunk_size + 2 * a.memory_budget + a.question_budget
    if turn > limit:
        raise UserError(f"agent.chunk_size + 2 x memory_budget + question_budget = {turn} tokens: "
                        f"a memory turn would not fit engine.max_model_len={limit}")


def rollout_config(cfg: Config) -> Config:
    """The rollout settings the evaluation's workers and service run under: eval.concurrency loops
    per worker, a buffer that holds them all (documents of doc_id rows from data.store, as every
    stage's). How a row is sampled (the agent's temperature, the default verifier) is the
    RolloutSpec of run_method; run_groups runs one sample per row with no staleness bound and no drop."""
    e, r = cfg.eval, cfg.rollout
    update = {"loops_per_worker": e.concurrency, "buffer_groups": r.workers * e.concurrency}
    return cfg.model_copy(update={"rollout": r.model_copy(update=update)})


def run_cells(cfg: Config, out: str, todo: list[Cell], tracker: Tracker, workers: list | None = None) -> None:
    """Unfinished cells on one set of rollout workers, one stream per method. workers: actors
    to reuse, e.g. a rollout.pool.Pool's (else started here with rollout_config(cfg) and stopped at the end)."""
    import ray
    from transformers import AutoTokenizer

    from pipelines import runtime
    from pipelines.models import config_model_dir
    from pipelines.progress import Progress
    from pipelines.rollout.worker import close_workers, start_workers

    rcfg = rollout_config(cfg)
    path = config_model_dir(cfg)
    own_ray = workers is None and not ray.is_initialized()
    bar = Progress("eval", total=len(todo) * cfg.eval.n, unit="row")
    bar.set(cells=0)
    pool = list(workers or [])
    try:
        if workers is None:
            runtime.connect()
            pool = start_workers(rcfg)  # each resolves the model on its own node
        tokenizer = AutoTokenizer.from_pretrained(path)
        for method in dict.fromkeys(c[2] for c in todo):
            cells = [c for c in todo if c[2] == method]
            run_method(rcfg, out, cells, pool, tokenizer, tracker, bar)
    finally:
        bar.close()
        if workers is None:
            close_workers(pool)
        if own_ray:
            ray.shutdown()


def run_method(cfg: Config, out: str, cells: list[Cell], workers: list, tokenizer, tracker: Tracker, bar) -> None:
    """Every unfinished cell of one method through one run_groups stream; each cell is written
    and its metrics logged the moment its last row (scored or quarantined) is in; rows already
    checkpointed by an earlier run are not run again."""
    from pipelines.eval.cells import CellBook
    from pipelines.eval.rows import cell_rows
    from pipelines.rollout.core import RolloutSpec
    from pipelines.rollout.service import Quarantined, run_groups

    e, a, method = cfg.eval, cfg.agent, cells[0][2]
    book = CellBook(e.traces)

    def saved(cell: Cell) -> list[dict]:
        records = read_parts(parts_uri(out, *cell))
        bar.update(len(records))
        return records

    def built(c: Cell) -> Iterator[TaskRow]:
        return cell_rows(c[0], c[1], list(e.lengths), e.n, e.seed, e.dataset, tokenizer, e.haystack)

    rows = book.rows(cells, built, saved)
    spec = RolloutSpec(a.temperature, a.top_p, method=method, window=window(cfg), seed=a.seed)
    try:
        for item in run_groups(cfg, rows, spec, workers=workers):
            if isinstance(item, Quarantined):
                book.add_failure(item.sample_id, item.reason)
            else:
                for t in item.trajectories:
                    book.add_trajectory(t)
            bar.update(1, cells=bar.fields["cells"] + save_complete(book, out, tracker))
            save_parts(book, out, e.checkpoint_rows)
        bar.update(0, cells=bar.fields["cells"] + save_complete(book, out, tracker))
    finally:
        save_parts(book, out, 1)  # whatever an error or Ctrl-C leaves held
    if book.unfinished():
        raise RuntimeError(f"eval: rows of {book.unfinished()} never came back from the rollout workers")


def save_complete(book, out: str, tracker: Tracker) -> int:
    """Write the cells whose last row is in; returns how many."""
    n = 0
    for cell, records in book.complete():
        write_cell(records, cell_uri(out, *cell))
        clear_parts(parts_uri(out, *cell))
        tracker.log_metrics({**flat_metrics({cell: summarize(records)}), **gate_metrics(cell, records)})
        n += 1
    return n


def save_parts(book, out: str, at_least: int) -> None:
    for cell, records in book.fresh(at_least):
        write_part(records, parts_uri(out, *cell))


def summary_files(cells: dict[Cell, list[dict]], tasks: list[str], lengths: list[str],
                  methods: list[str]) -> tuple[Summary, dict, dict[str, str]]:
    """An evaluation folder's cells -> their summaries, the summary document ({"metrics": eval/
    scores and gate/ rates, "table": task -> length -> method -> summary}) and the folder's
    table.md, table.csv and summary.json."""
    summary = {c: summarize(recs) for c, recs in cells.items()}
    metrics = flat_metrics(summary)
    for c, recs in cells.items():
        metrics.update(gate_metrics(c, recs))
    nested: dict = {}
    for (task, length, method), cell in summary.items():
        nested.setdefault(task, {}).setdefault(length, {})[method] = cell
    document = {"metrics": metrics, "table": nested}
    return summary, document, {"table.md": format_table(summary, tasks, lengths, methods),
                               "table.csv": table_csv(summary), "summary.json": json.dumps(document, indent=1)}


def finalize(cfg: Config, out: str, tracker: Tracker) -> dict:
    """Summaries of every finished cell -> table, CSV, JSON, plot, traces; logged and saved."""
    e = cfg.eval
    cells = {c: read_cell(cell_uri(out, *c)) for c in plan(cfg) if has_cell(cell_uri(out, *c))}
    summary, document, files = summary_files(cells, e.tasks, e.lengths, e.methods)
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in files.items():
            (Path(tmp) / name).write_text(text)
        plot(summary, e.tasks, e.lengths, e.methods, Path(tmp) / "accuracy_vs_length.png")
        for name in [*files, "accuracy_vs_length.png"]:
            write_whole(f"{out.rstrip('/')}/{name}", (Path(tmp) / name).read_bytes())
            tracker.log_artifact(Path(tmp) / name, "eval")
        traces = Path(tmp) / "traces"
        traces.mkdir()
        for (task, length, method), recs in cells.items():
            for rec in recs:
                if rec["memory"] and rec["index"] < e.traces and method == "memagent":
                    (traces / f"{task}_{length}_{rec['index']}.md").write_text(trace_markdown(rec))
        for path in sorted(traces.iterdir()):
            tracker.log_artifact(path, "eval/traces")
    tracker.log_traces(eval_traces(cells, e.traces))
    tracker.log_metrics(document["metrics"])
    for tokens, series in sorted(length_series(summary).items()):  # accuracy against length, drawn by MLflow
        tracker.log_metrics(series, step=tokens)
    return {"out": out, "table": files["table.md"], "summary": document["table"], "metrics": document["metrics"]}


def main(cfg: Config, workers: list | None = None) -> dict:
    """The whole ladder; workers: rollout actors to reuse (run_cells)."""
    out = output_uri(cfg)
    cells = plan(cfg)
    check_budgets(cfg)
    # gates off: the agent as before agent.gates existed, so result folders made then stay resumable
    agent = cfg.agent.model_dump(exclude=None if cfg.agent.gates else {"gates"})
    check_meta(out, {"version": RECORD_VERSION, "model": cfg.model.path, "agent": agent,
                     "window": window(cfg), "seed": cfg.eval.seed, "n": cfg.eval.n, "dataset": cfg.eval.dataset})
    todo = [c for c in cells if not has_cell(cell_uri(out, *c))]
    print(f"eval: {len(cells) - len(todo)} of {len(cells)} cells already done in {out}", file=logs.console())
    tracker = create_tracker(cfg)
    tags = {"dataset": cfg.eval.dataset, "store": cfg.data.store, "eval_out": out}
    with command_run(tracker, cfg, "eval", tags=tags):
        tracker.log_datasets(refs(HELD_OUT, cfg.eval.dataset, cfg.data.store))
        if todo:
            run_cells(cfg, out, todo, tracker, workers)
        result = finalize(cfg, out, tracker)
    return result
