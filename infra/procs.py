"""Process helpers for the local servers in infra/: free loopback ports, stopping a process group."""

from __future__ import annotations

import os
import signal
import socket
import time

from pipelines.runtime import free_port


def free_port_pair(low: int = 20000, high: int = 45000) -> int:
    """A free loopback port whose +10000 gRPC twin is free too (SeaweedFS opens both)."""
    for _ in range(200):
        port = free_port()
        if low <= port < high and port_free(port + 10000):
            return port
    raise RuntimeError("no free port pair found")


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def stop_pid(pid: int, grace: float = 10) -> None:
    """SIGTERM the server's process group, then SIGKILL it if it is still there after grace seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if gone(pid):
                return
            time.sleep(0.2)


def gone(pid: int) -> bool:
    """Whether pid has exited. Our own child is reaped here: an exited child stays a zombie, which
    signal 0 still reaches, until its parent waits for it (each stop then took the whole grace)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return True
    except ChildProcessError:  # not our child: its own parent reaps it
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False
