"""`memagent config check`: the paper's preset passes; each kind of problem is its own line,
exit status 2; nothing starts (no Ray, no engine, no model fetched)."""

from __future__ import annotations

import json
import sys

import pytest

from pipelines.cli import main
from pipelines.cluster.window import TEMPLATE_TOKENS
from pipelines.config import REPO_ROOT as REPO

PRESET = str(REPO / "pipelines" / "configs" / "cluster-qwen2.5-7b.yaml")


def check(capsys, *overrides: str, config: str = PRESET, json_out: bool = False) -> tuple[int, str, str]:
    argv = ["--config", config, "config", "check", *(["--json"] if json_out else []), *overrides]
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def problems(out: str) -> list[str]:
    return out.strip().splitlines()


def test_the_paper_preset_passes_and_says_what_counts(capsys):
    rc, out, err = check(capsys)
    assert rc == 0, err
    assert "OK" in out.splitlines()[0]
    window = next(line for line in out.splitlines() if line.startswith("window:"))
    # 116 fixed template tokens (Qwen2.5, measured) + the paper's budgets: 4 tokens to spare in 8K.
    assert ("template 116 + question 1024 + memory 1024 + chunk 5000 + output 1024 = 8188 <= "
            "engine.max_model_len=8192") in window
    assert "Qwen2.5" in window
    assert "rollout: 16 workers x (8 CPUs, 1 GPU) in group 'rollout' (2 nodes x 88 CPUs, 8 GPUs)" in out
    assert "learner: 16 workers x (8 CPUs, 1 GPU) in group 'learner'" in out
    ray = sys.modules.get("ray")
    assert ray is None or not ray.is_initialized()


def test_json_is_one_object(capsys):
    rc, out, _ = check(capsys, json_out=True)
    assert rc == 0
    result = json.loads(out)
    assert result["ok"] and result["problems"] == []
    assert result["window"]["total"] == 8188 and result["window"]["limit"] == 8192
    fits = {p["role"]: (p["workers"], p["fit"]) for p in result["placements"]}
    assert fits == {"rollout": (16, 16), "learner": (16, 16)}


@pytest.mark.parametrize("overrides,expected", [
    (["rollout.workers=32"],
     "rollout: 32 workers x (8 CPUs, 1 GPU) in group 'rollout' (2 nodes x 88 CPUs, 8 GPUs): only 16 fit"),
    (["engine.tensor_parallel_size=16"], "engine.tensor_parallel_size=16: more GPUs than one node of group "
                                         "'rollout' (2 nodes x 88 CPUs, 8 GPUs) has; an engine's GPUs lie within one node"),
    (["engine.tensor_parallel_size=2"], "rollout: 16 workers x (8 CPUs, 2 GPUs) in group 'rollout' "
                                        "(2 nodes x 88 CPUs, 8 GPUs): only 8 fit"),
    (["cluster.groups.rollout.gpus_per_node=0"], "engine.use_gpu=true: group 'rollout' (2 nodes x 88 CPUs, 0 GPUs) "
                                                 "has no GPUs"),
    (["learn.cpus_per_worker=12"], "learner: 16 workers x (12 CPUs, 1 GPU) in group 'learner' "
                                   "(2 nodes x 88 CPUs, 8 GPUs): only 14 fit"),
    (["cluster.groups.learner.gpus_per_node=0"], "learner: 16 workers x (8 CPUs, 1 GPU) in group 'learner' "
                                                 "(2 nodes x 88 CPUs, 0 GPUs): only 0 fit"),
    (["cluster.groups.rollout.nodes=3"], "cluster.groups: 5 nodes in all, more than cluster.nodes=4"),
    (["data.store=/data/store"], "data.store '/data/store': a local path, but cluster.nodes=4"),
    (["serve.state_dir="], "serve.state_dir 'HOME/serve': a local path"),
])
def test_each_resource_problem_is_one_line(capsys, overrides, expected):
    rc, out, err = check(capsys, *overrides)
    assert rc == 2
    lines = problems(out)
    assert len(lines) == 1 and lines[0].startswith(expected), out
    assert err.splitlines()[-1] == f"memagent: error: config '{PRESET}': 1 problem"


def test_cpu_engines_reserve_no_gpus(capsys):
    rc, out, err = check(capsys, "engine.use_gpu=false", "engine.tensor_parallel_size=16")
    assert rc == 0, err
    assert "rollout: 16 workers x (8 CPUs, 0 GPUs) in group 'rollout'" in out


