"""Serve's pure parts, no Ray and no engine: body parsing, documents, batch shards, resumption."""

import asyncio
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.agent.codec import ChatCodec
from pipelines.serve.access import Access
from pipelines.serve.settings import check_binding
from pipelines.serve.documents import (DocLimits, DocumentError, DocumentNotFound, Documents, DocumentTooLong,
                                       NoDocument)
from pipelines.serve.gateway import http_status
from pipelines.serve.jobs import (OUTPUT_SCHEMA, count_rows, finished_shards, iter_rows, iter_shards,
                                  job_id_for, request_of)
from pipelines.serve.jobstore import JobState, JobStatus, JobStore
from pipelines.serve.runner import JobRunner
from pipelines.serve.schema import AnswerRequest, ChatRequest, OutputRow, Reply, ServeError, parse_body
from pipelines.errors import UserError


@pytest.mark.parametrize("raw,status,reason", [
    (b"{not json", 400, "malformed JSON"),
    (b"[1, 2]", 400, "expected a JSON object"),
    (b'{"document": "x"}', 422, "question: missing"),
    (b'{"question": "q"}', 422, "exactly one of document, doc_id, uri"),
    (b'{"question": "q", "document": "d", "uri": "/x"}', 422, "exactly one of"),
    (b'{"question": "  ", "document": "d"}', 422, "question: empty"),
    (b'{"question": "q", "document": "d", "colour": 1}', 422, "colour"),
    (b'{"question": "q", "document": "' + b"x" * 200 + b'"}', 413, "limit of 100"),
])
def test_answer_body_errors_are_one_line(raw, status, reason):
    with pytest.raises(ServeError) as e:
        parse_body(raw, AnswerRequest, limit=100)
    assert e.value.status == status
    assert reason in str(e.value) and "\n" not in str(e.value)


def test_chat_body_accepts_openai_fields_and_refuses_unsupported_ones():
    ok = parse_body(json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                "max_tokens": 4, "user": "u1", "stream": True, "stream_options": {"include_usage": True},
                                "n": 2, "stop": "x"}).encode(), ChatRequest, 10_000)
    assert ok.max_tokens == 4 and ok.messages[0].content == "hi" and ok.stops == ("x",) and ok.n == 2
    for extra, reason in [({"stream_options": {"include_usage": True}}, "stream_options: only allowed with stream"),
                          ({"n": 0}, "n:"), ({"n": 17}, "n:"), ({"stop": ["a", "b", "c", "d", "e"]}, "at most 4"),
                          ({"stop": [""]}, "stop: an empty string")]:
        body = {"messages": [{"role": "user", "content": "hi"}], **extra}
        with pytest.raises(ServeError, match=reason):
            parse_body(json.dumps(body).encode(), ChatRequest, 10_000)


def test_non_loopback_needs_a_token():
    check_binding("127.0.0.1", None, "T")
    check_binding("0.0.0.0", "secret", "T")
    with pytest.raises(UserError, match="--host 0.0.0.0: .*token.*set T"):
        check_binding("0.0.0.0", None, "T")


