"""Servers a chaos test may stop and start again: each test module gets its own, never the
session's (tests/conftest.py), so an outage here cannot fail a test elsewhere."""

from __future__ import annotations

import threading
import time

import pytest

from infra.seaweedfs import SeaweedFS


@pytest.fixture(scope="module")
def flaky_s3(tmp_path_factory):
    """A SeaweedFS of this module's own, with a bucket `chaos`."""
    server = SeaweedFS(tmp_path_factory.mktemp("flaky-s3")).start()
    server.create_bucket("chaos")
    yield server
    server.stop()


@pytest.fixture
def on_flaky_s3(flaky_s3, monkeypatch):
    """This process's S3 calls go to flaky_s3 for the test."""
    for k, v in flaky_s3.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    return flaky_s3


def outage(server, seconds: float) -> threading.Thread:
    """Stop `server` now and start it again on the same port after `seconds`, in the background;
    join the thread to wait for it to be back."""
    server.stop()
    thread = threading.Thread(target=lambda: (time.sleep(seconds), server.start()), daemon=True)
    thread.start()
    return thread


def steps_in(lines: list[str]) -> list[int]:
    """The step numbers of a training's progress lines (`step 3/8  reward ...`), in order."""
    return [int(line.split()[1].split("/")[0]) for line in lines if line.startswith("step ") and "/" in line.split()[1]]


class Training:
    """`memagent ARGS` in a session of its own, its stderr read line by line as it comes: a test
    injects a fault when the run reaches a step, then waits for the end (or kills the session)."""

    def __init__(self, args: list[str], env: dict | None = None):
        import os
        import subprocess
        import sys
        import tempfile

        from tests.support import REPO

        self._stdout = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen([sys.executable, "-m", "pipelines.cli", *args], cwd=REPO, text=True,
                                     env={**os.environ, **(env or {})}, stdout=self._stdout,
                                     stderr=subprocess.PIPE, start_new_session=True)
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    def steps(self) -> list[int]:
        return steps_in(self.lines)

    def wait_step(self, step: int, timeout: float = 400) -> None:
        """Until the progress line of `step` is out; fails if the run ends first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while (self.steps() or [0])[-1] < step and self.proc.poll() is None and time.monotonic() < deadline:
                self._cond.wait(1.0)
        assert (self.steps() or [0])[-1] >= step and self.proc.poll() is None, \
            f"the run did not reach step {step}:\n{self.stderr[-3000:]}"

    def finish(self, timeout: float = 600) -> tuple[int, str, str]:
        """(exit status, stdout, stderr) once it ends by itself."""
        rc = self.proc.wait(timeout)
        self._reader.join(timeout=10)
        self._stdout.seek(0)
        return rc, self._stdout.read(), self.stderr

    def kill(self) -> None:
        from tests.learn.conftest import kill_session

        if self.proc.poll() is None:
            kill_session(self.proc)


@pytest.fixture
def rl_tasks(tmp_path, tokenizer) -> str:
    """Task rows for a tiny RL run (tests/learn's: distinct answers a00, a01, ...)."""
    from pipelines.data.tasks import write_task_rows
    from tests.learn.rows import synthetic_rows, token_counter

    uri = str(tmp_path / "tasks")
    write_task_rows(synthetic_rows(60, token_counter(tokenizer)), uri)
    return uri
