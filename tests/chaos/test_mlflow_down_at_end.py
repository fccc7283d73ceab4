"""The MLflow server down when a training run ends: it is stopped at the progress line of the
step before the last, so the last step's metrics, the run's end and the registration all meet a
refusing server (everything after that line waits on a whole step first). The model is trained,
so the run still succeeds: registering is tried learn.runs.REGISTER_TRIES times, then one line
says the model stays in OUT and gives the `memagent model register` command; the model folder is
whole and loads, and that command, run once the server is back, registers it."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from tests.chaos.conftest import Training, tracked_rl
from tests.support import REPO

STEPS = 3


@pytest.mark.slow  # a real training run or a server stopped and started
def test_a_run_ending_while_the_tracker_is_down_keeps_its_model_and_says_how_to_register_it(
        mlflow, rl_tasks, tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    home, out = tmp_path / "home", tmp_path / "run"
    args = ["train", "--tasks", rl_tasks, "--steps", str(STEPS), "--out", str(out),
            *tracked_rl(tiny_model_dir, mlflow.uri, retry_s=1)]
    run = Training(args, {"MEMAGENT_HOME": str(home)})
    try:
        run.wait_step(STEPS - 1)
        mlflow.stop()
        rc, stdout, err = run.finish()
    finally:
        run.kill()
    assert rc == 0, err[-3000:]  # trained: the run succeeds without its registration
    assert run.steps() == list(range(1, STEPS + 1))
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["registered"] is None and summary["model"] == str(out / "final")
    (line,) = [x for x in err.splitlines() if x.startswith("not registered")]
    assert f"the model stays in '{out / 'final'}'" in line and "Traceback" not in err
    AutoModelForCausalLM.from_pretrained(out / "final")  # whole: it loads

    mlflow.start()
    command = shlex.split(line.split("once the server answers, run: ", 1)[1])
    assert command[:3] == ["memagent", "model", "register"]
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", *command[1:]], cwd=REPO, capture_output=True,
                          text=True, env={**os.environ, "MEMAGENT_HOME": str(home)}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"-> models:/memagent/1$", done.stdout.strip())

    from mlflow import MlflowClient

    client = MlflowClient(mlflow.uri)
    version = client.get_model_version("memagent", "1")
    assert client.get_run(version.run_id).data.tags["model"] == str(out / "final")


def test_registering_against_a_refusing_server_is_tried_then_one_line(tiny_model_dir, tmp_path, monkeypatch, capsys):
    import socket

    from pipelines.config import load_config
    from pipelines.learn.runs import REGISTER_TRIES, register

    with socket.socket() as s:  # a port nothing listens on: refused at once
        s.bind(("127.0.0.1", 0))
        uri = f"http://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setattr(sys, "argv", ["memagent", "--config", "rl-smollm2", "train"])
    cfg = load_config(None, [f"home={tmp_path}", f"track.tracking_uri={uri}", "track.experiment=nightly",
                             "track.retry_s=7", "learn.registry_name=mem"])
    waits = []
    out = {"model": str(tiny_model_dir), "tasks": "t", "steps": 3}
    assert register(cfg, out, "run-1", sleep=waits.append) is None
    assert waits == [7] * (REGISTER_TRIES - 1)
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"not registered after {REGISTER_TRIES} tries (model 'models:/mem': ")
    assert line.endswith(f"once the server answers, run: memagent --config rl-smollm2 model register --model "
                         f"{tiny_model_dir} --name mem track.tracking_uri={uri} track.experiment=nightly")
