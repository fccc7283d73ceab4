"""Tracking against a real MLflow server (sqlite backend, artifacts in SeaweedFS S3): a rollout
run and an eval log their metrics and artifacts, readable back with the MLflow client; a
registered model version loads through `models:/` in `memagent ask`."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from pathlib import Path

import matplotlib.image
import pytest
from mlflow import MlflowClient

from pipelines.config import load_config
from pipelines.errors import UserError
from pipelines.models import resolve_model
from pipelines.eval.ladder import main as eval_main
from pipelines.track import NullTracker, command_run, create_tracker
from pipelines.track import metrics as M
from pipelines.models.registry import register_model
from tests.support import run_cli
from tests.eval.needles import ladder_overrides, needle_row

METHODS = ("memagent", "truncation", "full")
pytestmark = pytest.mark.slow  # starts an MLflow server and a SeaweedFS S3 server


def latest_run(client: MlflowClient, command: str):
    exp = client.get_experiment_by_name("memagent")
    return client.search_runs([exp.experiment_id], f"tags.command = '{command}'", order_by=["start_time DESC"])[0]


def run_rollout_groups(model_dir, tokenizer, cfg):
    """A real rollout: the rollout stage's worker core on an HF engine, two groups of two."""
    from pipelines.engine import create_engine
    from pipelines.rollout.core import RolloutSpec, WorkerCore
    from pipelines.rollout.schedule import GroupTask

    async def go():
        engine = create_engine(str(model_dir), cfg.engine)
        try:
            core = WorkerCore(engine, cfg.agent, loops=4)
            rows = [needle_row(tokenizer, 600, i) for i in range(2)]  # ~600 tokens: 3 chunks of 256
            spec = RolloutSpec(temperature=1.0)
            return await asyncio.gather(*(core.run_group(GroupTask(f"g{i}", r, 2), spec)
                                          for i, r in enumerate(rows)))
        finally:
            await engine.close()

    return asyncio.run(go())


def test_rollout_run_logs_declared_metrics(tiny_model_dir, tokenizer, tracking_env, s3):
    from pipelines.rollout.metrics import rollout_metrics

    cfg = load_config(None, [f"model.path={tiny_model_dir}", "engine.kind=hf", "engine.dtype=float32",
                             "agent.chunk_size=256", "agent.memory_budget=8", "agent.final_budget=8",
                             "s3.endpoint_url=http://admin:pw-in-uri-9@127.0.0.1:1"])
    tracker = create_tracker(cfg)
    with command_run(tracker, cfg, "rollout", tags={"dataset": "inline:needle"}):
        with tracker.start_run("rollout-workers", nested=True):
            groups = run_rollout_groups(tiny_model_dir, tokenizer, cfg)
            tracker.log_metrics(rollout_metrics(groups, seconds=1.0), step=0)
        for step in range(2):  # the command's own series, one point per step
            tracker.log_metrics(rollout_metrics(groups, seconds=1.0), step=step)
    client = MlflowClient(tracking_env)
    run = latest_run(client, "rollout")
    assert set(M.ROLLOUT) <= set(run.data.metrics)
    history = client.get_metric_history(run.info.run_id, M.ROLLOUT_TURNS)
    assert sorted(m.step for m in history) == [0, 1] and all(m.value == 4.0 for m in history)  # 3 chunks + final
    children = client.search_runs([run.info.experiment_id], f"tags.mlflow.parentRunId = '{run.info.run_id}'")
    assert len(children) == 1 and set(M.ROLLOUT) <= set(children[0].data.metrics)
    assert run.data.params["agent.chunk_size"] == "256"
    assert run.data.params["s3.endpoint_url"] == "http://admin:***@127.0.0.1:1"
    assert run.data.tags["dataset"] == "inline:needle" and run.data.tags["model"] == str(tiny_model_dir)
    assert len(run.data.tags["git_commit"]) == 40
    secret = s3.env()["AWS_SECRET_ACCESS_KEY"]
    assert not any(secret in v for v in [*run.data.params.values(), *run.data.tags.values()])


