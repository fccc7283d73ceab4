"""pipelines/runtime.py without starting Ray: what reaches workers, a config as another node sees
it, and the bounds on a command's cleanup (a shutdown that never returns is left behind, and the
command still exits with its own status instead of waiting on it at exit)."""

import subprocess
import sys
import threading
from pathlib import Path

from pipelines import runtime
from pipelines.config import load_config
from tests.support import REPO


def test_workers_get_the_s3_settings_and_the_named_variables_only(monkeypatch):
    for secret in runtime.SECRET_ENV:
        monkeypatch.setenv(secret, "s3cr3t")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:8333")
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "WARNING")
    monkeypatch.setenv("MEMAGENT_HOME", "/driver/home")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "true")
    env = runtime.worker_env(TOKENIZERS_PARALLELISM="false")
    assert env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:8333" and env["VLLM_LOGGING_LEVEL"] == "WARNING"
    assert "s3cr3t" not in env.values()  # keys reach workers through their node's environment only
    assert env["TOKENIZERS_PARALLELISM"] == "false"  # an override wins over the driver's value
    assert "MEMAGENT_HOME" not in env  # each node keeps its own home


def test_a_portable_config_names_the_drivers_home_and_stores_absolutely(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MEMAGENT_HOME", raising=False)
    cfg = load_config(None, ["home=h", "data.store=st", "serve.store=sv"])
    there = runtime.portable(cfg)
    assert there.home == str(tmp_path / "h")
    assert there.data.store == str(tmp_path / "st") and there.serve.store == str(tmp_path / "sv")
    assert Path(there.home).is_absolute() and runtime.portable(there) == there
    s3 = runtime.portable(load_config(None, ["data.store=s3://b/st"]))
    assert s3.data.store == "s3://b/st" and s3.serve.store is None


def test_bounded_reports_a_call_that_does_not_return(monkeypatch):
    monkeypatch.setattr(runtime, "stuck", False)  # restored after the test
    never = threading.Event()
    assert runtime.bounded(lambda: None, 5.0) and not runtime.stuck
    assert not runtime.bounded(never.wait, 0.2) and runtime.stuck
    never.set()


def test_a_stuck_shutdown_does_not_hold_the_exit():
    # An exit handler that never returns stands for Ray's own atexit shutdown waiting on a dead
    # raylet: after a stuck shutdown, `memagent` exits without running it.
    script = ("import atexit, sys, threading\n"
              "from pipelines import cli, runtime\n"
              "atexit.register(threading.Event().wait)\n"
              "runtime.stuck = True\n"
              "sys.argv = ['memagent', 'config', 'check', 'learn.steps=0']\n"
              "cli.entry()\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "learn.steps" in proc.stderr, proc.stderr[-2000:]
