"""`memagent train --continuous` end to end, as the nightly job runs it: real Ray (Ray Train SFT
rounds, HF-engine rollout workers for the held-out ladder) and a real MLflow registry (sqlite
under the test's folder). The tiny random Llama learns a constant answer ("7") in one round:
the first round beats the base model and is registered; rows added while a second process
runs are picked up, and that round (no better than @production) is not; restarted processes
neither retrain consumed files nor register a round twice (including after a crash between
registering a version and recording it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.support import REPO, run_cli
from tests.learn.conftest import kill_session
from tests.learn.rows import synthetic_rows, token_counter
from tests.tiny import TINY_LEARN_OVERRIDES

pytestmark = pytest.mark.slow

NAME = "continuous-test"


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_model_dir, tokenizer):
    from pipelines.data.tasks import write_task_rows

    root = tmp_path_factory.mktemp("continuous")
    count = token_counter(tokenizer)

    def rows(prefix: str, n: int, split: str, answer: str) -> list:
        """n rows of one constant answer, documents of 1-2 chunks (the needle at different places)."""
        return [replace(synthetic_rows(1, count, answer=lambda _: answer, repeats=6 + i % 7)[0],
                        sample_id=f"{prefix}{i:02d}", split=split) for i in range(n)]

    # Held-out documents of their own (the gate refuses rows that share one with the training files).
    heldout = [replace(r, context=f"Held out. {r.context}", doc_tokens=count(f"Held out. {r.context}"))
               for r in rows("h", 8, "eval", "7")]
    write_task_rows(heldout, str(root / "heldout"))
    overrides = [
        f"model.path={tiny_model_dir}", "engine.kind=hf", "engine.dtype=float32", "agent.chunk_size=128",
        "agent.memory_budget=16", "agent.final_budget=8", "learn.sft.lr=1e-2", "learn.sft.steps=20", "learn.sft_batch=4", "learn.sft_epochs=6",
        "learn.sft_heldout=0.25", "learn.sft.checkpoint_every=100", *TINY_LEARN_OVERRIDES, "learn.continuous.poll_s=1",
        "learn.continuous.margin=0.5", "learn.continuous.eval_n=8", "eval.concurrency=4", "eval.traces=0",
        "rollout.worker_num_cpus=0.5", f"track.tracking_uri=sqlite:///{root / 'mlflow.db'}",
        f"learn.registry_name={NAME}"]
    args = ["train", "--continuous", "--sft", "--tasks", str(root / "tasks"), "--heldout", str(root / "heldout"),
            "--out", str(root / "out"), *overrides]
    return root, args, rows, {"MEMAGENT_HOME": str(root / "home")}, tiny_model_dir


def versions(root: Path) -> list[tuple[int, str]]:
    from mlflow import MlflowClient

    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    return sorted((int(v.version), client.get_run(v.run_id).data.tags.get("continuous_round", ""))
                  for v in client.search_model_versions(f"name='{NAME}'"))


def production(root: Path) -> int:
    from mlflow import MlflowClient

    uri = f"sqlite:///{root / 'mlflow.db'}"
    return int(MlflowClient(tracking_uri=uri, registry_uri=uri).get_model_version_by_alias(NAME, "production").version)


def run_tree(root: Path) -> list[tuple[str, str]]:
    """(each run's name, its parent's name or "" for a top-level run), sorted."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    names = {r.info.run_id: r.info.run_name for r in runs}
    return sorted((r.info.run_name, names.get(r.data.tags.get("mlflow.parentRunId"), "")) for r in runs)


def state(root: Path) -> dict:
    return json.loads((root / "out" / "continuous.json").read_text())


def last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


