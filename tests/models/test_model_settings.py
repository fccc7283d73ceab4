"""A trained model carries the agent settings it was trained with (pipelines/models/settings.py)."""

from __future__ import annotations

import json
import shutil

from pipelines import cli
from pipelines.agent.config import AgentConfig
from pipelines.models.settings import SETTINGS_FILE, adopt, stamp, trained_agent, version_tags

TRAINED = AgentConfig(chunk_size=64, memory_budget=8, final_budget=8)


def test_stamped_settings_read_back_and_the_command_line_wins(tmp_path):
    stamp(str(tmp_path), TRAINED)
    own = trained_agent(tmp_path)
    assert own == {"template": "release", "chunk_size": 64, "memory_budget": 8, "final_budget": 8,
                   "question_budget": 1024, "gates": False}
    agent, changed = adopt(AgentConfig(memory_budget=32), own, ["engine.kind=hf", "agent.memory_budget=32"])
    assert (agent.chunk_size, agent.memory_budget, agent.final_budget) == (64, 32, 8)  # memory: the command line's
    assert changed == {"chunk_size": 64, "final_budget": 8}
    assert version_tags(tmp_path)["agent.chunk_size"] == "64"
    assert trained_agent(tmp_path / "nowhere") is None and adopt(TRAINED, None, []) == (TRAINED, {})


def test_ask_runs_a_trained_model_with_its_own_chunk_size(tmp_path, tiny_model_dir, capsys):
    model = tmp_path / "trained"
    shutil.copytree(tiny_model_dir, model)
    stamp(str(model), TRAINED)
    doc = tmp_path / "doc.txt"
    doc.write_text("The grass is green. " * 60)  # ~300 tokens

    def ask(*overrides: str) -> tuple[dict, str]:
        capsys.readouterr()
        code = cli.main(["ask", "--doc", str(doc), "--question", "What colour is the grass?", "--json",
                         f"model.path={model}", "engine.kind=hf", "engine.dtype=float32", *overrides])
        out, err = capsys.readouterr()
        assert code == 0, err
        return json.loads(out.strip().splitlines()[-1]), err

    own, err = ask()
    assert f"agent settings: the model's own (chunk_size 64, memory_budget 8, final_budget 8; from {model}/{SETTINGS_FILE})" in err
    assert own["turns"] == -(-own["doc_tokens"] // 64) + 1  # chunks of the model's 64 tokens, then the answer
    mine, _ = ask("agent.chunk_size=128")
    assert mine["turns"] == -(-mine["doc_tokens"] // 128) + 1