def test_eval_logs_metrics_table_plot_traces(tiny_model_dir, needle_dataset, tmp_path, tracking_env):
    cfg = load_config(None, ladder_overrides(tiny_model_dir, needle_dataset, "s3://memagent-test/eval/ladder"))
    out = eval_main(cfg)
    cell = out["summary"]["niah_test"]
    assert cell["2K"]["full"]["na"] and cell["2K"]["truncation"]["truncated"] == 3
    client = MlflowClient(tracking_env)
    run = latest_run(client, "eval")
    for ln in ("1K", "2K"):
        for score in ("sub_em", "em", "f1"):
            assert f"eval/niah_test/{ln}/{score}" in run.data.metrics
            assert f"eval/niah_test/{ln}/truncation/{score}" in run.data.metrics
    assert "eval/niah_test/2K/full/sub_em" not in run.data.metrics  # n/a is not a zero
    assert run.data.params["eval.n"] == "3" and run.data.tags["eval_out"] == "s3://memagent-test/eval/ladder"
    assert run.info.artifact_uri.startswith("s3://memagent-test/mlflow-artifacts")
    names = {a.path for a in client.list_artifacts(run.info.run_id, "eval")}
    assert {"eval/table.md", "eval/table.csv", "eval/summary.json", "eval/accuracy_vs_length.png"} <= names
    traces = [a.path for a in client.list_artifacts(run.info.run_id, "eval/traces")]
    assert sorted(traces) == ["eval/traces/niah_test_1K_0.md", "eval/traces/niah_test_2K_0.md"]
    local = Path(client.download_artifacts(run.info.run_id, "eval", str(tmp_path)))
    rows = list(csv.DictReader(io.StringIO((local / "table.csv").read_text())))
    assert len(rows) == 6 and {r["method"] for r in rows} == set(METHODS)
    assert matplotlib.image.imread(local / "accuracy_vs_length.png").shape[2] in (3, 4)
    trace = (local / "traces" / "niah_test_2K_0.md").read_text()
    assert "## memory after chunk 4" in trace and "question: What is the special magic number" in trace
    assert json.loads((local / "summary.json").read_text())["metrics"] == out["metrics"]
    assert run.info.run_name == f"eval {tiny_model_dir.name}" and run.data.tags["config"] == "default"
    ladder = client.get_metric_history(run.info.run_id, "eval/niah_test/by_length/strict")  # the length is the step
    assert sorted((m.step, m.value) for m in ladder) == [(1024, cell["1K"]["memagent"]["strict"]),
                                                   (2048, cell["2K"]["memagent"]["strict"])]
    (held_out,) = run.inputs.dataset_inputs  # the rows it read, listed, not read whole
    assert {t.key: t.value for t in held_out.tags}["mlflow.data.context"] == "held-out"
    assert json.loads(held_out.dataset.profile)["num_rows"] == 6 and len(held_out.dataset.digest) == 12
    assert json.loads(held_out.dataset.source)["uri"] == needle_dataset


def test_eval_memory_traces_are_mlflow_traces(tracking_env, tiny_model_dir):
    """eval.traces=1 over two memory-agent cells: two traces (test above's run), one span per turn
    under each question, their memories the cells' records'."""
    from pipelines.eval.results import read_cell

    client = MlflowClient(tracking_env)
    run = latest_run(client, "eval")
    traces = client.search_traces(locations=[run.info.experiment_id], run_id=run.info.run_id)
    assert len(traces) == 2
    for trace in traces:
        tags = trace.info.tags
        cell = f"s3://memagent-test/eval/ladder/cells/niah_test/{tags['length']}/memagent.parquet"
        (rec,) = [r for r in read_cell(cell) if r["index"] == int(tags["index"])]
        root = next(s for s in trace.data.spans if s.parent_id is None)
        turns = [s for s in trace.data.spans if s.parent_id == root.span_id]
        assert len(turns) == rec["turns"] == len(rec["steps"]) >= 2
        assert [s.outputs["memory_after"] for s in turns[:-1]] == rec["memory"]
        assert [s.inputs["memory_before"] for s in turns[1:-1]] == rec["memory"][:-1]
        assert turns[-1].outputs.get("prediction") == rec["prediction"] and turns[-1].outputs["gold"] == rec["answers"]
        assert all(s.attributes["gate"] == "updated" and s.attributes["tokens_read"] > 0 for s in turns[:-1])
        assert root.inputs == {"question": rec["question"]}