def test_rollout_and_learner_sharing_the_cluster_count_together(capsys):
    local = str(REPO / "pipelines" / "configs" / "local.yaml")
    rc, out, _ = check(capsys, "rollout.workers=2", "cluster.cpus_per_node=2", "model.path=s3://m/x", config=local)
    assert rc == 2
    assert problems(out) == ["rollout + learner share the cluster (1 node x 2 CPUs, 0 GPUs): together they "
                             "need 3 CPUs, 0 GPUs of its 2 CPUs, 0 GPUs"]


def test_window_problem_names_every_part_and_all_problems_come_at_once(capsys):
    rc, out, err = check(capsys, "engine.max_model_len=8000", "agent.final_budget=1500", "rollout.workers=17")
    assert rc == 2
    lines = problems(out)
    assert len(lines) == 2 and lines[0].startswith("rollout: 17 workers")
    assert lines[1].startswith("window: template 116 + question 1024 + memory 1024 + chunk 5000 + output 1500 "
                               "= 8664 > engine.max_model_len=8000")
    assert "the longer of agent.memory_budget and agent.final_budget" in lines[1]
    assert err.splitlines()[-1].endswith("2 problems")


def test_json_failure_is_one_object_and_exit_2(capsys):
    rc, out, _ = check(capsys, "engine.max_model_len=4096", json_out=True)
    assert rc == 2
    result = json.loads(out)
    assert not result["ok"] and result["window"]["fits"] is False
    assert result["problems"][0].startswith("window:")


def test_a_local_tokenizer_counts_the_template(capsys, tokenizer, tmp_path):
    """SmolLM2's tokenizer and chat template (its own system prompt): 132 fixed tokens."""
    tokenizer.save_pretrained(tmp_path / "tok")
    rc, out, err = check(capsys, f"model.path={tmp_path / 'tok'}", config=str(REPO / "pipelines" / "configs" / "local.yaml"))
    assert rc == 0, err
    window = next(line for line in out.splitlines() if line.startswith("window:"))
    assert window.startswith("window: template 132 + question 1024 + memory 64 + chunk 256 + output 64 = 1540")
    assert f"with the tokenizer in {tmp_path / 'tok'}" in window


def test_the_gated_template_without_its_tokenizer_counts_the_qwen_estimate(capsys):
    """No Qwen2.5 tokenizer here: the gated template's count is the estimate, said so; the paper's
    budgets, 4 tokens short of 8K with the release template, then overflow by 45."""
    rc, out, err = check(capsys, "agent.gates=true", "agent.template=gated")
    assert rc == 2
    window = next(line for line in out.splitlines() if line.startswith("window:"))
    assert window.startswith("window: template 165 + question 1024 + memory 1024 + chunk 5000 + output 1024 = 8237 > "
                             "engine.max_model_len=8192")
    assert "as estimated for 'gated' with Qwen2.5's tokenizer (not measured; SmolLM2's measures 181)" in window


@pytest.mark.parametrize("template", sorted(TEMPLATE_TOKENS))
def test_the_smollm2_counts_are_what_its_tokenizer_measures(capsys, tokenizer, tmp_path, template):
    tokenizer.save_pretrained(tmp_path / "tok")
    rc, out, err = check(capsys, f"model.path={tmp_path / 'tok'}", f"agent.template={template}",
                         f"agent.gates={str(template == 'gated').lower()}",
                         config=str(REPO / "pipelines" / "configs" / "local.yaml"))
    assert rc == 0, err
    window = next(line for line in out.splitlines() if line.startswith("window:"))
    assert window.startswith(f"window: template {TEMPLATE_TOKENS[template].smollm2} + ")


@pytest.mark.parametrize("override,needle", [
    ("cluster.gpus=8", "unknown key 'cluster.gpus'"),
    ("cluster.groups.rollout.gpu=1", "unknown key 'cluster.groups.rollout.gpu'"),
    ("cluster.learner_group=trainers", "learner_group 'trainers' is not in cluster.groups (learner, rollout)"),
])
def test_unknown_keys_and_groups_are_one_named_line(capsys, override, needle):
    rc, out, err = check(capsys, override)
    assert rc == 2 and out == ""
    errors = [line for line in err.splitlines() if line.startswith("memagent: error:")]
    assert len(errors) == 1 and needle in errors[0], err
