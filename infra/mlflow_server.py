"""Start and stop a local MLflow tracking server (sqlite backend, artifacts in S3 or a folder).

    .venv/bin/python infra/mlflow_server.py start --dir .memagent/mlflow-server \
        [--artifacts s3://memagent/artifacts] [--port 5000]     # prints MLFLOW_TRACKING_URI
    .venv/bin/python infra/mlflow_server.py stop --dir .memagent/mlflow-server

With an s3:// artifact root the server and its clients reach S3 through MLFLOW_S3_ENDPOINT_URL
and the AWS key variables (e.g. the SeaweedFS from infra/seaweedfs.py). Tests use
`MlflowServer` directly on a free port and stop it afterwards.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from infra.procs import stop_pid  # noqa: E402
from pipelines.runtime import free_port  # noqa: E402


def mlflow_binary() -> str:
    here = Path(sys.executable).parent / "mlflow"
    if not here.exists():
        raise RuntimeError(f"mlflow not found next to {sys.executable}: install mlflow")
    return str(here)


@dataclass
class MlflowServer:
    root: Path
    artifact_root: str | None = None  # s3://bucket/prefix; None: a folder under root
    port: int = field(default_factory=free_port)
    env: dict[str, str] = field(default_factory=dict)  # S3 endpoint and keys for the server
    proc: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 90) -> "MlflowServer":
        self.root.mkdir(parents=True, exist_ok=True)
        artifacts = self.artifact_root or (self.root / "artifacts").absolute().as_uri()
        cmd = [mlflow_binary(), "server", "--backend-store-uri", f"sqlite:///{self.root.absolute() / 'mlflow.db'}",
               "--default-artifact-root", artifacts, "--host", "127.0.0.1", "--port", str(self.port),
               "--workers", "1"]
        env = {**os.environ, **self.env}
        endpoint = env.get("AWS_ENDPOINT_URL")
        if endpoint:
            env.setdefault("MLFLOW_S3_ENDPOINT_URL", endpoint)
        log = open(self.root / "mlflow-server.log", "ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        (self.root / "mlflow.pid").write_text(str(self.proc.pid))
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited early; see {self.root / 'mlflow-server.log'}")
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"mlflow server not ready after {timeout}s; see {self.root / 'mlflow-server.log'}")

    def stop(self) -> None:
        if self.proc is None:
            return
        stop_pid(self.proc.pid)
        self.proc.wait()
        self.proc = None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("action", choices=["start", "stop"])
    p.add_argument("--dir", default=".memagent/mlflow-server")
    p.add_argument("--artifacts", default=None, help="artifact root, e.g. s3://memagent/artifacts")
    p.add_argument("--port", type=int, default=5000)
    a = p.parse_args()
    root = Path(a.dir).absolute()
    if a.action == "stop":
        pid_file = root / "mlflow.pid"
        if pid_file.exists():
            stop_pid(int(pid_file.read_text()))
            pid_file.unlink()
        print("stopped")
        return
    server = MlflowServer(root, a.artifacts, a.port).start()
    print(f"export MLFLOW_TRACKING_URI={server.uri}")


if __name__ == "__main__":
    main()
