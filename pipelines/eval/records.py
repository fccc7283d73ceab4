"""One ladder record per (cell, row): built from a rollout Trajectory, or from a quarantined row.

A record keeps what the table, the CSV and the memory traces need, never the document or
the token ids: the question, gold answers and their kind, prediction, raw answer, scores
(pipelines.agent.reward.SCORES, strict first, computed from the prediction), document tokens,
turns, tokens generated over all turns (what the gates save), the gates' counts, the memory turns
that state a number their prompt does not hold (`ungrounded`: invented or cut short), the memory
(every step for the first `traces` rows of a cell, else the last one) and, for those rows, each turn's `steps` (prompt tokens, tokens generated,
seconds, gate decision): what their MLflow traces show (pipelines/eval/traces.py). `seconds` is
the row's own loop (a latency); `finished` (unix time the result arrived) with it gives a cell's
span from its first row's start to its last row's end, so documents per hour as a throughput
(benchmarks/gates.py). Records written before `generated`, `finished` and `ungrounded` lack them.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipelines.agent.reward import answer_recall, scores
from pipelines.data.tasks import TaskRow
from pipelines.rollout.trajectory import Trajectory
from pipelines.rollout.metrics import gate_rates
from pipelines.track.metrics import gate_metric

MAX_ANSWER_CHARS = 2000
# The gates' part of a record (pipelines.agent.gates): chunks read and left unread, memory turns
# not kept, the chunk whose turn exited (None: read to the end), malformed markers.
GATES_NONE = {"chunks_read": 0, "chunks_unread": 0, "memory_updates": 0, "exit_chunk": None, "malformed": 0}
Cell = tuple[str, str, str]  # (task, length, method)


@dataclass(frozen=True)
class RowRef:
    """What a record needs of a row while it runs: the row without its document."""

    cell: Cell
    index: int  # position of the row in its cell
    row: TaskRow


def base_record(row: TaskRow, method: str, length: str, index: int) -> dict:
    return {"sample_id": row.sample_id, "task": row.task, "length": length, "method": method, "index": index,
            "question": row.question, "answers": list(row.answers), "answer_kind": row.answer_kind,
            "prediction": None, "answer": "", "strict": 0.0, "em": 0.0, "sub_em": 0.0, "f1": 0.0,
            "answer_recall": 0.0, "doc_tokens": 0, "turns": 0, "generated": 0, "ungrounded": 0, "truncated": False, "error": None, "memory": [], "seconds": 0.0,
            "finished": None, "steps": [], **GATES_NONE}


def trajectory_record(ref: RowRef, t: Trajectory, traces: int, finished: float | None = None) -> dict:
    _, length, method = ref.cell
    rec = base_record(ref.row, method, length, ref.index)
    rec.update(prediction=t.prediction, answer=t.answer[:MAX_ANSWER_CHARS], doc_tokens=t.doc_tokens,
               turns=len(t.turns), generated=t.response_tokens, truncated=t.truncated, chunks_read=t.chunks_read, chunks_unread=t.chunks_unread,
               memory_updates=t.memory_updates, exit_chunk=t.exit_chunk, malformed=t.malformed, ungrounded=t.ungrounded,
               memory=list(t.memory) if ref.index < traces else list(t.memory[-1:]), seconds=t.seconds, finished=finished,
               steps=turn_steps(t) if ref.index < traces else [])
    row = ref.row
    rec.update(scores(t.prediction, row.answers, row.answer_kind),
               answer_recall=answer_recall(t.answer, row.answers, row.answer_kind))
    return rec


def turn_steps(t: Trajectory) -> list[dict]:
    """What a trace shows of each turn, in order (the chunk turns, then the final one)."""
    return [{"prompt_tokens": len(turn.prompt_ids), "generated": len(turn.response_ids),
             "seconds": float(turn.seconds), "gate": turn.gate, "final": turn.is_final} for turn in t.turns]


def quarantine_record(ref: RowRef, reason: str) -> dict:
    """A row that could not run (a full document beyond the window, an empty question): scored as
    nothing, its reason in `error`, so its cell reads n/a instead of losing the row."""
    _, length, method = ref.cell
    rec = base_record(ref.row, method, length, ref.index)
    rec["error"] = reason.removeprefix("UserError: ")
    return rec


def gate_metrics(cell: Cell, records: list[dict]) -> dict[str, float]:
    """A memory-agent cell's gate metrics (gate/{task}/{length}/...) over its rows that ran;
    none for the baselines and for cells recorded before the gates."""
    task, length, method = cell
    ran = [r for r in records if r.get("error") is None and r.get("chunks_read")]
    if method != "memagent" or not ran:
        return {}
    values = gate_rates(*(sum(r[k] for r in ran) for k in ("chunks_read", "chunks_unread", "memory_updates", "malformed")))
    return {gate_metric(name, task, length): v for name, v in values.items()}
