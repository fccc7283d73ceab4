"""`memagent ask` end to end: the vLLM CPU engine, a ~20K-token document; its output captured as
a script would: stdout the one JSON line, stderr only the command's own lines, vLLM's warnings
(its engine process logs the most) in the log file. Only the shapes matter here (turns, memory
sizes, a prediction parsed or reported missing), so the model is the tiny random one vLLM's CPU
attention accepts: SmolLM2 made this the suite's slowest test (115 s in float32, 488 s in bf16)."""

import json
import math

import pytest

from pipelines.ingest.builders.needle_file import write_needle_document
from tests.support import run_cli
from tests.support import OURS, cli_env, only_log

pytestmark = pytest.mark.slow


def test_ask_json_over_20k_tokens(tmp_path, vllm_tiny_model_dir, tokenizer):
    doc = tmp_path / "doc.txt"
    question, gold = write_needle_document(doc, 20000, seed=3)
    n_tokens = len(tokenizer.encode(doc.read_text(), add_special_tokens=False))
    assert 18000 < n_tokens < 22000
    home = tmp_path / "home"
    proc = run_cli("ask", "--doc", str(doc), "--question", question, "--json", f"model.path={vllm_tiny_model_dir}",
                   "agent.chunk_size=1024", "agent.memory_budget=32", "agent.final_budget=32",
                   "engine.max_model_len=2048",
                   env=cli_env(home, VLLM_LOGGING_LEVEL="WARNING"), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [line] = proc.stdout.splitlines()
    assert all(OURS.match(line) for line in proc.stderr.splitlines()), proc.stderr
    log = only_log(home)
    assert "WARNING" in log and "EngineCore" in log
    out = json.loads(line)
    assert out["doc_tokens"] == n_tokens
    assert out["turns"] == math.ceil(n_tokens / 1024) + 1
    assert len(out["memory"]) == len(out["memory_tokens"]) == out["turns"] - 1
    assert all(0 < n <= 32 for n in out["memory_tokens"])
    assert isinstance(out["answer"], str) and out["answer"]
    # A random model's answer: parsed or reported missing, never guessed.
    assert out["prediction"] is None or "\\boxed{" + out["prediction"] + "}" in out["answer"]
    assert out["seconds"] > 0