def test_documents_text_uri_and_limits(tmp_path, tokenizer):
    docs = Documents(ChatCodec(tokenizer), DocLimits(chunk_size=16, max_doc_tokens=100), store_uri=None,
                     access=Access.of([str(tmp_path)], []))
    text = "The grass is green. " * 10
    chunks = list(docs.chunks(document=text))
    assert sum(chunks, []) == tokenizer.encode(text, add_special_tokens=False)
    assert all(len(c) == 16 for c in chunks[:-1])
    (tmp_path / "d.txt").write_text(text)
    assert list(docs.chunks(uri=str(tmp_path / "d.txt"))) == chunks
    cases = [(dict(document="word " * 500), DocumentTooLong, 413, "max_doc_tokens=100"),
             (dict(document="   "), DocumentError, 400, "empty"),
             (dict(uri=str(tmp_path / "missing.txt")), DocumentError, 400, "no such file"),
             (dict(doc_id="d1"), DocumentError, 400, "no chunk store"),
             ({}, NoDocument, 422, "give one of")]
    (tmp_path / "long.txt").write_text("word " * 300)  # under the byte pre-check, over in tokens
    cases.append((dict(uri=str(tmp_path / "long.txt")), DocumentTooLong, 413, "longer than max_doc_tokens"))
    for kwargs, error, status, reason in cases:
        with pytest.raises(error, match=reason) as e:
            list(docs.chunks(**kwargs))
        assert type(e.value) is error and http_status(Reply.failure(e.value)) == status  # the gateway's status
    stored = Documents(ChatCodec(tokenizer), DocLimits(chunk_size=16, max_doc_tokens=100), str(tmp_path / "empty"))
    with pytest.raises(DocumentNotFound, match="doc_id 'd1': not in store") as e:
        stored.chunks(doc_id="d1")
    assert http_status(Reply.failure(e.value)) == 404
    with pytest.raises(ServeError) as e:  # the access rule's own 403 passes through as it is
        docs.chunks(uri="/etc/passwd")
    assert http_status(Reply.failure(e.value)) == 403


def test_rows_from_jsonl_and_parquet_with_task_row_columns(tmp_path):
    lines = [json.dumps({"id": "a", "question": "q1", "document": "d"}), "{broken",
             json.dumps({"sample_id": "s", "question": "q2", "context": "c"}),
             json.dumps({"question": "", "doc_id": "x"}), json.dumps({"question": "q3"})]
    (tmp_path / "rows.jsonl").write_text("\n".join(lines) + "\n\n")
    rows = [request_of(r, i) for i, r in enumerate(iter_rows(str(tmp_path / "rows.jsonl")))]
    assert [r["id"] for r in rows] == ["a", "1", "s", "3", "4"]
    assert rows[0]["error"] is None and rows[2]["document"] == "c" and rows[2]["error"] is None
    assert "rows.jsonl:2: malformed JSON" in rows[1]["error"]
    assert rows[3]["error"] == "question: missing or empty"
    assert "exactly one of" in rows[4]["error"]
    pq.write_table(pa.Table.from_pylist([{"question": f"q{i}", "doc_id": f"d{i}"} for i in range(7)]),
                   tmp_path / "rows.parquet")
    assert count_rows(str(tmp_path / "rows.parquet")) == 7
    shards = list(iter_shards(iter_rows(str(tmp_path / "rows.parquet"), batch_rows=2), 3))
    assert [(k, [r["id"] for r in s]) for k, s in shards] == [(0, ["0", "1", "2"]), (1, ["3", "4", "5"]), (2, ["6"])]
    with pytest.raises(UserError, match="no such file or folder"):
        list(iter_rows(str(tmp_path / "nope")))


async def _echo(row: dict) -> OutputRow:
    await asyncio.sleep(0)
    return OutputRow(id=row["id"], question=row["question"], doc_id=row["doc_id"], answer="a", prediction=None,
                     memory=["m"], turns=2, tokens=10, seconds=0.1, model_version=0, error=row["error"],
                     chunks_read=3, memory_updates=2, exit_chunk=3, chunks_unread=1)


def test_runner_resumes_from_finished_shards_without_duplicates(tmp_path):
    """A job stopped after some shards redoes only the missing ones."""
    src, out = tmp_path / "in.jsonl", str(tmp_path / "out")
    src.write_text("".join(json.dumps({"id": f"r{i}", "question": "q", "document": "d"}) + "\n" for i in range(23)))
    calls: list[str] = []

    async def answer(row):
        calls.append(row["id"])
        if len(calls) > 12 and not resumed:
            raise asyncio.CancelledError  # the "app" dies mid-job
        return await _echo(row)

    state = JobState(job_id_for(str(src), out), str(src), out, shard_rows=5)
    resumed = False
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(JobRunner(state, answer, rows_in_flight=3, shards_in_flight=1).run())
    assert JobStore().load(out).status == "interrupted"
    first = set(finished_shards(out))
    assert first and first != {0, 1, 2, 3, 4}
    resumed, calls[:] = True, []
    final = asyncio.run(JobRunner(JobStore().load(out), answer, rows_in_flight=3, shards_in_flight=2).run())
    assert final.status == "done" and final.done == final.total == 23, final.message
    assert not {c for c in calls} & {f"r{i}" for k in first for i in range(k * 5, k * 5 + 5)}
    ids = pq.read_table(out).column("id").to_pylist()
    assert sorted(ids) == sorted(f"r{i}" for i in range(23))
    assert JobStore().load(out).public()["done"] == 23
    # the gates' sums count each row once, though the first run's shards were counted before the stop
    assert (final.chunks_read, final.memory_updates, final.chunks_unread, final.malformed) == (69, 46, 23, 0)


