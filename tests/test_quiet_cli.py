"""Commands as a user runs them, output captured (not a terminal): stdout holds only the
command's output, stderr only its own lines (the log file's path, progress records, errors),
and the libraries' lines (transformers' bars, Ray's and vLLM's warnings) are in the log file.

The transformers engine with a tiny random model where only the output's shape matters (vLLM's
engine process, which logs the most: tests/ask/test_ask_vllm.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import OURS, REPO, cli_env, only_log, run_cli

pytestmark = pytest.mark.slow

TINY = ["agent.chunk_size=128", "agent.memory_budget=8", "agent.final_budget=8", "track.enabled=false"]


@pytest.fixture
def doc(tmp_path) -> Path:
    p = tmp_path / "doc.txt"
    p.write_text("The sky is green today. " * 70)  # a few chunks of 128 tokens
    return p


@pytest.fixture
def cmd_home(tmp_path) -> Path:
    return tmp_path / "cmd_home"




def size(doc: Path, tokenizer) -> tuple[int, int]:
    n = len(tokenizer.encode(doc.read_text(), add_special_tokens=False))
    return n, -(-n // 128)


def ask(doc: Path, model: Path, *extra: str) -> list[str]:
    return ["ask", "--doc", str(doc), "--question", "What colour is the sky?", "engine.kind=hf",
            f"model.path={model}", *TINY, *extra]


def test_ask_quiet_then_verbose(doc, cmd_home, tiny_model_dir, tokenizer):
    n_tokens, n_chunks = size(doc, tokenizer)
    proc = run_cli(*ask(doc, tiny_model_dir), env=cli_env(cmd_home))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.splitlines()
    assert out[0].startswith("answer:") and out[-1].startswith(f"read {n_tokens} tokens in {n_chunks + 1} turns")
    assert "WARNING" not in proc.stdout and "Loading weights" not in proc.stdout
    err = proc.stderr.splitlines()
    assert err[0].startswith("memagent: library logs: ") and all(OURS.match(line) for line in err), err
    assert err[-1].startswith(f"ask: {n_chunks}/{n_chunks} chunks (100%)") and "tok/s=" in err[-1], err
    assert "Loading weights" in only_log(cmd_home)  # transformers' tqdm bar

    verbose = run_cli("--verbose", *ask(doc, tiny_model_dir), env=cli_env(cmd_home / "v"))
    assert verbose.returncode == 0, verbose.stderr[-3000:]
    assert "Loading weights" in verbose.stderr and "library logs" not in verbose.stderr
    assert not (cmd_home / "v" / "logs").exists()


def test_ask_show_memory_prints_each_memory_as_its_turn_is_written(doc, cmd_home, tiny_model_dir, tokenizer):
    """stderr into stdout: one pipe, so the order of the two streams' lines is the order written."""
    proc = subprocess.run([sys.executable, "-m", "pipelines.cli", *ask(doc, tiny_model_dir, "--show-memory")],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                          env={**os.environ, **cli_env(cmd_home)}, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    events = [line for line in proc.stdout.splitlines() if line.startswith(("ask: ", "--- memory", "answer:"))]
    _, n = size(doc, tokenizer)
    expected = []
    for i in range(1, n + 1):
        expected += [f"ask: {i}/{n} chunks", f"--- memory after chunk {i}/{n} ("]
    expected += [f"ask: {n}/{n} chunks", "answer:"]  # the end record, then the answer
    assert [e[:len(x)] for e, x in zip(events, expected)] == expected and len(events) == len(expected), events


def test_rollout_keeps_ray_logs_out_of_its_output(tmp_path, cmd_home, tiny_model_dir):
    from pipelines.data.tasks import write_task_rows
    from tests.rollout.helpers import needle_row

    tasks = str(tmp_path / "tasks.parquet")
    write_task_rows([needle_row(i, 3) for i in range(3)], tasks)
    proc = run_cli("rollout", "--tasks", tasks, "--out", str(tmp_path / "out"), "--keep-all", "engine.kind=hf",
                   f"model.path={tiny_model_dir}", *TINY, "rollout.group_size=2", "rollout.worker_num_cpus=0.5",
                   f"data.store={tmp_path / 'store'}", env=cli_env(cmd_home))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.splitlines()[-1])["groups"] == 3
    assert not any(OURS.match(line) or "WARNING" in line for line in proc.stdout.splitlines())
    err = proc.stderr.splitlines()
    assert all(OURS.match(line) for line in err), err
    assert err[-1].startswith("rollout: 3/3 groups (100%)") and "done in" in err[-1]
    log = only_log(cmd_home)
    assert "Started a local Ray instance" in log and "Ray workers' logs: " in log


def test_ingest_shows_objects_on_stderr_and_json_on_stdout(tmp_path, cmd_home, tiny_model_dir):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(2):
        (corpus / f"c{i}.jsonl").write_text("".join(json.dumps({"id": f"d{i}{j}", "text": "word " * 40}) + "\n"
                                                    for j in range(3)))
    proc = run_cli("ingest", "--source", str(corpus), "--store", str(tmp_path / "store"), "--json",
                   "ingest.runner=local", f"model.path={tiny_model_dir}", "track.enabled=false", env=cli_env(cmd_home))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["documents"] == 6
    err = proc.stderr.splitlines()
    assert all(OURS.match(line) for line in err), err
    assert [line.split(",")[0] for line in err[1:]] == ["ingest: 1/2 objects (50%)", "ingest: 2/2 objects (100%)",
                                                        "ingest: 2/2 objects (100%)"]


def test_data_build_shows_documents_then_objects(tmp_path, cmd_home, tiny_model_dir):
    proc = run_cli("data", "build", "--task", "niah_single", "--lengths", "256", "--n", "3", "--split", "eval",
                   "--out", str(tmp_path / "rows"), "--store", str(tmp_path / "store"), "ingest.runner=local",
                   f"model.path={tiny_model_dir}", "track.enabled=false", env=cli_env(cmd_home))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("wrote 3 task rows")
    err = proc.stderr.splitlines()
    assert all(OURS.match(line) for line in err), err
    docs = [line for line in err if line.startswith("data build niah_single: ")]
    assert docs and docs[-1].startswith("data build niah_single: 3/3 docs (100%)")
    assert any(line.startswith("ingest: 1/1 objects (100%)") for line in err)
