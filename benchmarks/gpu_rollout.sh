#!/usr/bin/env bash
# The rollout benchmark on a GPU box that has torch + transformers but no vLLM or Ray:
# engine.kind=hf_batch (transformers' continuous batching), SmolLM2-135M's architecture.
#   bash benchmarks/gpu_rollout.sh MODEL_DIR_OR_CONFIG_DIR [extra benchmark args]
# A folder without weights (config + tokenizer only) gets random weights: the real ones
# are 270 MB and cannot travel to that box; speed does not depend on the values, and
# random weights, like the base model's memories, run every turn to its token budget.
set -euo pipefail
src=${1:?model folder}; shift
model=$src
if ! ls "$src"/*.safetensors >/dev/null 2>&1; then
  model=/tmp/random-$(basename "$src")
  python3 - "$src" "$model" <<'PY'
import shutil, sys
from pathlib import Path
import torch
from transformers import AutoConfig, AutoModelForCausalLM
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
torch.manual_seed(0)
AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src), dtype=torch.bfloat16).save_pretrained(dst)
for f in src.iterdir():
    if f.name != "config.json":
        shutil.copy(f, dst / f.name)
PY
fi
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
python3 benchmarks/rollout.py --size gpu --no-rss "$@" engine.kind=hf_batch "model.path=$model"
