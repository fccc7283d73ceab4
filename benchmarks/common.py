"""Helpers shared by benchmark scripts: process-tree RSS sampling, command echo, JSON last line."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipelines.rollout.rss import process_rss  # noqa: E402

MB = 1 << 20


def run_measured(cmd: list[str], env: dict | None = None, interval: float = 0.2) -> tuple[subprocess.CompletedProcess, int]:
    """Run a command; return its result and the peak RSS of its whole process tree (bytes)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
    peak = 0
    stop = threading.Event()

    def sample():
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, process_rss(proc.pid))
            time.sleep(interval)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    out, err = proc.communicate()
    stop.set()
    t.join()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), peak


def command_line() -> str:
    return " ".join(shlex.quote(a) for a in [".venv/bin/python", *sys.argv])


def finish(figures: dict) -> None:
    print(f"\nreproduce: {command_line()}")
    print(json.dumps(figures))
