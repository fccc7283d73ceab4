"""The gates in answers and batch jobs (issue 36): answers and rows carry the counts, a job sums
them once over its shards (old shards without the columns included), and its MLflow figures are
the training's gate/ metrics. No Ray, no model: a replica's core on a scripted engine."""

import asyncio
import json
from dataclasses import asdict

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.agent import AgentConfig
from pipelines.agent.gates import EXIT, KEEP
from pipelines.agent.turns import Response
from pipelines.engine import EngineConfig
from pipelines.serve.config import ServeConfig
from pipelines.serve.documents import Reading
from pipelines.serve.jobs import OUTPUT_SCHEMA, ShardCounts, finished_shards, job_id_for, shard_counts, write_shard
from pipelines.serve.jobstore import JobState
from pipelines.serve.replica import AgentCore, ReplicaSettings
from pipelines.serve.runner import JobRunner
from pipelines.serve.schema import GATE_FIELDS, Answered, OutputRow
from pipelines.serve.tracking import job_figures
from pipelines.storage import resolve
from pipelines.track.metrics import GATE, SERVE, check_names

GATES = {"chunks_read": 4, "chunks_unread": 6, "memory_updates": 2, "exit_chunk": 4, "malformed": 1}
# the columns a shard had before the gates, and before chunks_unread and malformed
BEFORE_GATES = [n for n in OUTPUT_SCHEMA.names if n not in GATE_FIELDS]
BEFORE_UNREAD = BEFORE_GATES + ["chunks_read", "memory_updates", "exit_chunk"]


def test_an_answer_and_its_batch_row_carry_the_gates():
    a = Answered("\\boxed{42}", "42", 5, 128, 0.5, 3, **GATES, memory=["m", "m", "m2", "m2"])
    body = a.body(show_memory=False)
    assert "memory" not in body and {k: body[k] for k in GATE_FIELDS} == GATES
    assert a.body(show_memory=True)["memory"] == ["m", "m", "m2", "m2"]
    row = OutputRow.answered({"id": "r", "question": "q?", "doc_id": None}, a)
    assert {k: getattr(row, k) for k in GATE_FIELDS} == GATES
    assert (row.id, row.tokens, row.turns, row.model_version, row.memory, row.error) == ("r", 128, 5, 3, a.memory, None)


def test_chunks_left_unread_by_an_exit():
    tokens = Reading([], 100, "tokens")
    assert tokens.chunks_unread(32, 16, exited=True) == 5  # 68 tokens left: four whole chunks and a short one
    assert tokens.chunks_unread(100, 16, exited=False) == 0
    streamed = Reading([], 5000, "bytes")  # a uri: its length in tokens is not known
    assert streamed.chunks_unread(32, 16, exited=True) is None and streamed.chunks_unread(32, 16, exited=False) == 0


class ScriptedEngine:
    """An engine stand-in that answers each turn with the next text of its script."""

    def __init__(self, tokenizer, script: list[str]):
        self.tokenizer, self.script, self.version = tokenizer, script, 0

    async def generate(self, request) -> Response:
        text = self.script.pop(0)
        return Response(self.tokenizer.encode(text, add_special_tokens=False), text)


