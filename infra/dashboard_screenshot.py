"""A screenshot of the MLflow runs page of a memagent home, taken in headless Chromium.

    .venv/bin/python infra/dashboard_screenshot.py --home .memagent --out docs/dashboard.png [--page traces]

After `make quickstart`: starts an MLflow server on a copy of the home's sqlite store
(HOME/mlflow.db; artifacts HOME/mlartifacts) on a free port, opens the `memagent` experiment's runs page (or its
traces page) in Debian's `chromium --headless=new`, saves the PNG, stops the server. Needs the
`chromium` package (apt-get install chromium); without it, one line says so.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from infra.mlflow_server import mlflow_binary  # noqa: E402
from infra.procs import stop_pid  # noqa: E402
from pipelines.runtime import free_port  # noqa: E402

PAGES = {"runs": "runs", "traces": "traces", "models": "models"}


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        raise SystemExit("dashboard_screenshot: chromium not found (apt-get install chromium)")
    return found


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("dashboard_screenshot: the MLflow server exited early")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"dashboard_screenshot: MLflow server not ready after {timeout:.0f} s")


def experiment_id(url: str, name: str, tries: int = 20) -> str:
    """The experiment's id; the server opens its store on the first call (slow), so a few tries."""
    import time

    for _ in range(tries):
        try:
            with urllib.request.urlopen(f"{url}/api/2.0/mlflow/experiments/get-by-name?experiment_name={name}",
                                        timeout=60) as r:
                return json.loads(r.read())["experiment"]["experiment_id"]
        except OSError:
            time.sleep(2)
    raise SystemExit(f"dashboard_screenshot: experiment '{name}' not found")


def screenshot(browser: str, page: str, out: Path, size: str = "1500,1000") -> None:
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([browser, "--headless=new", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                        f"--window-size={size}", "--virtual-time-budget=15000", f"--screenshot={out.absolute()}",
                        page], check=True, capture_output=True, timeout=180)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--home", default=".memagent", help="the memagent home whose mlflow.db to show")
    p.add_argument("--out", default="dashboard.png")
    p.add_argument("--page", choices=sorted(PAGES), default="runs")
    p.add_argument("--experiment", default="memagent")
    args = p.parse_args()
    home, browser = Path(args.home).absolute(), chromium()
    if not (home / "mlflow.db").is_file():
        raise SystemExit(f"dashboard_screenshot: no {home / 'mlflow.db'} (run the quickstart first)")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    copy = Path(tempfile.mkdtemp(prefix="dashboard-"))  # the server may upgrade its store: never the home's own
    shutil.copy(home / "mlflow.db", copy / "mlflow.db")
    cmd = [mlflow_binary(), "server", "--backend-store-uri", f"sqlite:///{copy / 'mlflow.db'}",
           "--default-artifact-root", (home / "mlartifacts").as_uri(), "--host", "127.0.0.1", "--port", str(port),
           "--workers", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_ready(url, proc)
        exp = experiment_id(url, args.experiment)
        target = f"{url}/#/experiments/{exp}/{PAGES[args.page]}"
        screenshot(browser, target, Path(args.out))
        print(f"{args.out}: {target}")
    finally:
        stop_pid(proc.pid)
        shutil.rmtree(copy, ignore_errors=True)


if __name__ == "__main__":
    main()
