"""Serve follows the registry: `models:/NAME@production` is pinned to its version at start, and
when the alias moves, the app reloads the new version while requests keep coming, none failing.
Real MLflow registry (sqlite), real Ray Serve, the transformers engine on tiny random models
(only which weights are served matters here)."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from pipelines.config import load_config
from pipelines.models.registry import register_model
from pipelines.track.config import TrackConfig
from tests.serve.running import running_app, token_client

pytestmark = pytest.mark.slow

TOKEN = "follow-token"
NAME = "follow-test"


@pytest.fixture(scope="module")
def registry(tmp_path_factory, tiny_model_dir):
    """Version 1 (@production) and version 2 (other weights) of one registered model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    home = tmp_path_factory.mktemp("follow-home")
    track = TrackConfig(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    other = home / "other-weights"
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    model.save_pretrained(other)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(other)
    register_model(tiny_model_dir, NAME, home, track, alias="production")
    register_model(other, NAME, home, track)
    return home, track


def test_an_alias_move_is_followed_without_a_failed_request(registry, tmp_path_factory, monkeypatch):
    from mlflow import MlflowClient

    home, track = registry
    monkeypatch.setenv("MLFLOW_TRACKING_URI", track.tracking_uri)  # the replicas resolve refs with it
    monkeypatch.setenv("MEMAGENT_HOME", str(home))
    cfg = load_config(overrides=[
        f"model.path=models:/{NAME}@production", "engine.kind=hf", "engine.dtype=float32",
        "agent.chunk_size=128", "agent.memory_budget=8", "agent.final_budget=8", f"home={home}",
        "serve.replicas=1", "serve.replica_cpus=0.5", "serve.follow_alias=true", "serve.follow_interval_s=1",
        f"serve.state_dir={tmp_path_factory.mktemp('follow-state')}", f"track.tracking_uri={track.tracking_uri}"])
    with running_app(cfg, TOKEN) as url, token_client(url, TOKEN) as client:
        assert client.get("/v1/models").json()["data"][0]["id"] == f"models:/{NAME}/1"
        statuses, stop = [], threading.Event()

        def traffic() -> None:
            with token_client(url, TOKEN) as c:
                while not stop.is_set():
                    r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                             "max_tokens": 4, "temperature": 0})
                    statuses.append(r.status_code)

        sender = threading.Thread(target=traffic)
        sender.start()
        try:
            time.sleep(2)
            MlflowClient(tracking_uri=track.tracking_uri).set_registered_model_alias(NAME, "production", "2")
            deadline, served = time.monotonic() + 180, None
            while time.monotonic() < deadline and served != f"models:/{NAME}/2":
                time.sleep(1)
                served = client.get("/v1/models").json()["data"][0]["id"]
            before = len(statuses)
            while len(statuses) < before + 3:  # requests on the new weights too
                time.sleep(0.5)
        finally:
            stop.set()
            sender.join()
    assert served == f"models:/{NAME}/2"
    assert len(statuses) >= 5 and set(statuses) == {200}, statuses
    # the deployment's MLflow run recorded both loads, in order, and ended with the app
    mlflow = MlflowClient(tracking_uri=track.tracking_uri)
    (run,) = mlflow.search_runs([e.experiment_id for e in mlflow.search_experiments()], "tags.command = 'serve'")
    loads = [int(m.value) for m in mlflow.get_metric_history(run.info.run_id, "serve/model_version")]
    assert loads == [1, 2] and run.data.tags["serving"] == f"models:/{NAME}/2", (loads, run.data.tags)
    assert run.info.status == "FINISHED" and run.data.tags["model"] == f"models:/{NAME}@production"
