"""`memagent serve` as a user runs it, then stopped: by SIGTERM (a supervisor) or by Ctrl-C (SIGINT
to the terminal's whole process group). Afterwards no process of the Ray cluster it started is
left, checked by the process ids it had while serving (the transformers engine: quick to start)."""

import os
import signal
import subprocess
import sys
import time

import httpx
import psutil
import pytest

from tests.support import REPO, free_port

pytestmark = pytest.mark.slow


def sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def signal_masks(pid: int) -> str:
    """The main thread's signal masks (hex bit sets; SIGINT is 0x2), read from /proc."""
    lines = open(f"/proc/{pid}/task/{pid}/status").read().splitlines()
    return ", ".join(line.replace("\t", " ") for line in lines if line.startswith(("SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")))


def wait_serving(proc: subprocess.Popen, stdout, timeout: float = 300) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        with open(stdout) as f:
            line = f.readline()
        if line.startswith("serving"):
            return line
        time.sleep(0.5)
    raise AssertionError(f"not serving after {timeout} s (exit {proc.poll()})")


@pytest.mark.parametrize("how", ["sigterm", "ctrl-c"])
def test_stopping_serve_leaves_no_process_of_its_ray(how, smollm2_dir, tmp_path):
    port = free_port()
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    args = [sys.executable, "-m", "pipelines.cli", "serve", "--port", str(port), "engine.kind=hf",
            "engine.dtype=float32", "engine.max_model_len=1024", "serve.replica_cpus=0.5",
            f"serve.state_dir={tmp_path / 'state'}"]
    with open(out, "w") as o, open(err, "w") as e:
        # SIGINT at its default and unblocked, as a shell starts a command: an ignored or blocked
        # SIGINT is inherited, and in whole runs the child once never ran its handler (stack dump:
        # still napping 180 s after SIGINT).
        proc = subprocess.Popen(args, cwd=REPO, stdout=o, stderr=e, start_new_session=True, preexec_fn=sigint_default)
    cluster: list[psutil.Process] = []
    try:
        wait_serving(proc, out)
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=30).json() == {"status": "ok"}
        cluster = psutil.Process(proc.pid).children(recursive=True)
        names = {p.name() for p in cluster}
        assert {"raylet", "gcs_server", "ray::DashboardAgent", "ray::RuntimeEnvAgent"} <= names, names
        if how == "sigterm":
            proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGINT)
        try:
            rc = proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            masks = signal_masks(proc.pid)  # ignored (SigIgn), blocked (SigBlk) or pending (SigPnd/ShdPnd)
            proc.send_signal(signal.SIGUSR1)  # the CLI writes every thread's stack to its log: what it waits on
            time.sleep(3)
            log = err.read_text().split("memagent: library logs: ")[-1].split(" ")[0]
            raise AssertionError(f"not stopped after 180 s ({masks}); its log {log}:\n{open(log).read()[-8000:]}") from None
        last = err.read_text().strip().splitlines()[-1]
        if how == "sigterm":
            assert rc == 128 + signal.SIGTERM and last == "memagent: stopped (SIGTERM)", (rc, last)
        else:
            assert rc == 128 + signal.SIGINT and last == "memagent: interrupted", (rc, last)
        _, left = psutil.wait_procs(cluster, timeout=10)
        assert not left, [(p.pid, p.name()) for p in left]
    finally:
        for p in [*cluster, psutil.Process(proc.pid)] if proc.poll() is None else cluster:
            try:
                p.kill()
            except psutil.Error:
                pass
