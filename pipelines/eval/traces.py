"""An evaluation's sampled questions as MLflow traces (pipelines/track/traces.py): the first
`eval.traces` rows of each memory-agent cell, from the records the cell keeps (their memory
at every step and each turn's `steps`), so a resumed or re-read evaluation traces the same."""

from __future__ import annotations

from pipelines.eval.records import Cell
from pipelines.eval.results import SCORES
from pipelines.track.traces import TraceSpec, turn_spans


def record_trace(rec: dict) -> TraceSpec:
    """One record's trace: the question at the root, a span per turn under it."""
    scores = {k: float(rec[k]) for k in SCORES if rec.get(k) is not None}
    gold = list(rec.get("answers") or [])
    spans = turn_spans(list(rec["memory"]), list(rec.get("steps") or []), rec.get("prediction"),
                       rec.get("answer") or "", scores, gold)
    tags = {"task": rec["task"], "length": rec["length"], "sample_id": rec["sample_id"],
            "index": str(rec["index"]), "source": "eval"}
    return TraceSpec(f"eval {rec['task']}/{rec['length']} #{rec['index']}", {"question": rec["question"]},
                     {"prediction": rec.get("prediction"), "gold": gold, **scores}, spans, tags)


def eval_traces(cells: dict[Cell, list[dict]], traces: int) -> list[TraceSpec]:
    """The traces of the first `traces` rows of every memory-agent cell that ran."""
    return [record_trace(rec) for (_, _, method), recs in cells.items() if method == "memagent"
            for rec in sorted(recs, key=lambda r: r["index"])
            if rec["index"] < traces and rec["memory"] and rec.get("error") is None]
