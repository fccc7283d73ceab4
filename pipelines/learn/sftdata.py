"""SFT data: task rows -> the scripted memory-trace conversations (pipelines.learn.traces).

The train conversations stream to the learner as a Ray Dataset (`datasets={"train": ...}`,
read by each worker through `get_dataset_shard`); a fixed held-back slice of the rows (by
hash of sample_id) is left out of it and scored by rank 0 to keep the best checkpoint.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import ray

from pipelines import runtime
from pipelines.learn.packing import TrainSeq
from pipelines.learn.traces import hashed_share


class TraceRows:
    """Task rows (an arrow batch) -> their SFT conversations, one row each (Ray Data map_batches)."""

    def __init__(self, model_dir: str, agent, store_uri: str | None, heldout: float = 0.0, decoys: bool = False,
                 copies: float = 1.0):
        """Batches leave out the rows of the held-back slice (`heldout` of them, by hash); decoys:
        learn.sft_decoys; copies: learn.sft_copies."""
        from transformers import AutoTokenizer

        from pipelines.agent.codec import ChatCodec
        from pipelines.agent.factory import limits_of
        from pipelines.agent.templates import get_templates

        self.codec = ChatCodec(AutoTokenizer.from_pretrained(model_dir))
        self.templates, self.limits, self.chunk = get_templates(agent.template), limits_of(agent), agent.chunk_size
        self.heldout, self.decoys, self.copies = heldout, decoys, copies
        self.store = None
        if store_uri:
            from pipelines.data.store import ChunkStore

            self.store = ChunkStore(store_uri)

    def table(self, rows: list) -> pa.Table:
        """The conversations of the task rows not held back."""
        kept = [r for r in rows if not held_back(r.sample_id, self.heldout)]
        return pa.Table.from_pylist(self.records(kept), schema=TRACE_SCHEMA)

    def records(self, rows: list) -> list[dict]:
        """One record per conversation of the rows' traces."""
        return [rec for t in self.traces(rows) for rec in t.records(self.copies)]

    def traces(self, rows: list) -> Iterator:
        """The rows' traces, streamed."""
        from pipelines.learn.traces import iter_traces

        return iter_traces(rows, self.store, self.codec, self.templates, self.limits, self.chunk, self.decoys)


ROWS = 16
TRACE_SCHEMA = pa.schema([("sample_id", pa.string()), ("turn", pa.int32()), ("prompt_ids", pa.list_(pa.int32())),
                          ("response_ids", pa.list_(pa.int32())), ("is_final", pa.bool_())])


def held_back(sample_id: str, fraction: float) -> bool:
    """A fixed slice of the train rows by hash of sample_id: the SFT's held-back loss set."""
    return hashed_share(sample_id) < fraction


def sft_datasets(tasks: str, model: str, cfg) -> dict[str, Any]:
    """The train conversations as a Ray Dataset, streamed from the task rows (the held-back
    slice is left out; the learner's rank 0 builds that small slice itself). model: the base
    model's reference (absolute_ref); each task resolves it on its own node for the tokenizer
    (an s3:// or models:/ model is fetched into that node's home), as the rollout workers do."""
    from pipelines.data.tasks import task_files
    from pipelines.data.config import store_uri

    # The files are listed here, and each task streams its file in small batches: no Ray
    # Data read (its listing task asks for a whole CPU, which a small machine whose CPUs the
    # learner and idle rollout engines hold never frees) and no actor pool (beside a Ray Train
    # worker, Ray Data gave the read no budget while an actor pool held its share).
    files = ray.data.from_items([{"uri": u} for u in task_files(tasks)])
    return {"train": files.map_batches(
        trace_files, fn_kwargs={"model": model, "cfg": runtime.portable(cfg),
                                "store": store_uri(cfg), "heldout": cfg.learn.sft_heldout},
        batch_format="pyarrow", batch_size=1, num_cpus=0.25)}


@functools.lru_cache(maxsize=4)
def _tracer(model_dir: str, agent, store: str | None, heldout: float, decoys: bool, copies: float) -> TraceRows:
    return TraceRows(model_dir, agent, store, heldout, decoys, copies)


def trace_files(batch: pa.Table, model: str, cfg, store: str | None, heldout: float) -> Iterator[pa.Table]:
    """Each file's conversations, ROWS task rows at a time (memory stays bounded). cfg: its home
    absolute (the driver's, for nodes without MEMAGENT_HOME)."""
    from pipelines.data.tasks import read_task_rows
    from pipelines.models import config_model_dir

    tracer = _tracer(str(config_model_dir(cfg, model)), cfg.agent, store, heldout, cfg.learn.sft_decoys,
                     cfg.learn.sft_copies)
    for uri in batch.column("uri").to_pylist():
        rows = read_task_rows(uri)
        while chunk := list(itertools.islice(rows, ROWS)):
            yield tracer.table(chunk)


@dataclass(frozen=True)
class Heldout:
    """The held-back slice: every conversation (the held-back loss), and which of them are memory
    writes that choose (Trace.chooses: train/heldout_choice)."""

    seqs: list[TrainSeq]
    choices: list[int]  # indices into seqs


CHOICE_TOKENS = 4  # a write's first tokens that name the sentence it keeps (train/heldout_choice)


def heldout_seqs(tasks: str, model_dir: str, cfg) -> Heldout:
    """The held-back slice's conversations (small: built in one process)."""
    from pipelines.data.tasks import read_task_rows

    rows = [r for r in read_task_rows(tasks) if held_back(r.sample_id, cfg.learn.sft_heldout)]
    return scored_seqs(rows, model_dir, cfg) if rows else Heldout([], [])


def scored_seqs(rows: list, model_dir: str, cfg) -> Heldout:
    """Every conversation of the rows' traces (all turns: no learn.sft_copies thinning), and which
    of them are memory writes that choose."""
    from pipelines.data.config import store_uri

    seqs, choices = [], []
    for t in TraceRows(model_dir, cfg.agent, store_uri(cfg), decoys=cfg.learn.sft_decoys).traces(rows):
        for r in t.records():
            choices += [len(seqs)] if t.chooses(r["turn"]) else []
            seqs.append(seq_of(r))
    return Heldout(seqs, choices)


def seq_of(row: dict) -> TrainSeq:
    return TrainSeq(list(map(int, row["prompt_ids"])), list(map(int, row["response_ids"])), None, 1.0, 0)
