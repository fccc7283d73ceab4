"""`data import`: a user's QA rows -> task rows + documents in the store, through the real ingest
(in-process runner), bad rows quarantined, broken files refused on one line, an input on a real
SeaweedFS, and SFT traces built from the imported rows."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.config import load_config
from pipelines.errors import UserError
from pipelines.ingest.answer_evidence import MAX_SENTENCE, answer_evidence
from pipelines.ingest.pipeline import ingest
from pipelines.data.store import ChunkStore
from pipelines.data.tasks import read_task_rows
from pipelines.ingest.user_data import ImportRequest, import_rows, quarantine_uri
from tests.support import run_cli

OVERRIDES = ["ingest.runner=local", "ingest.chunk_size=16", "ingest.row_group_chunks=4"]
FILLER = "The weather report mentioned clouds over the hills and a light wind from the west. "
TOWER = FILLER * 3 + "The Eiffel Tower was finished in Paris in 1889, after two years of work. " + FILLER * 2
RIVER = "Rivers.\nThe longest river of the region is the Amber, it runs north!\n" + FILLER * 4
STORED = FILLER * 2 + "Marie Curie won the Nobel Prize twice. " + FILLER
GOOD = {  # sample id -> (row as given, the document's text)
    "tower": ({"id": "tower", "question": "Where was the tower finished?", "answers": ["Paris", "paris"],
               "document": TOWER}, TOWER),
    "again": ({"id": "again", "question": "When was the tower finished?", "answers": "1889", "document": TOWER,
               "split": "eval"}, TOWER),
    "river": ({"id": "river", "question": "Which river, which way?", "answers": ["amber", "north"],
               "answer_kind": "all_of", "document_uri": "docs/river.txt", "level": "easy"}, RIVER),
    "curie": ({"id": "curie", "question": "Who won twice?", "answers": ["Marie Curie"], "doc_id": "stored-1"},
              STORED),
}
BAD = [  # (row, what its reason says)
    ({"answers": ["x"], "document": "x y"}, "missing question"),
    ({"question": "q", "answers": [], "document": "x y"}, "no answers"),
    ({"question": "q", "document": "x y"}, "no answers"),
    ({"question": "q", "answers": ["x"], "document": "x y", "doc_id": "stored-1"}, "2 document fields"),
    ({"question": "q", "answers": ["x"], "document_uri": "docs/missing.txt"}, "unreadable document_uri"),
    ({"question": "q", "answers": ["x"], "doc_id": "no-such-doc"}, "doc_id 'no-such-doc' not in store"),
    ({"id": "tower", "question": "q", "answers": ["x"], "document": "x y"}, "duplicate id 'tower'"),
]


@pytest.fixture(scope="module")
def cfg():
    return load_config(None, OVERRIDES)


def write_input(folder, fmt: str = "jsonl") -> str:
    (folder / "docs").mkdir(parents=True, exist_ok=True)
    (folder / "docs" / "river.txt").write_text(RIVER)
    rows = [row for row, _ in GOOD.values()] + [row for row, _ in BAD]
    if fmt == "parquet":
        rows = [{k: v for k, v in r.items() if k != "level"} for r in rows]
        for r in rows:
            r["answers"] = [r["answers"]] if isinstance(r.get("answers"), str) else r.get("answers")
        keys = sorted({k for r in rows for k in r})
        pq.write_table(pa.Table.from_pydict({k: [r.get(k) for r in rows] for k in keys}), folder / "qa.parquet")
        return str(folder / "qa.parquet")
    (folder / "qa.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(folder / "qa.jsonl")


def prepared_store(tmp_path, cfg) -> str:
    """A store that already holds the document the `doc_id` row names."""
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "c.jsonl").write_text(json.dumps({"id": "stored-1", "text": STORED}) + "\n")
    store = str(tmp_path / "store")
    ingest(str(tmp_path / "corpus"), store, cfg.ingest, cfg.model.path, cfg.home_path)
    return store


def check_rows(out: str, store_uri: str, tokenizer, split_default: str = "train") -> None:
    store = ChunkStore(store_uri)
    rows = {r.sample_id: r for r in read_task_rows(out)}
    assert sorted(rows) == sorted(GOOD)
    for sid, (given, text) in GOOD.items():
        r = rows[sid]
        answers = [given["answers"]] if isinstance(given["answers"], str) else given["answers"]
        assert (r.question, r.answers, r.answer_kind, r.split, r.task, r.context) == (
            given["question"], answers, given.get("answer_kind", "one_of"), given.get("split", split_default),
            "import", None)
        assert "".join(store.iter_texts(r.doc_id)) == text
        assert r.doc_tokens == store.info(r.doc_id).n_tokens == len(tokenizer.encode(text, add_special_tokens=False))
        ids = [i for c in store.iter_chunk_ids(r.doc_id) for i in c]
        assert r.evidence
        for e in r.evidence:
            assert any(a.lower() in e.text.lower() for a in answers) and e.text in text
            n = len(tokenizer.encode(e.text, add_special_tokens=False))
            assert e.text in tokenizer.decode(ids[max(0, e.offset - 1):e.offset + n + 1])
            assert e.text not in tokenizer.decode(ids[:e.offset])
    assert rows["tower"].doc_id == rows["again"].doc_id
    assert [e.text for e in rows["river"].evidence] == [
        "The longest river of the region is the Amber, it runs north!"]


def quarantined(out: str) -> list[dict]:
    with open(quarantine_uri(out)) as f:
        return [json.loads(line) for line in f]


def test_import_round_trips_good_rows_quarantines_bad_ones_and_reruns_idempotently(tmp_path, cfg, tokenizer):
    store = prepared_store(tmp_path, cfg)
    src, out = write_input(tmp_path / "in"), str(tmp_path / "tasks" / "mine.parquet")
    summary = import_rows(ImportRequest(src, out, store), cfg)
    assert (summary.rows, summary.staged, summary.quarantined, summary.ignored) == (4, 2, len(BAD), {"level"})
    check_rows(out, store, tokenizer)
    records = quarantined(out)
    assert [r["line"] for r in records] == list(range(len(GOOD) + 1, len(GOOD) + len(BAD) + 1))
    for rec, (row, reason) in zip(records, BAD):
        assert reason in rec["reason"] and rec["source"] == src
        assert rec["sample_id"] == row.get("id", f"qa.jsonl#L{rec['line']}")
    assert ChunkStore(store).count() == 3
    again = import_rows(ImportRequest(src, out, store), cfg)
    assert (again.rows, again.staged, again.quarantined, again.ingest) == (4, 0, len(BAD), None)
    check_rows(out, store, tokenizer)
    assert ChunkStore(store).count() == 3 and quarantined(out) == records


def test_parquet_input_into_a_task_folder(tmp_path, cfg, tokenizer):
    store = prepared_store(tmp_path, cfg)
    src, out = write_input(tmp_path / "in", "parquet"), str(tmp_path / "tasks")
    summary = import_rows(ImportRequest(src, out, store, split="eval"), cfg)
    assert (summary.rows, summary.quarantined) == (4, len(BAD)) and summary.quarantine == f"{out}.quarantine.jsonl"
    check_rows(out, store, tokenizer, split_default="eval")
    assert all("#R" in r["sample_id"] or r["sample_id"] == "tower" for r in quarantined(out))


@pytest.mark.parametrize("name,data,message", [
    ("bad.jsonl", b'{"question": "q", "answers": ["a"], "document": "d"}\n\n{"question": oops}\n',
     "bad.jsonl' line 3: malformed JSON"),
    ("list.jsonl", b'["not", "an", "object"]\n', "list.jsonl' line 1: not a JSON object"),
    ("fake.parquet", b"this is not parquet at all", "fake.parquet': not a readable parquet file"),
    ("rows.csv", b"question,answers\n", "rows.csv': unknown format"),
])
def test_a_broken_file_is_one_line_naming_it(tmp_path, cfg, name, data, message):
    (tmp_path / name).write_bytes(data)
    with pytest.raises(UserError, match=message) as err:
        import_rows(ImportRequest(str(tmp_path / name), str(tmp_path / "t.parquet"), str(tmp_path / "s")), cfg)
    assert "\n" not in str(err.value) and not (tmp_path / "t.parquet").exists()


def test_nothing_importable_is_an_error_with_its_quarantine(tmp_path, cfg):
    (tmp_path / "qa.jsonl").write_text(json.dumps({"question": "q", "doc_id": "x"}) + "\n")
    with pytest.raises(UserError, match="nothing could be imported .1 rows quarantined"):
        import_rows(ImportRequest(str(tmp_path / "qa.jsonl"), str(tmp_path / "t.parquet"), str(tmp_path / "s")), cfg)
    assert quarantined(str(tmp_path / "t.parquet"))[0]["reason"] == "no answers"


def test_evidence_offsets_across_chunks_and_long_runs(tokenizer):
    text = "word " * 600 + "the key is 42 here " + "more " * 300 + "Yes. The key 42 again."
    ids = tokenizer.encode(text, add_special_tokens=False)
    chunks = [ids[i:i + 7] for i in range(0, len(ids), 7)]
    pieces = answer_evidence(((tokenizer.decode(c), c) for c in chunks), ["42"], tokenizer.decode)
    assert [p.text for p in pieces][-1] == "The key 42 again." and len(pieces) == 2
    assert len(pieces[0].text) <= MAX_SENTENCE and "42" in pieces[0].text
    for p in pieces:
        n = len(tokenizer.encode(p.text, add_special_tokens=False))
        assert p.text in tokenizer.decode(ids[p.offset:p.offset + n + 1])
    assert answer_evidence([("no answer here.", ids[:3])], ["424"], tokenizer.decode) == ()


def test_sft_traces_from_imported_rows_end_in_the_answer(tmp_path, cfg, tiny_model_dir):
    from pipelines.learn.sftdata import TraceRows

    store = prepared_store(tmp_path, cfg)
    out = str(tmp_path / "t.parquet")
    import_rows(ImportRequest(write_input(tmp_path / "in"), out, store), cfg)
    rows = list(read_task_rows(out))
    agent = load_config(None, ["agent.chunk_size=32", "agent.memory_budget=128", "agent.final_budget=32"]).agent
    table = TraceRows(str(tiny_model_dir), agent, store).table(rows).to_pylist()
    tracer = TraceRows(str(tiny_model_dir), agent, store)
    for r in rows:
        turns = [t for t in table if t["sample_id"] == r.sample_id]
        assert len(turns) > 1 and turns[-1]["is_final"] and not any(t["is_final"] for t in turns[:-1])
        final = tracer.codec.decode(turns[-1]["response_ids"])
        assert final == f"\\boxed{{{', '.join(r.answers) if r.answer_kind == 'all_of' else r.answers[0]}}}"
        memories = [tracer.codec.decode(t["response_ids"]) for t in turns[:-1]]
        assert any(r.evidence[0].text in m for m in memories)


def test_cli_import_from_s3(s3, tmp_path):
    client, bucket = s3.client(), "memagent-test"
    rows = [{"id": "r1", "question": "Which river?", "answers": ["Amber"], "document_uri": "docs/river.txt"},
            {"id": "r2", "question": "q", "answers": ["x"], "document_uri": "docs/gone.txt"}]
    client.put_object(Bucket=bucket, Key="byod/docs/river.txt", Body=RIVER.encode())
    client.put_object(Bucket=bucket, Key="byod/qa.jsonl", Body="".join(json.dumps(r) + "\n" for r in rows).encode())
    out, store = f"s3://{bucket}/byod/tasks/t.parquet", f"s3://{bucket}/byod/store"
    r = run_cli("data", "import", "--input", f"s3://{bucket}/byod/qa.jsonl", "--out", out, "--store", store,
                *OVERRIDES)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "imported 1 task rows" in r.stdout and "quarantined 1 rows" in r.stdout
    (row,) = read_task_rows(out)
    assert row.sample_id == "r1" and "".join(ChunkStore(store).iter_texts(row.doc_id)) == RIVER
    body = client.get_object(Bucket=bucket, Key="byod/tasks/t.quarantine.jsonl")["Body"].read().decode()
    assert json.loads(body)["sample_id"] == "r2" and "gone.txt" in json.loads(body)["reason"]
    bad = run_cli("data", "import", "--input", f"s3://{bucket}/byod/docs/river.txt", "--out", out, *OVERRIDES)
    assert bad.returncode == 2 and "unknown format" in bad.stderr and "Traceback" not in bad.stderr
