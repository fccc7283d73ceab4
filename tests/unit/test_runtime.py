"""The bounds on a command's cleanup (pipelines/raylife.py): a shutdown that never returns is
left behind, and the command still exits with its own status instead of waiting on it at exit."""

import subprocess
import sys
import threading

from pipelines import raylife
from tests.conftest import REPO


def test_bounded_reports_a_call_that_does_not_return(monkeypatch):
    monkeypatch.setattr(raylife, "stuck", False)  # restored after the test
    never = threading.Event()
    assert raylife.bounded(lambda: None, 5.0) and not raylife.stuck
    assert not raylife.bounded(never.wait, 0.2) and raylife.stuck
    never.set()


def test_a_stuck_shutdown_does_not_hold_the_exit():
    # An exit handler that never returns stands for Ray's own atexit shutdown waiting on a dead
    # raylet: after a stuck shutdown, `memagent` exits without running it.
    script = ("import atexit, sys, threading\n"
              "from pipelines import cli, raylife\n"
              "atexit.register(threading.Event().wait)\n"
              "raylife.stuck = True\n"
              "sys.argv = ['memagent', 'config', 'check', 'learn.steps=0']\n"
              "cli.entry()\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "learn.steps" in proc.stderr, proc.stderr[-2000:]