def _runner_peak_bytes(tmp_path, rows: int) -> int:
    """Peak Python memory while a job of `rows` 4 KB documents runs (answers echoed at once: the
    engine's own memory does not depend on the job's size)."""
    import tracemalloc

    src, out = tmp_path / f"in-{rows}.jsonl", str(tmp_path / f"out-{rows}")
    doc = "lorem ipsum " * 340
    with src.open("w") as f:
        for i in range(rows):
            f.write(json.dumps({"id": f"r{i}", "question": "q", "document": doc}) + "\n")
    state = JobState(job_id_for(str(src), out), str(src), out, shard_rows=64)
    tracemalloc.start()
    try:
        final = asyncio.run(JobRunner(state, _echo, rows_in_flight=32, shards_in_flight=2).run())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert final.status == "done" and final.done == rows, final.message
    return peak


def test_runner_memory_does_not_grow_with_job_size(tmp_path):
    _runner_peak_bytes(tmp_path, 100)  # first use: imports and caches, not the job
    small, large = _runner_peak_bytes(tmp_path, 500), _runner_peak_bytes(tmp_path, 4000)
    assert large < 1.5 * small, (small, large)  # 8x the rows (16 MB of documents), about the same peak


def test_output_schema_derives_from_the_row_type():
    """The shard files' contract: these columns and types (resumed jobs mix old and new shards)."""
    assert OUTPUT_SCHEMA == pa.schema([
        ("id", pa.string()), ("question", pa.string()), ("doc_id", pa.string()), ("answer", pa.string()),
        ("prediction", pa.string()), ("memory", pa.list_(pa.string())), ("turns", pa.int32()),
        ("tokens", pa.int64()), ("seconds", pa.float64()), ("model_version", pa.int64()), ("error", pa.string()),
        ("chunks_read", pa.int32()), ("memory_updates", pa.int32()), ("exit_chunk", pa.int32()),
        ("chunks_unread", pa.int32()), ("malformed", pa.int32()),
    ])
    failed = OutputRow.failed({"id": "r", "question": "q"}, "boom", 3)
    assert (failed.doc_id, failed.turns, failed.tokens, failed.model_version, failed.error) == (None, 0, 0, 3, "boom")


def test_job_state_round_trips_with_a_typed_status(tmp_path):
    store = JobStore(str(tmp_path / "state"))
    state = JobState("abc", "in.jsonl", str(tmp_path / "out"), shard_rows=4)
    store.save(state)
    store.register(state)
    loaded = store.load(str(tmp_path / "out"))
    assert loaded.status is JobStatus.QUEUED and loaded == state
    assert store.get("abc") == state and store.get("nope") is None and store.get("../x") is None
    assert store.entries() == [{"job_id": "abc", "input": "in.jsonl", "output": str(tmp_path / "out")}]
    state.start()
    state.interrupt()
    assert state.status == "interrupted" and not state.status.terminal
    state.cancel()
    state.interrupt()  # a cancelled job stays cancelled when its task stops
    assert state.status is JobStatus.CANCELLED and state.status.terminal and state.public()["status"] == "cancelled"


def test_reply_failure_is_one_line_with_its_status():
    assert Reply.failure(ServeError("uri 'x': outside", 403)) == Reply(status=403, error="uri 'x': outside")
    assert Reply.failure(UserError("model 'm': no such folder")) == Reply(status=400, error="model 'm': no such folder")
    assert Reply({"ok": 1}).error is None


