"""The same commands on a real two-node Ray cluster (tests/cluster/raynodes.py): ingest, a rollout,
an eval cell, training steps and a Serve batch job, each a `memagent` driver that joins the
cluster through RAY_ADDRESS, with the chunk store, task rows, trajectories, checkpoints and
results on SeaweedFS S3 and the runs on an MLflow server. The rollout workers, the Ray Train
learner and the Serve replica are placed on node b (rollout.worker_resources,
learn.worker_resources, serve.replica_resources), whose processes cannot see the driver's home
or any of the test's local files (covered by an empty tmpfs in node b's mount namespace):
whatever they need comes from S3 into node b's own home. The batch job serves the trained
model, which nothing else on node b fetches: its cache in node b's home is the replica's.

The tiny random Llama on the transformers engine: only where work runs matters here."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from infra.mlflow_server import MlflowServer
from tests.cluster.raynodes import LocalCluster, RayNode
from tests.support import REPO, run_cli
from tests.tiny import TINY_LEARN_OVERRIDES

pytestmark = pytest.mark.slow  # a Ray cluster of two nodes, SeaweedFS and an MLflow server

BUCKET = "memagent-test"
ROOT = f"s3://{BUCKET}/multinode"
STORE, TASKS, MODEL = f"{ROOT}/store", f"{ROOT}/tasks", f"{ROOT}/model"
TASK, LENGTH, N_DOCS = "multinode", "256", 3
PLACED = ("RolloutWorker", "RayTrainWorker")  # the actors that must run on node b, never on the head
COMMON = [f"model.path={MODEL}", "engine.kind=hf", "engine.dtype=float32", "agent.chunk_size=128",
          "agent.memory_budget=8", "agent.final_budget=8", f"data.store={STORE}",
          "rollout.worker_resources={node_b: 1}", "rollout.group_size=2", "rollout.loops_per_worker=4",
          "rollout.batch_groups=1", "rollout.buffer_groups=2", "rollout.drop_equal_rewards=false",
          "learn.worker_resources={node_b: 1}", "learn.lr=1e-3", "eval.concurrency=4",
          f"serve.store={STORE}", f"serve.state_dir={ROOT}/serve", "serve.shard_rows=2",
          "serve.replica_resources={node_b: 1}", *TINY_LEARN_OVERRIDES]


@dataclass(frozen=True)
class Stages:
    ingest: dict
    rollout: dict
    eval_out: str
    train: dict
    batch_out: str


@pytest.fixture(scope="module")
def mlflow_uri(s3, tmp_path_factory):
    server = MlflowServer(tmp_path_factory.mktemp("mlflow"), f"{ROOT}/mlflow-artifacts", env=s3.env()).start()
    yield server.uri
    server.stop()


@pytest.fixture(scope="module")
def cluster(s3, mlflow_uri, tmp_path_factory, tiny_model_dir):
    """Head (1 CPU; the drivers' machine: its home is theirs) and node b (2 CPUs) in a folder
    outside the test's temp tree, which node b cannot see, nor the repository's .memagent."""
    (REPO / ".memagent").mkdir(exist_ok=True)
    # Each node's folder directly under /tmp: Ray's socket paths below it must stay within 107
    # bytes (AF_UNIX), which a deeper pytest basetemp (pytest-xdist's .../popen-gwN/) passes.
    head, other = (Path(tempfile.mkdtemp(prefix=f"memagent-{name}-")) for name in ("head", "node-b"))
    hidden = [tmp_path_factory.getbasetemp(), REPO / ".memagent", head]
    env = {**s3.env(), "MLFLOW_TRACKING_URI": mlflow_uri, "MLFLOW_S3_ENDPOINT_URL": s3.endpoint,
           "TOKENIZERS_PARALLELISM": "false"}
    nodes = LocalCluster(RayNode("head", head, 1), RayNode("node_b", other, 2), hidden, env)
    try:
        yield nodes.start()
    finally:
        nodes.stop()
        for root in (head, other):
            shutil.rmtree(root, ignore_errors=True)


def memagent(cluster: LocalCluster, *args: str, overrides: tuple[str, ...] = ()) -> str:
    """A driver on the head's machine; its stdout. overrides: after COMMON's, so they win."""
    proc = run_cli(*args, *COMMON, *overrides, env=cluster.driver_env(cluster.head.home))
    assert proc.returncode == 0, f"memagent {args[0]}: {proc.stderr[-4000:]}"
    return proc.stdout


def last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def put_jsonl(s3, key: str, rows: list[dict]) -> str:
    s3.client().put_object(Bucket=BUCKET, Key=key, Body="".join(json.dumps(r) + "\n" for r in rows).encode())
    return f"s3://{BUCKET}/{key}"


def document(i: int) -> str:
    return "The sky is blue and the grass is green. " * 25 + f"The code of box {i} is {500 + i}."


def write_tasks() -> None:
    """Task rows naming the stored documents by doc_id."""
    from pipelines.data.store import ChunkStore
    from pipelines.data.tasks import TaskRow, write_task_rows

    store = ChunkStore(STORE)
    rows = [TaskRow(f"q{i}", f"What is the code of box {i}?", [str(500 + i)], "one_of", f"doc{i}", None,
                    store.info(f"doc{i}").n_tokens, TASK, "train") for i in range(N_DOCS)]
    assert write_task_rows(rows, TASKS) == N_DOCS


@pytest.fixture(scope="module")
def stages(cluster, s3, tiny_model_dir) -> Stages:
    """Every stage once, in order, each a fresh driver process."""
    from pipelines.storage import publish_dir

    publish_dir(tiny_model_dir, MODEL)
    corpus = put_jsonl(s3, "multinode/corpus/docs.jsonl",
                       [{"id": f"doc{i}", "text": document(i)} for i in range(N_DOCS)])
    ingest = last_json(memagent(cluster, "ingest", "--source", corpus, "--json", "ingest.workers=1",
                                "ingest.chunk_size=64"))
    write_tasks()
    rollout = last_json(memagent(cluster, "rollout", "--tasks", TASKS, "--out", f"{ROOT}/rollouts", "--keep-all"))
    memagent(cluster, "eval", "--dataset", TASKS, "--tasks", TASK, "--lengths", LENGTH, "--n", "2",
             "--methods", "memagent", "--out", f"{ROOT}/eval")
    train = last_json(memagent(cluster, "train", "--tasks", TASKS, "--out", f"{ROOT}/train", "--steps", "2"))
    questions = put_jsonl(s3, "multinode/batch/q.jsonl", [{"id": f"r{i}", "question": f"What is the code of box {i}?",
                                                           "doc_id": f"doc{i}"} for i in range(N_DOCS)])
    memagent(cluster, "batch", "--input", questions, "--output", f"{ROOT}/batch/out",
             overrides=(f"model.path={train['model']}",))  # the trained model
    return Stages(ingest, rollout, f"{ROOT}/eval", train, f"{ROOT}/batch/out")


def node_b_view(cluster: LocalCluster, path: Path) -> Path:
    """`path` as node b's processes see it (through its raylet's root, in its mount namespace)."""
    import psutil

    raylet = next(p for p in psutil.Process(cluster.other.proc.pid).children(recursive=True) if p.name() == "raylet")
    return Path(f"/proc/{raylet.pid}/root{path}")


def test_node_b_cannot_read_the_drivers_files(cluster, stages, tiny_model_dir):
    for folder in cluster.hidden:
        assert node_b_view(cluster, folder).stat().st_dev != folder.stat().st_dev, folder  # covered there
    mine = [tiny_model_dir / "config.json", cluster.head.temp_dir / "ray_current_cluster"]
    for path in mine + [p for folder in cluster.hidden[1:] for p in folder.iterdir()]:  # the repository's home
        assert path.exists() and not node_b_view(cluster, path).exists(), path


def test_node_b_wrote_nothing_under_the_drivers_paths(cluster, stages):
    written = [p for folder in cluster.hidden for p in node_b_view(cluster, folder).rglob("*") if p.is_file()]
    assert written == []


def test_node_bs_serve_replica_fetched_its_model_into_node_bs_home(cluster, stages):
    """The replica resolves the served model (the trained one, s3://) on its node, under that
    node's MEMAGENT_HOME: the driver's home is never forwarded to it."""
    assert "ServeReplica:memagent:Agent" in cluster.other.actor_classes()
    assert "ServeReplica:memagent:Agent" not in cluster.head.actor_classes()
    served = cluster.other.home / "cache" / "s3" / stages.train["model"][len("s3://"):]
    assert (served / "config.json").is_file() and (served / "model.safetensors").is_file()


def test_rollout_workers_and_learner_ran_on_node_b_only(cluster, stages):
    on_b, on_head = cluster.other.actor_classes(), cluster.head.actor_classes()
    assert set(PLACED) <= on_b, on_b
    assert not set(PLACED) & on_head, on_head


def test_node_b_fetched_the_model_from_s3_into_its_own_home(cluster, stages):
    cached = cluster.other.home / "cache" / "s3" / MODEL[len("s3://"):]
    assert (cached / "config.json").is_file() and (cached / "model.safetensors").is_file()


def test_ingest_and_rollout_results_are_on_s3(stages):
    from pipelines.data.store import ChunkStore
    from pipelines.rollout.writer import read_groups

    assert stages.ingest["documents"] == N_DOCS and stages.ingest["quarantined"] == 0
    assert sorted(ChunkStore(STORE).doc_ids()) == [f"doc{i}" for i in range(N_DOCS)]
    assert stages.rollout["groups"] == N_DOCS and stages.rollout["quarantined"] == 0
    groups = list(read_groups(f"{ROOT}/rollouts"))
    assert sorted(g.sample_id for g in groups) == [f"q{i}" for i in range(N_DOCS)]
    assert all(len(t.turns) >= 2 for g in groups for t in g.trajectories)  # the stored chunks were read


def test_eval_cell_is_on_s3(stages):
    from pipelines.eval.results import cell_uri, read_cell

    records = read_cell(cell_uri(stages.eval_out, TASK, LENGTH, "memagent"))
    assert len(records) == 2 and all(r["error"] is None and r["turns"] >= 2 for r in records), records


def test_training_steps_left_checkpoints_and_a_model_on_s3(stages):
    from pipelines.learn.runs import INDEX
    from pipelines.storage import exists

    assert stages.train["steps"] == 2 and stages.train["version"] == 2
    assert stages.train["model"] == f"{ROOT}/train/final" and exists(f"{ROOT}/train/final/config.json")
    assert exists(f"{ROOT}/train/learner/{INDEX}")


def test_batch_job_results_are_on_s3(stages):
    from pipelines.storage import resolve

    fs, path = resolve(stages.batch_out)
    rows = pq.read_table(path, filesystem=fs).to_pylist()
    assert sorted(r["id"] for r in rows) == [f"r{i}" for i in range(N_DOCS)]
    assert all(r["error"] is None and r["turns"] >= 2 for r in rows), rows


def test_every_stage_is_a_run_on_the_mlflow_server(stages, mlflow_uri):
    from mlflow import MlflowClient

    client = MlflowClient(mlflow_uri)
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    status = {r.data.tags.get("command"): r.info.status for r in runs}
    assert {k: status.get(k) for k in ("ingest", "rollout", "eval", "train", "serve", "batch")} == dict.fromkeys(
        ("ingest", "rollout", "eval", "train", "serve", "batch"), "FINISHED"), status
