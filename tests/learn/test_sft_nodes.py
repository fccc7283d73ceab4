"""SFT on several nodes: each Ray Data task that turns task rows into traces resolves the base
model on its own node (an s3:// model is fetched into that node's home, as rollout workers and
learner workers do), never through a folder of the driver's disk. Called here as the task
calls it, with the node's home set apart from the driver's."""

from __future__ import annotations

import pyarrow as pa

from pipelines.config import load_config
from pipelines.data.tasks import write_task_rows
from pipelines.learn.sftdata import trace_files
from pipelines.storage import publish_dir
from tests.learn.rows import synthetic_rows, token_counter

MODEL = "s3://memagent-test/sft-nodes/model"


def test_a_trace_task_fetches_the_model_into_its_own_nodes_home(s3, tiny_model_dir, tokenizer, tmp_path,
                                                                 monkeypatch):
    publish_dir(tiny_model_dir, MODEL)
    tasks = str(tmp_path / "tasks.parquet")
    write_task_rows(synthetic_rows(3, token_counter(tokenizer), repeats=4), tasks)
    driver, node = tmp_path / "driver-home", tmp_path / "node-home"
    cfg = load_config(None, [f"model.path={MODEL}", f"home={driver}", "agent.chunk_size=128",
                             "agent.memory_budget=32", "agent.final_budget=16"])
    monkeypatch.setenv("MEMAGENT_HOME", str(node))  # the node's own home
    tables = list(trace_files(pa.table({"uri": [tasks]}), MODEL, cfg, None, 0.0))
    assert sum(t.num_rows for t in tables) > 3  # several conversations per row
    assert (node / "cache" / "s3" / "memagent-test" / "sft-nodes" / "model" / "config.json").is_file()
    assert not driver.exists()
