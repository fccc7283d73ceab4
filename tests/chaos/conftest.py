"""Servers a chaos test may stop and start again: each test module gets its own, never the
session's (tests/conftest.py), so an outage here cannot fail a test elsewhere."""

from __future__ import annotations

import re
import socket
import threading
import time

import pytest

from infra.mlflow_server import MlflowServer
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


@pytest.fixture
def mlflow(tmp_path):
    """An MLflow server of the test's own."""
    server = MlflowServer(tmp_path / "mlflow").start()
    yield server
    server.stop()


def tracked_rl(tiny_model_dir, uri: str, retry_s: float = 2) -> list[str]:
    """tests/learn's tiny RL overrides, tracked at `uri` (retried every retry_s), rewarded by
    tests/chaos/rewards.py:gated_reward."""
    from tests.learn.conftest import rl_overrides

    swaps = {"track.enabled=false": f"track.tracking_uri={uri}"}
    return [swaps.get(o, o) for o in rl_overrides(tiny_model_dir) if not o.startswith("rollout.reward=")] + [
        "rollout.reward=tests.chaos.rewards:gated_reward", f"track.retry_s={retry_s:g}"]


def outage(server, seconds: float) -> threading.Thread:
    """Stop `server` now and start it again on the same port after `seconds`, in the background;
    join the thread to wait for it to be back."""
    server.stop()
    thread = threading.Thread(target=lambda: (time.sleep(seconds), server.start()), daemon=True)
    thread.start()
    return thread


class Tripwire:
    """A TCP proxy in front of `server`'s S3 port that starts its outages at chosen requests: when
    a PUT or POST writes the nth distinct object key matching `key` (Ray Train's upload of a
    checkpoint's learner.pt, say) and `outages` has n, so the fault lands inside that write
    however the run is timed. That connection is dropped and every connection refused for
    outages[n] seconds (None: until `restore`): the endpoint down for exactly that long, whatever
    a loaded machine's server restart would take. A run reaches S3 through `endpoint`."""

    def __init__(self, server, key: bytes, outages: dict[int, float | None]):
        self.server, self.outages = server, outages
        self._write = re.compile(rb"(?:PUT|POST) /(\S*?" + key + rb")[ ?]")
        self.keys: list[str] = []  # the matching keys written, in order
        self.tripped: list[int] = []  # the n of each outage started
        self._down_until = 0.0  # time.monotonic() until which connections are refused
        self._lock = threading.Lock()
        self._listen = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self._listen.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._listen.close()

    def restore(self) -> None:
        """The endpoint answers again (the end of a lasting outage)."""
        with self._lock:
            self._down_until = 0.0

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listen.accept()
            except OSError:
                return
            threading.Thread(target=self._forward, args=(client,), daemon=True).start()

    def _forward(self, client: socket.socket) -> None:
        with self._lock:
            down = time.monotonic() < self._down_until
        if down:  # refused, as a stopped endpoint would
            client.close()
            return
        upstream = socket.create_connection(("127.0.0.1", self.server.s3_port))
        threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()
        seen = b""
        while data := _recv(client):
            seen = seen[-1024:] + data
            if self._trips(seen):
                break
            try:
                upstream.sendall(data)
            except OSError:
                break
        client.close()
        upstream.close()

    def _trips(self, seen: bytes) -> bool:
        with self._lock:
            new = [k for k in dict.fromkeys(m.decode() for m in self._write.findall(seen)) if k not in self.keys]
            self.keys += new
            n = len(self.keys)
            if not new or n not in self.outages or n in self.tripped:
                return False
            self.tripped.append(n)
            seconds = self.outages[n]
            self._down_until = time.monotonic() + (seconds if seconds is not None else float("inf"))
            return True


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(1 << 16)
    except OSError:
        return b""


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    while data := _recv(src):
        try:
            dst.sendall(data)
        except OSError:
            break
    dst.close()
    src.close()


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
