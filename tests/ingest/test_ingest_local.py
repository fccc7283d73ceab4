"""Ingest core without Ray: readers, batching, the store reader, the manifest, task rows."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from pipelines.agent.codec import ChatCodec
from pipelines.errors import UserError
from pipelines.ingest.config import IngestConfig
from pipelines.ingest.pipeline import ingest
from pipelines.ingest.sources import list_sources, split_glob
from pipelines.data.store import ChunkStore, chunk_path
from pipelines.agent.reward import score
from pipelines.data.tasks import TaskRow, read_task_rows, task_chunks, write_task_rows
from pipelines.ingest.tokenize import split_pieces, tokenize_docs
from pipelines.ingest.readers import Doc
from tests.ingest.corpus import mixed_corpus, quarantine_map

CFG = IngestConfig(runner="local", chunk_size=16, row_group_chunks=4, batch_chars=2048, piece_chars=1500)


def write_tree(root, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def test_split_pieces_cut_at_whitespace_and_rejoin():
    text = "word " * 1000 + "x" * 3000 + " tail"
    pieces = list(split_pieces([text[i:i + 777] for i in range(0, len(text), 777)], 1024))
    assert "".join(pieces) == text
    word_pairs = [(a, b) for a, b in zip(pieces, pieces[1:]) if "x" not in a + b]
    assert word_pairs and all(b[0].isspace() for a, b in word_pairs)
    assert max(len(p) for p in pieces) <= 1024


def test_tokenize_docs_keeps_order_and_matches_direct_encoding(tokenizer):
    docs = [Doc(f"d{i}", [f"document number {i} " * (i * 40 + 1)]) for i in range(12)]
    enc = lambda texts: [tokenizer.encode(t, add_special_tokens=False) for t in texts]  # noqa: E731
    out = list(tokenize_docs(docs, enc, batch_chars=3000, piece_chars=2000))
    assert [d.doc_id for d in out] == [f"d{i}" for i in range(12)]
    for d, src in zip(out, docs):
        assert tokenizer.decode(d.ids) == src.blocks[0]


def test_split_glob():
    assert split_glob("s3://b/data/x/*.jsonl") == ("s3://b/data/x", "*.jsonl")
    assert split_glob("/tmp/a") == ("/tmp/a", None)


def test_local_ingest_round_trip_quarantine_and_manifest(tmp_path, tokenizer, home):
    files, docs, expected_q = mixed_corpus()
    write_tree(tmp_path / "corpus", files)
    store_uri = str(tmp_path / "store")
    summary = ingest(str(tmp_path / "corpus"), store_uri, CFG, "smollm2", home)
    assert (summary.documents, summary.not_matching, summary.refused_objects) == (len(docs), 1, 5)
    store = ChunkStore(store_uri)
    assert sorted(store.doc_ids()) == sorted(docs) and store.count() == len(docs)
    for doc_id, text in docs.items():
        chunks = list(store.iter_chunk_ids(doc_id))
        info = store.info(doc_id)
        assert len(chunks) == info.n_chunks and all(len(c) == 16 for c in chunks[:-1])
        assert tokenizer.decode([i for c in chunks for i in c]) == text
        assert "".join(store.iter_texts(doc_id)) == text
    got_q = quarantine_map(store.view())
    for where, reason in expected_q.items():
        assert reason in got_q[where.replace("bad/", "bad/")] if where in got_q else False, (where, got_q)
    entries = store.view().objects
    assert {e.status for e in entries.values()} == {"done", "quarantined"} and len(entries) == 10
    again = ingest(str(tmp_path / "corpus"), store_uri, CFG, "smollm2", home)
    assert (again.objects, again.already) == (0, 10)


def test_reading_one_doc_touches_only_its_row_groups(tmp_path, home):
    text = "\n".join(f"line {i} of a long document" for i in range(400))
    write_tree(tmp_path / "c", {"big.txt": text.encode(), "small.txt": b"just a few words here"})
    ingest(str(tmp_path / "c"), str(tmp_path / "s"), CFG, "smollm2", home)
    store = ChunkStore(str(tmp_path / "s"))
    info = store.info("big.txt")
    meta = pq.ParquetFile(chunk_path(store.root, store._loc("big.txt").file.file)).metadata
    assert meta.num_row_groups == -(-info.n_chunks // 4)
    first = next(store.iter_chunk_ids("big.txt"))
    assert len(first) == 16
    with pytest.raises(UserError, match="doc_id 'nope': not in store"):
        store.info("nope")


def test_changed_object_replaces_old_rows(tmp_path, home):
    write_tree(tmp_path / "c", {"a.jsonl": b'{"id": "x", "text": "old text"}\n{"id": "y", "text": "gone"}\n'})
    ingest(str(tmp_path / "c"), str(tmp_path / "s"), CFG, "smollm2", home)
    write_tree(tmp_path / "c", {"a.jsonl": b'{"id": "x", "text": "new longer text"}\n'})
    summary = ingest(str(tmp_path / "c"), str(tmp_path / "s"), CFG, "smollm2", home)
    store = ChunkStore(str(tmp_path / "s"))
    assert summary.objects == 1 and list(store.doc_ids()) == ["x"]
    assert "".join(store.iter_texts("x")) == "new longer text"
    assert len(list((tmp_path / "s" / "chunks").iterdir())) == 1


def test_duplicate_doc_ids_across_objects_are_quarantined(tmp_path, home):
    write_tree(tmp_path / "c", {"a.jsonl": b'{"id": "x", "text": "one"}\n', "b.jsonl": b'{"id": "x", "text": "two"}\n'})
    ingest(str(tmp_path / "c"), str(tmp_path / "s"), CFG, "smollm2", home)
    store = ChunkStore(str(tmp_path / "s"))
    assert list(store.doc_ids()) == ["x"] and store.count() == 1
    assert "".join(store.iter_texts("x")) == "one"
    assert any("duplicate doc_id 'x'" in q.reason for q in store.view().quarantine)


def test_listing_errors_are_one_line(tmp_path):
    with pytest.raises(UserError, match="no such file, folder or prefix"):
        list_sources(str(tmp_path / "missing"), CFG.patterns)


def test_task_rows_round_trip_chunks_and_scores(tmp_path, tokenizer, home):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "d.txt").write_text("The answer is forty two. " * 20)
    ingest(str(tmp_path / "c"), str(tmp_path / "s"), CFG, "smollm2", home)
    rows = [TaskRow("a", "q?", ["forty two"], "one_of", "d.txt", None, 120, "t", "eval"),
            TaskRow("b", "q?", ["alpha", "beta"], "all_of", None, "inline context here", 3, "t", "train")]
    assert write_task_rows(rows, str(tmp_path / "rows")) == 2
    back = list(read_task_rows(str(tmp_path / "rows")))
    assert back == rows
    store, codec = ChunkStore(str(tmp_path / "s")), ChatCodec(tokenizer)
    chunks = list(task_chunks(back[0], store, codec, 50))
    assert [len(c) for c in chunks[:-1]] == [50] * (len(chunks) - 1)
    assert tokenizer.decode([i for c in chunks for i in c]) == "The answer is forty two. " * 20
    assert [i for c in task_chunks(back[1], None, codec, 2) for i in c] == codec.encode("inline context here")
    one, every = back
    assert score("sub_em", "It is Forty-Two.", one.answers, one.answer_kind) == 0.0
    assert score("em", "forty two", one.answers, one.answer_kind) == 1.0
    assert [score(m, "beta and alpha", every.answers, every.answer_kind) for m in ("em", "sub_em", "f1")] == [1.0] * 3
    assert score("sub_em", "only alpha", every.answers, every.answer_kind) == 0.5


def test_task_chunks_refuses_another_tokenizer(tmp_path, home):
    from transformers import AutoTokenizer

    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "d.txt").write_text("some text")
    ingest(str(tmp_path / "c"), str(tmp_path / "s"), CFG, "smollm2", home)
    other = AutoTokenizer.from_pretrained(str(home / "models" / "smollm2"))
    other.add_tokens(["<extra-token>"])
    row = TaskRow("a", "q", ["x"], "one_of", "d.txt", None, 2, "t", "eval")
    with pytest.raises(UserError, match="stored with tokenizer"):
        next(task_chunks(row, ChunkStore(str(tmp_path / "s")), ChatCodec(other), 8))
    with pytest.raises(UserError, match="answer_kind"):
        TaskRow("a", "q", ["x"], "some_of", "d", None, 1, "t", "eval")


def test_chunk_texts_join_exactly_when_characters_straddle_chunks(tmp_path, tokenizer):
    from array import array

    from pipelines.ingest.worker import ObjectIngester

    text = "\U0001F600\u00e9\u4e2d\u6587 mixed " * 300
    worker = ObjectIngester(str(tmp_path / "s"), IngestConfig(chunk_size=3), tokenizer=tokenizer)
    ids = array("i", tokenizer.encode(text, add_special_tokens=False))
    pairs = list(worker.chunks_with_text(ids, group=8))
    assert len(pairs) > 64 and [i for c, _ in pairs for i in c] == list(ids)
    assert "".join(t for _, t in pairs) == text


def test_glob_and_single_file_sources(tmp_path):
    write_tree(tmp_path / "c", {"a.jsonl": b"{}", "sub/b.jsonl": b"{}", "c.txt": b"x", "d.bin": b"\x00"})
    objs, skipped = list_sources(str(tmp_path / "c" / "*.jsonl"), CFG.patterns)
    assert [o.rel for o in objs] == ["a.jsonl"] and skipped == []
    objs, skipped = list_sources(str(tmp_path / "c"), CFG.patterns)
    assert [o.rel for o in objs] == ["a.jsonl", "c.txt", "sub/b.jsonl"] and skipped == [str(tmp_path / "c" / "d.bin")]
    objs, _ = list_sources(str(tmp_path / "c" / "c.txt"), CFG.patterns)
    assert [(o.rel, o.fmt, o.size) for o in objs] == [("c.txt", "text", 1)]
    objs, _ = list_sources(str(tmp_path / "c" / "**" / "*.jsonl"), CFG.patterns)
    assert [o.rel for o in objs] == ["a.jsonl", "sub/b.jsonl"]