def test_a_500_names_a_request_id_and_logs_the_traceback_under_it(caplog):
    import re

    try:
        raise RuntimeError("/srv/secret/path/model.bin: broken")
    except RuntimeError as e:
        reply = Reply.failure(e)
    assert reply.status == 500 and "/srv" not in reply.error
    rid = re.fullmatch(r"internal error \(request id ([0-9a-f]{12})\)", reply.error).group(1)
    logged = next(r for r in caplog.records if rid in r.getMessage())
    # the traceback rides on the record (as exc_text once a command's redaction filter has run)
    shown = logged.exc_text or (str(logged.exc_info[1]) if logged.exc_info else "")
    assert "/srv/secret/path" in shown


def test_a_reload_names_only_listed_models_and_confined_paths(tmp_path):
    from pipelines.serve.access import Access, check_model, reload_names

    names = reload_names("models:/memagent@production", None)
    assert names[0] == "memagent" and "smollm2" in names
    rule = Access.of([str(tmp_path)], ["s3://models/ok"])
    for ref in ("models:/memagent/3", "models:/memagent@candidate", "smollm2", str(tmp_path / "m"),
                "s3://models/ok/v2"):
        assert check_model(ref, rule, names) == ref
    for ref, why in (("models:/other/1", "serve.allowed_models"), ("/etc", "allowed paths"),
                     (str(tmp_path / ".." / "x"), "allowed paths"), ("s3://models/evil", "s3:// prefixes")):
        with pytest.raises(ServeError, match=why) as e:
            check_model(ref, rule, names)
        assert e.value.status == 403
    assert reload_names("smollm2", ("a",)) == ("a",)


def test_a_kept_turn_streams_as_a_kept_event():
    from pipelines.agent import AgentResult, TurnRecord
    from pipelines.serve.documents import Reading
    from pipelines.serve.replica import turn_event

    progress = AgentResult("q?", doc_tokens=20, memory=["m", "m"])
    reading = Reading([], 40, "tokens")
    for gate, event in (("updated", "turn"), ("kept", "kept"), ("exited", "turn")):
        progress.turns[:] = [TurnRecord([], [1], None, "stop", False, 8, 0, 0, 0.25, gate)] * 2
        e = turn_event(progress, reading, 1.0)
        assert (e["event"], e["gate"], e["turn"], e["memory"], e["tokens_read"]) == (event, gate, 2, "m", 20)


def test_batch_jobs_together_hold_only_their_share_of_the_replicas_slots(tmp_path):
    """Two jobs at once: their rows in flight never pass serve.job_share of replicas x
    max_ongoing_requests (the rest stays for interactive requests), and both finish whole."""
    from types import SimpleNamespace

    from pipelines.serve.config import ServeConfig
    from pipelines.serve.manager import JobManager

    live, peak = 0, 0

    async def answer_row(row):
        nonlocal live, peak
        live += 1
        peak = max(peak, live)
        await asyncio.sleep(0.01)
        live -= 1
        return await _echo({**row, "doc_id": None, "error": None})

    cfg = ServeConfig(replicas=2, max_ongoing_requests=4, job_share=0.5, allowed_paths=[str(tmp_path)])
    manager = JobManager(answer_row, SimpleNamespace(serve=cfg, state_dir=str(tmp_path / "state")))
    for name in ("a", "b"):
        (tmp_path / f"{name}.jsonl").write_text(
            "".join(json.dumps({"id": f"{name}{i}", "question": "q", "document": "d"}) + "\n" for i in range(20)))

    async def both():
        for name in ("a", "b"):
            assert (await manager.submit(str(tmp_path / f"{name}.jsonl"), str(tmp_path / f"out-{name}"))).status == 202
        return await asyncio.gather(*manager.tasks.values())

    finals = asyncio.run(both())
    assert manager.job_slots == 4 and peak == 4
    assert [f.done for f in finals] == [20, 20] and all(f.status == "done" for f in finals)
