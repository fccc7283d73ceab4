"""`memagent quickstart` end to end at a reduced size (the same code path, a tiny random model on
the transformers engine: the figures that show learning come from the real recipe, see the
README). Its first run is stopped by SIGTERM right after the SFT stage; the second run must
skip what was done and finish: store rows, MLflow runs and a registered version, batch results
one per input all exist and agree. The random model answers nothing before or after RL, so the
gate keeps (and registers) the SFT model: RL is promoted only on a gain its held-out rows show."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import re

import pyarrow.parquet as pq
import pytest

from tests.support import REPO

pytestmark = pytest.mark.slow

SMALL = ["engine.kind=hf", "engine.dtype=float32", "learn.freeze_layers=0", "learn.autocast=false",
         "quickstart.train_n=4", "quickstart.heldout_n=3", "quickstart.batch_n=2", "quickstart.sft.steps=2",
         "quickstart.sft.sft_batch=4", "quickstart.sft.checkpoint_every=1", "quickstart.rl.steps=1",
         "rollout.group_size=2", "rollout.batch_groups=1", "rollout.loops_per_worker=8", "eval.concurrency=8",
         "rollout.drop_equal_rewards=false",  # a random model scores 0 everywhere: keep its groups
         "eval.traces=2", "serve.trace_sample=1"]  # MLflow traces: 2 questions an evaluation, every batch row


def quickstart(home: Path, model: Path, stop_after: str | None = None) -> tuple[int, str, str]:
    """Run the command; with stop_after, SIGTERM it once that stage's done line is printed."""
    env = {**os.environ, "MEMAGENT_HOME": str(home)}
    cmd = [sys.executable, "-m", "pipelines.cli", "quickstart", f"model.path={model}", *SMALL]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    if stop_after is None:
        out, err = proc.communicate(timeout=1200)
        return proc.returncode, out, err
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if line.startswith("[") and f"] {stop_after}: done" in line:
            proc.send_signal(signal.SIGTERM)
            break
    out, err = proc.communicate(timeout=300)
    return proc.returncode, out, "".join(lines) + err


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir):
    home = tmp_path_factory.mktemp("qs-home")
    first = quickstart(home, tiny_model_dir, stop_after="sft")
    time.sleep(2)
    second = quickstart(home, tiny_model_dir)
    return home, first, second


def test_an_interrupted_quickstart_resumes_without_redoing_stages(runs):
    _, (rc1, _, err1), (rc2, out2, err2) = runs
    assert rc1 == 128 + signal.SIGTERM, err1[-2000:]
    assert rc2 == 0, err2[-3000:]
    for stage in ("data", "eval_before", "sft"):
        assert f"] {stage}: done earlier" in err2
    for stage in ("eval_sft", "rl", "eval_after", "register", "serve"):
        assert f"] {stage}: done in" in err2
    assert "step 1/2" not in err2  # SFT did not run again


def test_the_stage_outputs_exist_and_agree(runs):
    home, _, (_, out, _) = runs
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["n"] == 3 and all(0.0 <= summary[k] <= 1.0 for k in ("before", "after_sft", "after"))
    assert summary["score"] == "strict" and set(summary["sub_em"]) == {"before", "after_sft", "after"}
    assert summary["kept"] == "sft" and summary["rl_gain"][3] == 3 and "does not clear" in summary["why"]
    assert summary["model"] == "models:/memagent-quickstart/1" and summary["alias"] == "production"
    root = home / "quickstart"
    ledger = json.loads((root / "stages.json").read_text())
    assert ledger["data"]["train"]["rows"] == 12 and ledger["data"]["eval"]["rows"] == 3
    assert (root / "store").is_dir() and any((root / "store").rglob("*.parquet"))
    batch = pq.read_table(ledger["serve"]["output"]).to_pylist()
    heldout = {r["sample_id"] for r in pq.read_table(root / "tasks" / "eval").to_pylist()}
    assert len(batch) == 2 and {r["id"] for r in batch} <= heldout and not any(r["error"] for r in batch)
    assert "held-out strict score" in out and "kept the SFT model: RL's paired gain" in out
    assert "mlflow ui --backend-store-uri" in out


def test_mlflow_holds_the_runs_and_the_registered_version(runs):
    from mlflow import MlflowClient

    home = runs[0]
    uri = f"sqlite:///{home / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    mv = client.get_model_version_by_alias("memagent-quickstart", "production")
    assert str(mv.version) == "1" and float(mv.tags["heldout_n"]) == 3
    commands = [r.data.tags.get("command") for e in client.search_experiments()
                for r in client.search_runs([e.experiment_id])]
    assert commands.count("eval") >= 3 and commands.count("train") >= 2
    tags = client.get_run(mv.run_id).data.tags  # the version's lineage: the SFT run that made the kept model
    assert tags["command"] == "train" and tags["quickstart"] == "sft" and tags["kept"] == "sft"
    assert float(mv.tags["heldout_rl_gain_lo"]) <= 0.02


