"""`memagent rollout` as a user runs it: bad input fails in one line; a run resumes where it stopped.

The happy path uses the transformers engine and a tiny random model (only shapes matter).
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from pipelines.agent.chunking import n_turns
from pipelines.data.tasks import TaskRow, write_task_rows
from pipelines.rollout.writer import read_groups
from tests.support import run_cli
from tests.rollout.helpers import needle_row


@pytest.fixture
def tasks(tmp_path):
    uri = str(tmp_path / "tasks.parquet")
    bad = TaskRow("bad", "Where?", ["x"], "one_of", "no-such-doc", None, 0, "unit", "test")
    write_task_rows([*(needle_row(i, r) for i, r in enumerate((3, 9, 14))), bad], uri)
    return uri


def test_missing_tasks_is_a_one_line_error(tmp_path):
    proc = run_cli("rollout", "--tasks", str(tmp_path / "nope.parquet"), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    last = proc.stderr.splitlines()[-1]
    assert last == f"memagent: error: task rows '{tmp_path / 'nope.parquet'}': no such file or folder"


def test_bad_reward_path_is_a_one_line_error(tmp_path, tasks):
    proc = run_cli("rollout", "--tasks", tasks, "--out", str(tmp_path / "out"), "rollout.reward=nowhere:fn")
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1].startswith("memagent: error: rollout.reward 'nowhere:fn': cannot import")


@pytest.mark.slow
def test_rollout_writes_parquet_and_resumes(tmp_path, tasks, tiny_model_dir, tokenizer):
    out = str(tmp_path / "out")
    common = ["--tasks", tasks, "--out", out, "--keep-all", "engine.kind=hf", f"model.path={tiny_model_dir}",
              "agent.chunk_size=128", "agent.memory_budget=8", "agent.final_budget=8", "rollout.group_size=2",
              "rollout.worker_num_cpus=0.5", "rollout.part_groups=1", f"data.store={tmp_path / 'store'}"]
    first = run_cli("rollout", *common, "--limit", "1")
    assert first.returncode == 0, first.stderr[-3000:]
    assert json.loads(first.stdout.strip().splitlines()[-1])["groups"] == 1
    tracking = f"sqlite:///{tmp_path / 'mlflow.db'}"
    second = run_cli("rollout", *common, env={"MLFLOW_TRACKING_URI": tracking})
    assert second.returncode == 0, second.stderr[-3000:]
    summary = json.loads(second.stdout.strip().splitlines()[-1])
    assert summary["groups"] == 2 and summary["skipped_done"] == 1 and summary["quarantined"] == 1
    assert "rollout/tokens_per_s" in summary["metrics"] and "rollout/reward_mean =" in second.stdout
    logged = logged_metrics(tracking, "rollout")
    assert logged == {k: pytest.approx(v) for k, v in summary["metrics"].items()}
    quarantine = pq.read_table(f"{out}/quarantine-00000.parquet").to_pylist()
    assert [q["sample_id"] for q in quarantine] == ["bad"]
    assert quarantine[0]["reason"].startswith("UserError: doc_id 'no-such-doc': not in store")
    groups = list(read_groups(out))
    assert sorted(g.sample_id for g in groups) == ["n0", "n1", "n2"]
    for g in groups:
        for t in g.trajectories:
            assert len(t.turns) == n_turns(t.doc_tokens, 128)
            assert all(len(turn.logprobs) == len(turn.response_ids) for turn in t.turns)


def logged_metrics(tracking_uri: str, command: str) -> dict:
    """The metrics of the command's MLflow run, read back with the MLflow client."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()],
                              filter_string=f"tags.command = '{command}'")
    assert len(runs) == 1
    return dict(runs[0].data.metrics)
