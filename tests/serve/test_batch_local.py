"""`memagent batch` without --server: the command starts the app in its own process, runs the
job to completion over jsonl rows and stops the app; the job is an MLflow run with its figures."""

import json

import pyarrow.parquet as pq
import pytest

from tests.support import run_cli

pytestmark = pytest.mark.slow

SETTINGS = ["engine.kind=vllm", "engine.cpu_kvcache_gib=1", "engine.max_model_len=2048", "engine.max_num_seqs=8",
            "agent.chunk_size=128", "agent.memory_budget=16", "agent.final_budget=16",
            "serve.replicas=1", "serve.replica_cpus=0.5", "serve.shard_rows=2"]


def test_batch_without_server_runs_the_pipeline_itself(tmp_path, home, smollm2_dir):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    rows = [{"id": f"r{i}", "question": f"What is the code of box {i}?",
             "document": "The sky is blue. " * (20 + 15 * i) + f"The code of box {i} is {500 + i}."}
            for i in range(5)]
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["batch", "--input", str(tmp_path / "q.jsonl"), "--output", str(tmp_path / "out"),
            *SETTINGS, f"serve.state_dir={tmp_path / 'state'}", f"track.tracking_uri={uri}"]
    proc = run_cli(*args, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "done, 5/5 rows, 0 errors" in proc.stdout
    out = pq.read_table(tmp_path / "out").to_pylist()
    assert sorted(r["id"] for r in out) == [r["id"] for r in rows]
    assert all(r["error"] is None and r["turns"] == -(-r["tokens"] // 128) + 1 for r in out), out
    assert all(r["chunks_read"] == r["memory_updates"] == r["turns"] - 1 and r["exit_chunk"] is None
               and (r["chunks_unread"], r["malformed"]) == (0, 0) for r in out), out  # ungated
    assert len(list((tmp_path / "out").glob("*.parquet"))) == 3  # 5 rows in shards of 2

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    runs = {r.data.tags["command"]: r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])}
    assert sorted(runs) == ["batch", "serve"], runs
    assert {k: r.info.status for k, r in runs.items()} == {"batch": "FINISHED", "serve": "FINISHED"}
    job, app = runs["batch"], runs["serve"]
    assert job.data.tags["mlflow.parentRunId"] == app.info.run_id  # the job is nested under the app's run
    assert app.data.metrics["serve/model_version"] == 0 and app.data.tags["serving"] == "smollm2"
    tags, metrics = job.data.tags, job.data.metrics
    assert tags["input"] == str(tmp_path / "q.jsonl") and tags["output"] == str(tmp_path / "out")
    assert tags["model"] == "smollm2" and tags["model_version"] == "0"
    assert metrics["serve/documents"] == 5 and metrics["serve/failed"] == 0 and metrics["serve/tokens_per_s"] > 0
    assert (metrics["gate/update_rate"], metrics["gate/exit_fraction"], metrics["gate/malformed"]) == (1.0, 0.0, 0.0)
