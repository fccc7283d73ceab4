"""The Ray Data ingest against a real SeaweedFS: s3:// corpus -> s3:// store, bad input,
re-runs, and a real process kill midway followed by a resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from pipelines.data.manifest import list_parquet
from pipelines.data.store import ChunkStore
from tests.support import REPO, run_cli
from tests.ingest.corpus import mixed_corpus, quarantine_map

pytestmark = pytest.mark.slow
BUCKET = "memagent-test"


def upload(s3, prefix: str, files: dict[str, bytes]) -> None:
    client = s3.client()
    for rel, data in files.items():
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{rel}", Body=data)


def test_mixed_corpus_s3_to_s3(s3, tokenizer):
    files, docs, expected_q = mixed_corpus()
    upload(s3, "corpus", files)
    store_uri = f"s3://{BUCKET}/store"
    r = run_cli("ingest", "--source", f"s3://{BUCKET}/corpus", "--store", store_uri,
                "ingest.chunk_size=16", "ingest.workers=2", "ingest.row_group_chunks=4")
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"{len(docs)} documents" in r.stdout and "quarantined 9 (5 whole objects)" in r.stdout
    store = ChunkStore(store_uri)
    assert sorted(store.doc_ids()) == sorted(docs) and store.count() == len(docs)
    for doc_id, text in docs.items():
        ids = [i for c in store.iter_chunk_ids(doc_id) for i in c]
        assert tokenizer.decode(ids) == text and "".join(store.iter_texts(doc_id)) == text
        assert store.info(doc_id).source.startswith(f"s3://{BUCKET}/corpus/")
    got = quarantine_map(store.view())
    assert set(got) == set(expected_q)
    assert all(reason in got[where] for where, reason in expected_q.items()), got
    objects = store.view().objects
    assert len(objects) == 10 and all(e.version for e in objects.values())
    assert sum(e.docs for e in objects.values()) == len(docs)
    again = run_cli("ingest", "--source", f"s3://{BUCKET}/corpus", "--store", store_uri, "ingest.chunk_size=16")
    assert again.returncode == 0 and "ingested 0 objects (10 already in the store" in again.stdout


def test_nothing_ingestable_exits_nonzero(s3):
    upload(s3, "allbad", {"x.txt": b"", "y.jsonl": b"{oops\n"})
    r = run_cli("ingest", "--source", f"s3://{BUCKET}/allbad", "--store", f"s3://{BUCKET}/store-bad",
                "ingest.runner=local")
    assert r.returncode == 2 and "nothing could be ingested" in r.stderr
    assert "quarantined 2" in r.stdout and "Traceback" not in r.stderr


def wait_for_commit(proc: subprocess.Popen, store: ChunkStore, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if list_parquet(store.fs, f"{store.root}/manifest"):
            return
        time.sleep(0.2)
    raise AssertionError(f"no commit before the process ended or timed out (rc={proc.poll()})")


def test_killed_ingest_resumes_exactly_once(s3):
    n_objects, per = 120, 5
    files = {f"part-{k:03d}.jsonl": "".join(json.dumps({"id": f"d{k}-{i}", "text": f"doc {k} {i} " * 40}) + "\n"
                                          for i in range(per)).encode() for k in range(n_objects)}
    upload(s3, "killme", files)
    store_uri = f"s3://{BUCKET}/store-kill"
    args = ["ingest", "--source", f"s3://{BUCKET}/killme", "--store", store_uri, "ingest.workers=1",
            "ingest.commit_every_s=0.2", "ingest.chunk_size=32"]
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.cli", *args], cwd=REPO, env=dict(os.environ),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    store = ChunkStore(store_uri)
    try:
        wait_for_commit(proc, store)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    partial = ChunkStore(store_uri).count()
    assert 0 < partial < n_objects * per, "the kill did not land midway"
    r = run_cli(*args, "ingest.runner=local")  # resuming is the driver's job; either runner does
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"{n_objects} objects" not in r.stdout.split("(")[0]
    store = ChunkStore(store_uri)
    ids = list(store.doc_ids())
    assert len(ids) == len(set(ids)) == n_objects * per == store.count()
    assert set(ids) == {f"d{k}-{i}" for k in range(n_objects) for i in range(per)}
    live = set(store.view().live_files())
    on_disk = {p.rsplit("/", 1)[-1][:-8] for p in list_parquet(store.fs, f"{store.root}/chunks")}
    assert on_disk == live and len(live) == n_objects


def test_data_build_puts_documents_in_the_store(s3, tokenizer):
    from pipelines.agent.codec import ChatCodec
    from pipelines.data.tasks import read_task_rows, task_chunks

    out, store_uri = f"s3://{BUCKET}/tasks/niah", f"s3://{BUCKET}/store-tasks"
    r = run_cli("data", "build", "--task", "niah_multivalue", "--lengths", "8K", "--n", "2", "--seed", "5",
                "--out", out, "--store", store_uri, "ingest.runner=local")
    assert r.returncode == 0, r.stderr[-3000:]
    rows = list(read_task_rows(out))
    store = ChunkStore(store_uri)
    assert len(rows) == 2 and store.count() == 2
    for row in rows:
        assert row.answer_kind == "all_of" and len(row.answers) == 4 and row.context is None
        assert abs(row.doc_tokens - 8192) <= 0.02 * 8192
        ids = [i for c in task_chunks(row, store, ChatCodec(tokenizer), 1000) for i in c]
        assert len(ids) == row.doc_tokens
        text = tokenizer.decode(ids)
        assert all(a in text for a in row.answers)
    bad = run_cli("data", "build", "--task", "vt", "--lengths", "8Q", "--n", "1", "--out", out, "--store", store_uri)
    assert bad.returncode == 2 and "'8Q' is not a length" in bad.stderr
