"""A real two-node Ray cluster on loopback, for tests: a head (`ray start --head`) and a second
node (`ray start --address=...`), each with its own temp folder, home folder and a custom
resource naming it, so that work can be placed on the node that is not the driver's. (Ray
gives a node on loopback the machine's own address, so both nodes share it; drivers connect to
127.0.0.1:PORT.)

The second node runs in its own mount namespace (`unshare --mount`) in which the folders named
in `hidden` (the driver's home, its test files, the repository's .memagent) are covered by an
empty tmpfs: a worker there that opens a path of the driver's local disk finds nothing, as it
would on another machine. Ports are chosen free, never Ray's defaults, so another Ray on this
machine is not touched; both nodes are stopped by their process ids (never `ray stop`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.support import free_port

RAY = str(Path(sys.executable).parent / "ray")
STARTED = b"Ray runtime started."  # what `ray start` logs once its node has joined
PORT_FLAGS = ("--node-manager-port", "--object-manager-port", "--runtime-env-agent-port",
              "--dashboard-agent-grpc-port", "--dashboard-agent-listen-port", "--metrics-export-port")


@dataclass
class RayNode:
    name: str  # also its custom resource
    root: Path  # ray/ (Ray's --temp-dir) and home/ (HOME and MEMAGENT_HOME) below it
    cpus: int
    proc: subprocess.Popen | None = None

    @property
    def temp_dir(self) -> Path:
        return self.root / "ray"

    @property
    def home(self) -> Path:
        return self.root / "home"

    def args(self, head_address: str | None) -> list[str]:
        where = ["--address", head_address] if head_address else [
            "--head", "--port", str(free_port()), "--ray-client-server-port", str(free_port()),
            "--include-dashboard", "false"]
        ports = [a for flag in PORT_FLAGS for a in (flag, str(free_port()))]
        return [RAY, "start", *where, "--num-cpus", str(self.cpus), "--num-gpus", "0",
                "--resources", json.dumps({self.name: 100}), "--temp-dir", str(self.temp_dir),
                "--disable-usage-stats", "--block", *ports]

    def env(self, base: dict[str, str]) -> dict[str, str]:
        env = {k: v for k, v in base.items() if not k.startswith("RAY_")}
        return {**env, "HOME": str(self.home), "MEMAGENT_HOME": str(self.home)}

    def actor_classes(self) -> set[str]:
        """Classes of the actors whose workers ran on this node (Ray writes ':actor_name:CLASS' at
        the top of an actor's worker log)."""
        found = set()
        for log in self.temp_dir.glob("session_[0-9]*/logs/worker-*.out"):  # not session_latest again
            with contextlib.suppress(OSError):
                found |= {line[len(":actor_name:"):].strip() for line in log.read_text(errors="replace").splitlines()
                          if line.startswith(":actor_name:")}
        return found


def hidden_command(cmd: list[str], hidden: list[Path]) -> list[str]:
    """cmd in a mount namespace of its own, each folder of `hidden` covered by an empty tmpfs."""
    mounts = "".join(f"mount -t tmpfs memagent-hidden {shlex.quote(str(d))} && " for d in hidden)
    return ["unshare", "--mount", "--map-root-user", "--propagation", "private", "sh", "-c",
            f"{mounts}exec {shlex.join(cmd)}"]


@dataclass
class LocalCluster:
    head: RayNode
    other: RayNode
    hidden: list[Path]  # covered on the other node
    env: dict[str, str] = field(default_factory=dict)  # both nodes' environment (S3, MLflow)
    address: str = ""

    def start(self, timeout: float = 300, attempts: int = 3) -> "LocalCluster":
        """Head, then the other node. On a loaded machine a raylet may give up on its slow
        dashboard agent (it waits 15 s for it) and the node dies at start: it is started again."""
        head_args = self.head.args(None)
        self.address = f"127.0.0.1:{head_args[head_args.index('--port') + 1]}"
        self._start(self.head, head_args, timeout, attempts)
        self._start(self.other, hidden_command(self.other.args(self.address), self.hidden), timeout, attempts)
        return self

    def _start(self, node: RayNode, cmd: list[str], timeout: float, attempts: int) -> None:
        node.temp_dir.mkdir(parents=True, exist_ok=True)
        node.home.mkdir(parents=True, exist_ok=True)
        log = node.root / "ray-start.log"
        for _ in range(attempts):
            with open(log, "ab") as out:
                start = out.tell()
                node.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=node.root,
                                             env=node.env({**os.environ, **self.env}), start_new_session=True)
            deadline = time.monotonic() + timeout
            while node.proc.poll() is None and time.monotonic() < deadline:
                if STARTED in log.read_bytes()[start:]:
                    return
                time.sleep(0.5)
            stop_tree(node.proc.pid, grace=10)
            node.proc.wait(timeout=30)
        raise RuntimeError(f"{node.name}: did not start in {attempts} attempts; see {log}")

    def driver_env(self, home: Path) -> dict[str, str]:
        """A driver on the head's machine: connects through RAY_ADDRESS, its own home."""
        return {**self.env, "RAY_ADDRESS": self.address, "HOME": str(home), "MEMAGENT_HOME": str(home)}

    def stop(self, grace: float = 5) -> None:
        """Every process of both nodes, by process id: each `ray start --block` and everything it
        started (raylet, GCS, agents, workers), the other node first."""
        for node in (self.other, self.head):
            if node.proc is not None:
                stop_tree(node.proc.pid, grace)
                node.proc.wait(timeout=grace)
                node.proc = None


def stop_tree(pid: int, grace: float) -> None:
    """SIGTERM the process, its descendants and the rest of its session; SIGKILL what is left."""
    procs = _tree(pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.send_signal(sig)
        _, procs = psutil.wait_procs(procs, timeout=grace)
        procs += [p for p in _tree(pid) if p not in procs]
        if not procs:
            return


def _tree(pid: int) -> list[psutil.Process]:
    """The process, its descendants, and any process of its session that was re-parented."""
    found: dict[int, psutil.Process] = {}
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        found = {p.pid: p for p in [root, *root.children(recursive=True)]}
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if p.pid not in found and os.getsid(p.pid) == pid:
                found[p.pid] = p
    return list(found.values())
