"""`memagent batch --runner data`: the batch job as a Ray Data pipeline (real Ray, real engines,
random tiny models: only the job's structure is checked). On SeaweedFS with doc_id rows from an
S3 chunk store and the vLLM engine, tracked on an MLflow server; locally, a job stopped by
SIGTERM after its first shard resumes without redoing it, every row once."""

import json
import os
import signal
import subprocess
import sys
import time

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from pipelines.serve.jobs import OUTPUT_SCHEMA
from pipelines.storage import resolve
from tests.support import REPO, run_cli
from tests.track.conftest import mlflow_server, tracking_env  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow
BUCKET = "memagent-test"
SMALL = ["agent.chunk_size=64", "agent.memory_budget=8", "agent.final_budget=8", "serve.replica_cpus=0.5"]
VLLM = ["engine.kind=vllm", "engine.cpu_kvcache_gib=1", "engine.max_model_len=1024", "engine.max_num_seqs=16"]


def box(i: int, words: int = 20) -> str:
    return "The sky is blue. " * words + f"The code of box {i} is {500 + i}."


def runs_of(uri: str) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    found = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    return sorted(found, key=lambda r: r.info.start_time)


def read_output(uri: str):
    fs, path = resolve(uri)
    return pq.read_table(path, filesystem=fs)


def test_job_on_s3_with_doc_ids_tracked_on_a_server(s3, tracking_env, vllm_tiny_model_dir):
    from pipelines.ingest.config import IngestConfig
    from pipelines.ingest.pipeline import ingest

    client = s3.client()
    docs = "".join(json.dumps({"id": f"doc-{i}", "text": box(i, 10 + 10 * i)}) + "\n" for i in range(3))
    client.put_object(Bucket=BUCKET, Key="bd/docs/docs.jsonl", Body=docs.encode())
    store = f"s3://{BUCKET}/bd/store"
    ingest(f"s3://{BUCKET}/bd/docs", store, IngestConfig(runner="local", chunk_size=64), str(vllm_tiny_model_dir),
           REPO / ".memagent")
    rows = [{"id": f"q{i}", "question": f"What is the code of box {i % 3}?", "doc_id": f"doc-{i % 3}"}
            for i in range(6)] + [{"id": "gone", "question": "q?", "doc_id": "no-such-doc"}]
    client.put_object(Bucket=BUCKET, Key="bd/q/rows.jsonl", Body="".join(json.dumps(r) + "\n" for r in rows).encode())
    args = ["batch", "--runner", "data", "--input", f"s3://{BUCKET}/bd/q", "--output", f"s3://{BUCKET}/bd/out",
            "--store", store, f"model.path={vllm_tiny_model_dir}", *VLLM, *SMALL, "serve.shard_rows=3"]
    proc = run_cli(*args, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = read_output(f"s3://{BUCKET}/bd/out")
    assert out.schema == OUTPUT_SCHEMA  # the Serve runner's columns
    got = {r["id"]: r for r in out.to_pylist()}
    assert "done, 7/7 rows, 1 errors" in proc.stdout, {k: r["error"] for k, r in got.items()}
    assert sorted(got) == sorted(r["id"] for r in rows) and out.num_rows == len(rows)
    assert all(got[f"q{i}"]["error"] is None and got[f"q{i}"]["tokens"] > 0 for i in range(6))
    assert got["gone"]["error"] == f"doc_id 'no-such-doc': not in store '{store}'"
    listed = [o["Key"] for o in client.list_objects_v2(Bucket=BUCKET, Prefix="bd/out/")["Contents"]]
    assert sorted(k for k in listed if not k.endswith("/")) == [  # SeaweedFS lists the folder itself too
        "bd/out/_job.json", *(f"bd/out/part-00000{k}.parquet" for k in range(3))]

    [run] = runs_of(tracking_env)
    assert run.info.status == "FINISHED"
    assert {k: run.data.tags[k] for k in ("command", "runner", "input", "output")} == {
        "command": "batch", "runner": "data", "input": f"s3://{BUCKET}/bd/q", "output": f"s3://{BUCKET}/bd/out"}
    m = run.data.metrics
    assert m["serve/documents"] == 7 and m["serve/failed"] == 1 and m["serve/tokens_per_s"] > 0
    again = run_cli(*args, timeout=300)  # a finished job: nothing to do, no new run
    assert again.returncode == 0 and "done, 7/7 rows, 1 errors" in again.stdout, again.stderr[-2000:]
    assert len(runs_of(tracking_env)) == 1


def start_job(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pipelines.cli", *args], cwd=REPO, env=os.environ.copy(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_shard(out, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not list(out.glob("part-*.parquet")):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no shard written"
        time.sleep(0.2)


def test_stopped_job_resumes_without_redoing_or_repeating_rows(tmp_path, tiny_model_dir):
    good = [{"id": f"r{i}", "question": f"What is the code of box {i}?", "document": box(i, 10 + 3 * i)}
            for i in range(10)]
    lines = [json.dumps(r) for r in good] + [
        "{broken", json.dumps({"question": "q?", "document": "d", "uri": "/x"}),
        json.dumps({"question": "q?", "uri": "/etc/hostname"})]
    (tmp_path / "q.jsonl").write_text("\n".join(lines) + "\n")
    uri, out = f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "out"
    args = ["batch", "--runner", "data", "--input", str(tmp_path / "q.jsonl"), "--output", str(out),
            f"model.path={tiny_model_dir}", "engine.kind=hf", *SMALL, "serve.shard_rows=2",
            "serve.shards_in_flight=1", f"track.tracking_uri={uri}"]
    proc = start_job(*args)
    wait_for_shard(out, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    first = {p.name: p.stat().st_mtime_ns for p in out.glob("part-*.parquet")}
    assert 0 < len(first) < 7 and json.loads((out / "_job.json").read_text())["status"] == "interrupted"

    again = run_cli(*args, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "done, 13/13 rows, 3 errors" in again.stdout
    assert {n: (out / n).stat().st_mtime_ns for n in first} == first  # finished shards were skipped
    rows = read_output(str(out)).to_pylist()
    assert [r["id"] for r in rows] == [*(r["id"] for r in good), "10", "11", "12"]  # each once, in order
    errors = {r["id"]: r["error"] for r in rows if r["error"]}
    assert errors == {"10": f"{tmp_path / 'q.jsonl'}:11: malformed JSON",
                      "11": "row: give exactly one of document (or context), doc_id, uri",
                      "12": "uri '/etc/hostname': outside the allowed paths (serve.allowed_paths)"}
    assert all(r["turns"] >= 2 and r["memory"] for r in rows if not r["error"])
    stopped, resumed = runs_of(uri)
    assert (stopped.info.status, resumed.info.status) == ("KILLED", "FINISHED")
    assert stopped.data.tags["job_id"] == resumed.data.tags["job_id"]
    assert resumed.data.metrics["serve/documents"] == 13 and resumed.data.metrics["serve/failed"] == 3
    # ungated: every chunk read rewrote the memory; the gates' metrics count both runs' rows once
    assert all(r["chunks_read"] == r["memory_updates"] == r["turns"] - 1 and (r["chunks_unread"], r["malformed"])
               == (0, 0) for r in rows if not r["error"])
    state = json.loads((out / "_job.json").read_text())
    assert state["chunks_read"] == sum(r["chunks_read"] for r in rows) and state["malformed"] == 0
    gates = {k: resumed.data.metrics[k] for k in ("gate/update_rate", "gate/exit_fraction", "gate/malformed")}
    assert gates == {"gate/update_rate": 1.0, "gate/exit_fraction": 0.0, "gate/malformed": 0.0}