def test_mlflow_shows_one_run_tree_per_invocation_with_datasets_lineage_and_traces(runs):
    """Each invocation is a `quickstart` run, its stages named children; the data they read are
    datasets with digests; the version leads to the SFT run's logged model; the evaluations'
    sampled questions and the batch rows served are traces, with no document text."""
    from mlflow import MlflowClient

    from pipelines.eval.results import read_cell

    home = runs[0]
    uri = f"sqlite:///{home / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    exp = client.get_experiment_by_name("memagent").experiment_id
    every = client.search_runs([exp], order_by=["attributes.start_time ASC"])
    first, second = [r for r in every if "mlflow.parentRunId" not in r.data.tags]  # the stopped run, the resumed one
    assert first.info.run_name == second.info.run_name == "quickstart" and first.info.status == "KILLED"

    def children(run):
        return {r.info.run_name: r for r in every if r.data.tags.get("mlflow.parentRunId") == run.info.run_id}

    assert set(children(first)) == {"eval-base", "sft"}
    kids = children(second)
    assert set(kids) == {"eval-sft", "rl", "eval-rl", "register", "serve"}
    (job,) = children(kids["serve"]).values()
    assert job.info.run_name.startswith("batch-") and kids["register"].data.tags["registered"].endswith("/1")
    assert second.data.tags["command"] == "quickstart" and len(second.data.tags["git_commit"]) == 40

    def inputs(run):
        return {(i.dataset.name, {t.key: t.value for t in i.tags}["mlflow.data.context"]): i.dataset
                for i in run.inputs.dataset_inputs}

    data = inputs(second)
    assert set(data) == {("tasks/train", "training"), ("quickstart/store", "training"), ("tasks/eval", "held-out")}
    assert json.loads(data[("tasks/train", "training")].profile)["num_rows"] == 12
    assert ("tasks/eval", "held-out") in inputs(kids["eval-rl"]) and ("tasks/train", "training") in inputs(kids["rl"])
    assert {c for _, c in inputs(job)} == {"batch-input"}
    sft = children(first)["sft"]
    mv = client.get_model_version("memagent-quickstart", "1")  # version -> logged model -> run
    model = client.get_logged_model(mv.source.removeprefix("models:/"))
    assert model.source_run_id == sft.info.run_id == mv.run_id
    assert float(mv.tags["agent.chunk_size"]) > 0 and any(m.key == "heldout_strict" for m in model.metrics)

    evals = client.search_traces(locations=[exp], run_id=kids["eval-rl"].info.run_id)
    cell = {r["index"]: r for r in read_cell(str(home / "quickstart" / "eval_after" / "cells" / "niah_single" / "1K"
                                                 / "memagent.parquet"))}
    assert sorted(int(t.info.tags["index"]) for t in evals) == [0, 1]  # eval.traces=2 of its 3 questions
    for trace in evals:
        rec, spans = cell[int(trace.info.tags["index"])], trace.data.spans
        assert len(spans) == 1 + rec["turns"]  # the question, then one span per turn
        chunks = sorted((s for s in spans if s.name.startswith("chunk ")), key=lambda s: s.attributes["chunk_index"])
        assert [s.outputs["memory_after"] for s in chunks] == rec["memory"]
    served = client.search_traces(locations=[exp], run_id=kids["serve"].info.run_id)
    assert len(served) == 2 and {t.info.tags["source"] for t in served} == {"serve"}
    store = pq.read_table(home / "quickstart" / "store" / "chunks", columns=["text"]).column("text").to_pylist()
    text = " ".join(t.to_json() for t in served)
    assert "document.doc_id" in text and not any(chunk[:200] in text for chunk in store if len(chunk) > 50)


# What a library writes when it reaches the terminal: Ray's forwarded worker and raylet lines ("(raylet)",
# "(RolloutWorker pid=...)"), logging records (levels, timestamps), warnings, progress bars, tracebacks.
LIBRARY = re.compile(r"^\s*(\x1b\[[0-9;]*m)?\((raylet|\w+ pid=\d+|pid=\d+)|\b(INFO|WARNING|DEBUG|ERROR)\b"
                     r"|^\d{4}-\d\d-\d\d[ T]\d\d:|^\[[WIE] |Warning:|it/s\]|Traceback|^\s+File \"")


def test_no_library_line_reaches_the_terminal_shutdown_included(runs):
    """Outside --verbose the command's own lines only, to its very end (Serve's and Ray's shutdown too)."""
    _, _, (_, out, err) = runs
    leaked = [line for line in (out + err).splitlines() if LIBRARY.search(line)]
    assert not leaked, leaked[:10]