def test_registered_version_loads_in_ask(tiny_model_dir, tmp_path, tracking_env):
    cfg = load_config(None, [])
    metrics = {"eval/niah_test/1K/sub_em": 0.25}
    ref = register_model(tiny_model_dir, "tiny-test", tmp_path, cfg.track, metrics, alias="champion")
    assert ref.startswith("models:/tiny-test/")
    client = MlflowClient(tracking_env)
    version = client.get_model_version_by_alias("tiny-test", "champion")
    assert f"models:/tiny-test/{version.version}" == ref
    assert client.get_run(version.run_id).data.metrics == metrics
    with pytest.raises(UserError, match=r"^model 'models:/tiny-test/99': "):
        resolve_model("models:/tiny-test/99", tmp_path / "h")
    assert resolve_model(ref, tmp_path / "h") == tmp_path / "h" / "cache" / "registry" / "tiny-test" / version.version
    doc = tmp_path / "doc.txt"
    doc.write_text("The grass is green. The sky is blue. " * 60)
    proc = run_cli("ask", "--doc", str(doc), "--question", "What colour is the sky?", "--json",
                   "model.path=models:/tiny-test@champion", "engine.kind=hf", "engine.dtype=float32",
                   "agent.chunk_size=256", "agent.memory_budget=8", "agent.final_budget=8",
                   f"track.tracking_uri={tracking_env}",  # the config, not the environment, names the server
                   env={"MEMAGENT_HOME": str(tmp_path / "fresh"), "MLFLOW_TRACKING_URI": ""})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["turns"] >= 2
    assert (tmp_path / "fresh" / "cache" / "registry" / "tiny-test" / version.version / "config.json").is_file()


def test_a_version_leads_to_its_logged_model_its_run_and_the_runs_datasets(tiny_model_dir, needle_dataset,
                                                                           tmp_path, tracking_env):
    """version -> logged model -> run -> datasets: the chain a trained, registered model leaves."""
    from pipelines.track.datasets import TRAINING, DatasetRef

    cfg = load_config(None, [f"model.path={tiny_model_dir}"])
    tracker = create_tracker(cfg)
    with command_run(tracker, cfg, "train") as run_id:  # what pipelines/learn/recipe.py logs of a run
        tracker.log_datasets([DatasetRef(needle_dataset, TRAINING), DatasetRef(str(tmp_path / "gone"), TRAINING)])
        model_id = tracker.log_model("sft-tiny", str(tiny_model_dir), metrics={"eval/niah_test/1K/strict": 0.5})
    ref = register_model(tiny_model_dir, "tiny-lineage", tmp_path, cfg.track, {"heldout_strict": 0.25}, run_id=run_id)
    client = MlflowClient(tracking_env)
    version = client.get_model_version("tiny-lineage", ref.rsplit("/", 1)[1])
    assert version.source == f"models:/{model_id}" and version.run_id == run_id
    model = client.get_logged_model(model_id)
    assert model.source_run_id == run_id and model.status == "READY"
    assert {m.key: m.value for m in model.metrics} == {"eval/niah_test/1K/strict": 0.5, "heldout_strict": 0.25}
    listed = json.loads(model.tags["mlflow.modelVersions"])
    assert [(v["name"], str(v["version"])) for v in listed] == [("tiny-lineage", version.version)]
    (dataset,) = client.get_run(model.source_run_id).inputs.dataset_inputs  # the missing one is left out
    assert json.loads(dataset.dataset.source)["uri"] == needle_dataset
    assert {t.key: t.value for t in dataset.tags}["mlflow.data.context"] == TRAINING
    assert {a.path for a in client.list_artifacts(run_id)} == set()  # the files live in the logged model
    assert (resolve_model(ref, tmp_path / "h") / "config.json").is_file()


def test_model_register_command(tiny_model_dir, tmp_path, tracking_env):
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"metrics": {"eval/niah_test/1K/sub_em": 0.5}, "table": {}}))
    proc = run_cli("model", "register", "--model", str(tiny_model_dir), "--name", "tiny-cli",
                   "--metrics", str(summary), env={"MEMAGENT_HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "-> models:/tiny-cli/1" in proc.stdout
    version = MlflowClient(tracking_env).get_model_version("tiny-cli", "1")
    assert version.tags == {"eval/niah_test/1K/sub_em": "0.5"}


def test_null_tracker_when_tracking_is_off():
    assert isinstance(create_tracker(load_config(None, ["track.enabled=false"])), NullTracker)
    assert isinstance(create_tracker(load_config(None, []), rank=1), NullTracker)
    tracker = NullTracker()
    with command_run(tracker, load_config(None, []), "dry-run") as run_id:
        tracker.log_metrics({M.TRAIN_KL: 0.1}, step=1)
    assert run_id is None
