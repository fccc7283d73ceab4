"""The embedded defaults are the SmolLM2 recipe; the paper's 7B settings live in the cluster preset."""

import json

import pytest

from pipelines.config import REPO_ROOT as REPO, load_config
from pipelines.errors import UserError
from pipelines.learn.command import check_sft_overrides, model_notice, recipe_line

# The settings that make the SmolLM2 recipe: what its presets and the embedded defaults must agree on.
RECIPE = ("learn.lr", "learn.sft.lr", "learn.sft.steps", "learn.freeze_layers", "learn.token_budget",
          "learn.autocast", "learn.warmup_steps", "learn.kl_coef", "learn.loss_agg", "learn.sft_batch",
          "learn.task_lengths", "agent.chunk_size", "agent.memory_budget", "agent.final_budget",
          "rollout.group_size", "rollout.batch_groups", "rollout.loops_per_worker", "rollout.temperature")


def value(cfg, dotted: str):
    for key in dotted.split("."):
        cfg = getattr(cfg, key)
    return cfg


@pytest.mark.parametrize("preset", ["sft-smollm2.yaml", "rl-smollm2.yaml"])  # quickstart.yaml: shortened on purpose
def test_the_smollm2_presets_and_the_defaults_do_not_drift_apart(preset):
    defaults, cfg = load_config(None), load_config(REPO / "pipelines" / "configs" / preset)
    drifted = {k: (value(cfg, k), value(defaults, k)) for k in RECIPE if value(cfg, k) != value(defaults, k)}
    assert not drifted, f"{preset} restates the recipe differently from the defaults: {drifted}"


def test_defaults_are_the_smollm2_recipe_not_the_papers_7b():
    d, cluster = load_config(None), load_config(REPO / "pipelines" / "configs" / "cluster-qwen2.5-7b.yaml")
    assert d.learn.lr == 2e-5 and d.learn.sft.lr == 2e-4 and d.learn.freeze_layers == 20
    assert (d.agent.chunk_size, d.agent.memory_budget, d.agent.final_budget) == (256, 64, 32)
    assert (cluster.learn.lr, cluster.learn.kl_coef, cluster.learn.freeze_layers) == (1e-6, 0.001, 0)
    assert (cluster.agent.chunk_size, cluster.agent.memory_budget, cluster.rollout.group_size) == (5000, 1024, 16)


def test_sft_mode_takes_its_own_rate_steps_and_threads():
    learn = load_config(None).learn
    sft, rl = learn.for_mode(True), learn.for_mode(False)
    assert (sft.lr, sft.steps, sft.threads, sft.checkpoint_every) == (2e-4, 120, 2, 10)
    assert (rl.lr, rl.steps, rl.threads) == (2e-5, 60, None)
    unset = load_config(None, ["learn.sft.threads=null"]).learn.for_mode(True)
    assert unset.threads is None  # unset: learn's own value


def test_an_sft_run_refuses_the_rl_keys_it_would_ignore():
    with pytest.raises(UserError, match=r"learn\.sft\.lr") as e:
        check_sft_overrides(["agent.chunk_size=128", "learn.lr=1e-3"])
    assert "\n" not in str(e.value)
    check_sft_overrides(["learn.sft.lr=1e-3", "learn.freeze_layers=0"])


def test_the_recipe_line_and_the_notice_for_another_model(tmp_path):
    cfg = load_config(None)
    line = recipe_line(cfg.model_copy(update={"learn": cfg.learn.for_mode(True)}), True, None)
    assert "embedded SmolLM2-135M recipe" in line and "lr 0.0002 (learn.sft.lr)" in line and "\n" not in line
    assert "configs/x.yaml" in recipe_line(cfg, False, "configs/x.yaml")
    assert f"{cfg.learn.for_mode(True).steps} steps;" in line and "30 steps;" in recipe_line(cfg, True, None, steps=30)  # --steps wins
    smol = tmp_path / "smol"
    smol.mkdir()
    (smol / "config.json").write_text(json.dumps({"num_hidden_layers": 30, "hidden_size": 576, "vocab_size": 49152}))
    assert model_notice(smol) is None  # a fine-tuned SmolLM2 (the SFT model RL starts from) is the recipe's
    other = tmp_path / "qwen"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"num_hidden_layers": 28, "hidden_size": 3584, "vocab_size": 152064}))
    notice = model_notice(other)
    assert "not SmolLM2-135M" in notice and "learn.lr" in notice and "agent.memory_budget" in notice
