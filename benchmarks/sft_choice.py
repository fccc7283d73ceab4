"""Does SFT teach the memory's choice, or memorize it? `train/heldout_choice` on both sides.

The choice metric (SFT's `train/heldout_choice`, `Policy.eval_sft`): of the memory writes that
change the memory, the share whose first CHOICE_TOKENS tokens greedy decoding would write,
teacher-forced. Scored for each model on the first --rows training rows (traces it was trained
on) and on the held-back slice (rows no training saw, `learn.sft_heldout` by hash; --heldout-tasks
another task's, e.g. real questions for a model trained on synthetic ones): a model that
learned the rule scores alike on both; one that memorized which sentence each training question
keeps scores far higher on its own rows. CPU, a minute or two a model.

    .venv/bin/python benchmarks/sft_choice.py --tasks .memagent/bench/learning/squad/sft-decoys150/tasks \\
        --models .memagent/bench/learning/squad/sft-decoys150/best .memagent/bench/learning/squad/sft-lead/best

Last line JSON: {"choice": {model: {"train": [%, lo, hi, n], "heldout": [%, lo, hi, n]}}}.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.common import finish  # noqa: E402


def choice(policy, slice_) -> list:
    """[%, lo, hi, n] of the slice's choosing writes (Wilson's 95% interval)."""
    from pipelines.eval.stats import mean_ci
    from pipelines.learn.sftdata import CHOICE_TOKENS

    _, share = policy.eval_sft(slice_.seqs, slice_.choices, CHOICE_TOKENS)
    n = len(slice_.choices)
    hits = round(share * n)
    return [round(100 * v, 1) for v in mean_ci([1.0] * hits + [0.0] * (n - hits))] + [n]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", required=True, help="the training task rows (a folder of parquet)")
    p.add_argument("--heldout-tasks", help="task rows whose held-back slice is scored (default: --tasks), e.g. the "
                   "real questions' for a model trained on squad_synth")
    p.add_argument("--models", nargs="+", required=True, help="HF model folders to score")
    p.add_argument("--config", default="configs/sft-smollm2-squad.yaml", help="the recipe they were trained with")
    p.add_argument("--rows", type=int, default=70, help="training rows scored (the first, in file order)")
    args = p.parse_args()

    import torch

    from pipelines.config import load_config
    from pipelines.data.tasks import read_task_rows
    from pipelines.learn.policy import Policy
    from pipelines.learn.sftdata import held_back, heldout_seqs, scored_seqs

    cfg = load_config(args.config)
    rows = (r for r in read_task_rows(args.tasks) if not held_back(r.sample_id, cfg.learn.sft_heldout))
    train_rows = list(itertools.islice(rows, args.rows))  # streamed: the rest never read
    out = {}
    for model in args.models:
        policy = Policy(model, cfg.learn.for_mode(True))
        with torch.no_grad():
            out[model] = {"train": choice(policy, scored_seqs(train_rows, model, cfg)),
                          "heldout": choice(policy, heldout_seqs(args.heldout_tasks or args.tasks, model, cfg))}
        print(f"{model}: choice % [95%] (n) on its training rows {out[model]['train']}, "
              f"held back {out[model]['heldout']}", flush=True)
    finish({"choice": out})


if __name__ == "__main__":
    main()
