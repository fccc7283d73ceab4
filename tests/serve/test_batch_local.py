"""`memagent batch` without --server: the command starts the app in its own process, runs the
job to completion over jsonl rows and stops the app."""

import json

import pyarrow.parquet as pq
import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.slow

SETTINGS = ["engine.kind=vllm", "engine.cpu_kvcache_gib=1", "engine.max_model_len=2048", "engine.max_num_seqs=8",
            "agent.chunk_size=128", "agent.memory_budget=16", "agent.final_budget=16",
            "serve.replicas=1", "serve.replica_cpus=0.5", "serve.shard_rows=2"]


def test_batch_without_server_runs_the_pipeline_itself(tmp_path, home, smollm2_dir):
    rows = [{"id": f"r{i}", "question": f"What is the code of box {i}?",
             "document": "The sky is blue. " * (20 + 15 * i) + f"The code of box {i} is {500 + i}."}
            for i in range(5)]
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["batch", "--input", str(tmp_path / "q.jsonl"), "--output", str(tmp_path / "out"),
            *SETTINGS, f"serve.state_dir={tmp_path / 'state'}"]
    proc = run_cli(*args, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "done, 5/5 rows, 0 errors" in proc.stdout
    out = pq.read_table(tmp_path / "out").to_pylist()
    assert sorted(r["id"] for r in out) == [r["id"] for r in rows]
    assert all(r["error"] is None and r["turns"] == -(-r["tokens"] // 128) + 1 for r in out), out
    assert len(list((tmp_path / "out").glob("*.parquet"))) == 3  # 5 rows in shards of 2
