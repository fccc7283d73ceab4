"""The run tree, names and datasets on a local sqlite store (no server): a pipeline's stages nest
under its run with their stage names, a standalone command is a top-level `command model` run,
a dataset's digest follows its file listing."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.config import load_config
from pipelines.track.datasets import HELD_OUT, DatasetRef, dataset_input, describe, listing_digest
from pipelines.track.tracker import (PARENT_ENV, STAGE_ENV, MlflowTracker, command_run, config_named, config_source,
                                     nested_under, parent_tags, pipeline_run, short_model, stage, stage_env, train_label)


def test_short_names_and_config_source():
    assert short_model("models:/memagent-quickstart/1") == "memagent-quickstart"
    assert short_model("models:/memagent-quickstart@production") == "memagent-quickstart"
    assert short_model("HuggingFaceTB/SmolLM2-360M-Instruct") == "SmolLM2-360M-Instruct"
    assert short_model("smollm2") == "smollm2" and short_model("/tmp/x/tiny/") == "tiny"
    assert short_model("/home/quickstart/sft/best") == "sft" and short_model("s3://b/runs/rl/final") == "rl"
    assert config_source(["train", "--config", "rl-smollm2", "x=1"]) == "rl-smollm2"
    assert config_source(["eval", "--config=my.yaml"]) == "my.yaml" and config_source(["eval"]) == "default"
    with config_named("quickstart"):  # a command that loads its own preset says so
        assert config_source() == "quickstart"
    assert train_label(load_config(None, ["model.path=smollm2"]), sft=True) == "sft-smollm2"


def test_listing_digest_follows_files_not_order():
    a = [("x.parquet", 10, 1), ("y.parquet", 20, 2)]
    assert listing_digest(a) == listing_digest(a[::-1]) != listing_digest([("x.parquet", 11, 1), a[1]])


def test_datasets_rows_and_schema_come_from_footers(tmp_path):
    folder = tmp_path / "tasks" / "eval"
    folder.mkdir(parents=True)
    for i in range(2):
        pq.write_table(pa.table({"question": ["q"] * 3, "n": [1, 2, 3]}), folder / f"{i}.parquet")
    listed = describe(DatasetRef(str(folder), HELD_OUT))
    assert (listed.name, listed.rows, listed.files) == ("tasks/eval", 6, 2)
    assert describe(DatasetRef(str(tmp_path / "none"), HELD_OUT)) is None
    found = dataset_input(DatasetRef(str(folder), HELD_OUT))
    assert json.loads(found.dataset.schema)["mlflow_colspec"] == [{"name": "question", "type": "string"},
                                                                   {"name": "n", "type": "long"}]
    pq.write_table(pa.table({"question": ["q"], "n": [1]}), folder / "2.parquet")
    assert dataset_input(DatasetRef(str(folder), HELD_OUT)).dataset.digest != found.dataset.digest


def test_a_pipeline_run_holds_its_named_stages(tmp_path):
    cfg = load_config(None, ["model.path=smollm2"])
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = MlflowTracker(uri, "memagent", (tmp_path / "art").as_uri(), tmp_path / "spool")
    with pipeline_run(tracker, cfg, "quickstart") as parent:
        with stage("eval-base"), command_run(MlflowTracker(uri, "memagent", None, tmp_path / "s"), cfg, "eval"):
            assert parent_tags() == {"mlflow.parentRunId": parent, "stage": "eval-base"}
        with command_run(tracker, cfg, "eval"):  # outside a stage: a run of its own
            pass
    assert parent_tags() == {}
    with nested_under("some-run"):
        assert parent_tags() == {}  # no stage, no child
    with command_run(tracker, cfg, "eval", label="other"):
        pass
    runs = {r.info.run_name: r for r in tracker.client.search_runs([tracker.experiment_id()])}
    assert set(runs) == {"quickstart", "eval-base", "eval smollm2", "eval other"}
    child = runs["eval-base"].data.tags
    assert child["mlflow.parentRunId"] == parent and child["command"] == "eval" and child["stage"] == "eval-base"
    assert "mlflow.parentRunId" not in runs["eval smollm2"].data.tags
    top = runs["quickstart"].data.tags
    assert top["command"] == "quickstart" and top["model"] == "smollm2" and "config" in top


def test_a_stage_in_another_process_nests_by_its_environment(tmp_path, monkeypatch):
    """benchmarks/learning.py runs its trainings and evaluations as processes: stage_env hands them
    the pipeline's run and the stage's name, and their command runs become its children."""
    cfg = load_config(None, ["model.path=smollm2"])
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = MlflowTracker(uri, "memagent", (tmp_path / "art").as_uri(), tmp_path / "spool")
    with pipeline_run(tracker, cfg, "learning-needles") as parent:
        env = stage_env("sft")
    assert env == {PARENT_ENV: parent, STAGE_ENV: "sft"} and stage_env("sft") == {}  # outside: none
    for key, value in env.items():  # as the stage's process sees them
        monkeypatch.setenv(key, value)
    with command_run(MlflowTracker(uri, "memagent", None, tmp_path / "s"), cfg, "train"):
        pass
    runs = {r.info.run_name: r.data.tags for r in tracker.client.search_runs([tracker.experiment_id()])}
    assert set(runs) == {"learning-needles", "sft"}
    assert runs["sft"]["mlflow.parentRunId"] == parent and runs["sft"]["stage"] == "sft"


def test_a_served_answers_trace_names_its_document_and_holds_its_text_only_when_asked():
    from pipelines.agent.turns import AgentResult, TurnRecord
    from pipelines.serve.replica import trace_record
    from pipelines.track.traces import turn_spans

    def turn(final: bool, gate: str) -> TurnRecord:
        return TurnRecord([1] * 40, [2] * 5, None, "stop", final, 8, 0, 0, 0.5, gate)

    result = AgentResult("Which code?", "\\boxed{7}", "7", 300, ["m1", "m2"],
                         [turn(False, "updated"), turn(False, "kept"), turn(True, "final")])
    doc = {"document": "SECRET DOCUMENT TEXT", "doc_id": None}
    record = trace_record(result, doc, "smollm2", 3, documents=False)
    assert "SECRET DOCUMENT TEXT" not in json.dumps(record) and record["document"] == {}
    assert trace_record(result, doc, "smollm2", 3, documents=True)["document"] == {"document": "SECRET DOCUMENT TEXT"}
    spans = turn_spans(record["memory"], record["steps"], record["prediction"], record["answer"])
    assert [s.name for s in spans] == ["chunk 1", "chunk 2", "final answer"]
    assert [(s.inputs["memory_before"], s.outputs["memory_after"], s.attributes["gate"]) for s in spans[:2]] == [
        ("", "m1", "updated"), ("m1", "m2", "kept")]
    assert spans[0].attributes["tokens_read"] == 40 and spans[-1].outputs["prediction"] == "7"