def test_a_replica_answers_and_rows_say_what_the_gates_did(tmp_path, tokenizer):
    """Keep, then exit: 2 chunks read, 1 update, the rest unread (by count for text, unknown for a
    uri); a malformed marker is counted, the answer body, its stream and the batch row alike."""
    agent = AgentConfig(gates=True, template="gated", chunk_size=16, memory_budget=16, final_budget=8)
    settings = ReplicaSettings("scripted", "", "", EngineConfig(kind="hf"), agent,
                               ServeConfig(allowed_paths=(str(tmp_path),)))
    document = " ".join(f"Sentence {i} says nothing at all." for i in range(12))
    n = -(-len(tokenizer.encode(document, add_special_tokens=False)) // 16)
    (tmp_path / "doc.txt").write_text(document)
    exits = [KEEP, f"code 42 {EXIT}", "\\boxed{42}"]
    core = AgentCore(settings, ScriptedEngine(tokenizer, exits * 4 + ["[EXIT] code 42", "\\boxed{42}"]), "scripted")
    question = "What is the code?"

    async def run():
        body = {"question": question, "document": document}
        events = [e async for e in core.answer_events(body)]
        return (await core.answer(body), events, await core.answer_row({"id": "r", **body}),
                await core.answer({"question": question, "uri": str(tmp_path / "doc.txt")}),
                await core.answer({"question": question, "document": "A short one."}))

    reply, events, row, by_uri, malformed = asyncio.run(run())
    gates = {"chunks_read": 2, "chunks_unread": n - 2, "memory_updates": 1, "exit_chunk": 2, "malformed": 0}
    assert n > 4 and reply.status == 200 and {k: reply.body[k] for k in GATE_FIELDS} == gates
    assert [e["event"] for e in events] == ["start", "kept", "turn", "answer"]
    assert {k: events[-1][k] for k in GATE_FIELDS} == gates
    assert {k: getattr(row, k) for k in GATE_FIELDS} == gates and row.prediction == "42"
    assert {k: by_uri.body[k] for k in GATE_FIELDS} == {**gates, "chunks_unread": None}
    assert {k: malformed.body[k] for k in GATE_FIELDS} == {"chunks_read": 1, "chunks_unread": 0,
                                                           "memory_updates": 1, "exit_chunk": None, "malformed": 1}


def _rows() -> list[OutputRow]:
    return [OutputRow("a", "q", None, tokens=10, **GATES),
            OutputRow("b", "q", None, tokens=20, chunks_read=3, memory_updates=3, exit_chunk=3, chunks_unread=None),
            OutputRow.failed({"id": "c"}, "boom")]


def _old_shard(out: str, k: int, rows: list[OutputRow], columns: list[str]) -> None:
    """Shard k as an older release wrote it: only `columns`."""
    fs, path = resolve(out)
    fs.create_dir(path, recursive=True)
    schema = pa.schema([OUTPUT_SCHEMA.field(n) for n in columns])
    pq.write_table(pa.Table.from_pylist([{n: getattr(r, n) for n in columns} for r in rows], schema=schema),
                   f"{path}/part-{k:06d}.parquet")


def test_a_shard_counts_its_rows_and_an_older_shard_its_columns_it_has(tmp_path):
    """An unknown chunks_unread (a streamed uri that exited) counts 0; a column a shard lacks too."""
    counts = ShardCounts.of_rows(_rows())
    assert counts == ShardCounts(rows=3, errors=1, tokens=30, chunks_read=7, chunks_unread=6, memory_updates=5,
                                 malformed=1)
    out = str(tmp_path / "out")
    write_shard(out, 0, _rows())
    _old_shard(out, 1, _rows(), BEFORE_UNREAD)
    _old_shard(out, 2, _rows(), BEFORE_GATES)
    fs, _ = resolve(out)
    found = {k: shard_counts(fs, p) for k, p in finished_shards(out).items()}
    assert found == {0: counts, 1: ShardCounts(3, 1, 30, chunks_read=7, memory_updates=5),
                     2: ShardCounts(3, 1, 30)}
    assert ShardCounts.from_record({"k": 0, **asdict(counts), "started": 1.0}) == counts


def test_a_job_resumed_over_older_shards_counts_each_shard_once(tmp_path):
    """A job stopped under an older release resumes: its shards count what they hold, the new
    ones their gates; a second resume of the finished job counts the same."""
    src, out = tmp_path / "in.jsonl", str(tmp_path / "out")
    src.write_text("".join(json.dumps({"id": f"r{i}", "question": "q", "document": "d"}) + "\n" for i in range(9)))
    _old_shard(out, 0, _rows(), BEFORE_GATES)

    async def answer(row):
        return OutputRow(row["id"], row["question"], None, tokens=10, **GATES)

    state = JobState(job_id_for(str(src), out), str(src), out, shard_rows=3)
    for _ in range(2):
        state = asyncio.run(JobRunner(state, answer, rows_in_flight=2, shards_in_flight=1).run())
        assert state.status == "done" and (state.done, state.errors, state.tokens) == (9, 1, 90), state.message
        assert (state.chunks_read, state.chunks_unread, state.memory_updates, state.malformed) == (24, 36, 12, 6)
    rows = pq.read_table(out, schema=OUTPUT_SCHEMA).to_pylist()  # the old shard's gate columns read as null
    assert [r["id"] for r in rows] == ["a", "b", "c", *(f"r{i}" for i in range(3, 9))]
    assert rows[0]["chunks_read"] is None and rows[3]["chunks_read"] == 4


def test_job_figures_are_the_gate_metrics_of_every_row():
    state = JobState("j", "in", "out", 4, done=10, errors=1, chunks_read=40, chunks_unread=10, memory_updates=10,
                     malformed=2)
    figures = job_figures(state)
    assert not check_names(figures, SERVE + GATE)
    assert {k: figures[k] for k in GATE} == {"gate/update_rate": 0.25, "gate/exit_fraction": 0.2,
                                            "gate/malformed": 2.0}
    ungated = job_figures(JobState("j", "in", "out", 4, done=10, chunks_read=40, memory_updates=40))
    assert {k: ungated[k] for k in GATE} == {"gate/update_rate": 1.0, "gate/exit_fraction": 0.0,
                                             "gate/malformed": 0.0}
    assert {k: job_figures(JobState("j", "in", "out", 4))[k] for k in GATE} == dict.fromkeys(GATE, 0.0)