class Watched:
    """`memagent ARGS` in its own session, its stderr lines (with their times) read as they come."""

    def __init__(self, args: list[str], env: dict):
        self.proc = subprocess.Popen([sys.executable, "-m", "pipelines.cli", *args], cwd=REPO, text=True,
                                     env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True)
        self.lines: list[tuple[float, str]] = []
        self.stdout: list[str] = []
        self.started = time.monotonic()
        self.readers = [threading.Thread(target=self._read, daemon=True),
                        threading.Thread(target=lambda: self.stdout.append(self.proc.stdout.read()), daemon=True)]
        for t in self.readers:
            t.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append((time.monotonic() - self.started, line))

    def stderr(self) -> str:
        return "".join(f"{t:6.1f}s {line}" for t, line in list(self.lines))

    def wait_for(self, text: str, timeout: float = 900) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for _, line in list(self.lines)):
            assert self.proc.poll() is None or any(text in line for _, line in list(self.lines)), \
                f"ended (rc {self.proc.returncode}) before '{text}':\n{self.stderr()[-4000:]}"
            assert time.monotonic() < deadline, f"no '{text}' within {timeout} s:\n{self.stderr()[-4000:]}"
            time.sleep(0.2)

    def stop(self) -> int:
        """SIGTERM, as Kubernetes stops a pod; SIGKILL to the whole session if it does not end."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            kill_session(self.proc)
        for t in self.readers:
            t.join(timeout=10)
        return self.proc.returncode


def test_continuous_training_registers_only_a_gain_and_survives_restarts(setup):
    root, args, rows, env, base = setup
    tasks, a, b = root / "tasks", root / "tasks" / "a.parquet", root / "tasks" / "b.parquet"
    tasks.mkdir()

    # One polling process; both files arrive after it started (b while round 1 trains). Round 1
    # learns the wrong constant ("8"): no better than the base model, not registered. Round 2,
    # from round 1's model, learns the held-out rows' "7": registered, @production (the name had
    # none).
    run = Watched(args, env)
    try:
        run.wait_for("waiting for new task files")
        write_rows(rows("a", 16, "train", "8"), a)
        run.wait_for("continuous: round 1: 16 rows")
        write_rows(rows("b", 16, "train", "7"), b)
        run.wait_for("continuous: round 2: held-out")
    finally:
        rc = run.stop()
    print(run.stderr())
    assert rc == 128 + signal.SIGTERM, run.stderr()[-3000:]
    s = state(root)
    r1, r2 = s["rounds"]
    assert s["consumed"] == [str(a), str(b)] and s["current"] is None
    assert r1["files"] == [str(a)] and r1["rows"] == 16 and r1["steps"] > 0 and r1["base"] == str(base)
    assert r1["incumbent"] == "the base model" and not r1["register"] and "registered" not in r1
    assert r2["files"] == [str(b)] and r2["base"] == r1["model"] and r2["incumbent"] == "the base model"
    assert r2["strict"] - r2["incumbent_strict"] > 0.5 and r2["registered"] == f"models:/{NAME}/1"
    assert versions(root) == [(1, r2["key"])] and production(root) == 1
    err = run.stderr()
    assert "round 1: held-out" in err and "not registered" in err and f"registered models:/{NAME}/1" in err
    assert "95% interval" in err
    # One run for the command, one nested run per round (its training's metrics), and under each
    # round the held-out evaluations that decided it.
    command, tree = f"train --continuous sft-{base.name}", run_tree(root)
    assert {name for name, parent in tree if not parent} == {command}
    assert sorted((name, parent) for name, parent in tree if name.startswith("round-")) == [
        ("round-001", command), ("round-002", command)]
    assert {parent for name, parent in tree if name == "eval-heldout"} == {"round-001", "round-002"}

    # A crash after round 2's version was registered, before the round was recorded: the
    # restart finds the version in the registry instead of registering it again, trains and
    # evaluates nothing again (nothing new either), and records the round.
    crashed = {**s, "rounds": [r1], "consumed": [str(a)], "scores": {},
               "current": {k: v for k, v in r2.items() if k != "registered"}}
    (root / "out" / "continuous.json").write_text(json.dumps(crashed))
    again = run_cli(*args, "--once", env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert not [line for line in again.stderr.splitlines() if line.startswith(("step ", "eval:"))], again.stderr
    assert versions(root) == [(1, r2["key"])]
    assert state(root)["consumed"] == [str(a), str(b)] and state(root)["rounds"][1]["registered"] == r2["registered"]
    assert [r["n"] for r in last_json(again.stdout)["rounds"]] == [2]
    assert last_json(again.stdout)["production"] == f"models:/{NAME}/1"


def write_rows(rows: list, path: Path) -> None:
    """Whole or not at all, as the watched folder requires (write_task_rows renames a finished file)."""
    from pipelines.data.tasks import write_task_rows

    write_task_rows(rows, str(path))


def test_bad_continuous_input_is_one_line(capsys, tmp_path):
    """Refused before anything starts, naming the input."""
    from pipelines import cli
    from tests.support import check_error

    def train(*args: str):
        capsys.readouterr()
        code = cli.main(["train", *args, f"home={tmp_path / 'home'}", f"track.tracking_uri=sqlite:///{tmp_path}/m.db"])
        return SimpleNamespace(returncode=code, stderr=capsys.readouterr().err)

    check_error(train("--once", "--tasks", str(tmp_path)), "--continuous")
    check_error(train("--continuous", "--out", str(tmp_path / "out")), "--tasks")
    check_error(train("--continuous", "--tasks", str(tmp_path), "track.enabled=false"), "track.enabled")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "continuous.json").write_text(json.dumps({"tasks": "/elsewhere", "consumed": []}))
    check_error(train("--continuous", "--tasks", str(tmp_path), "--heldout", str(tmp_path), "--out",
                      str(tmp_path / "out")), "/elsewhere", "another --out")
    (tmp_path / "out" / "continuous.json").write_text("{")
    check_error(train("--continuous", "--tasks", str(tmp_path), "--out", str(tmp_path / "out")), "continuous.json")
