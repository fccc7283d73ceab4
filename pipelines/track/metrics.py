"""Every metric name any stage logs, in one place, so MLflow dashboards stay one family.

Names are `{stage}/{what}`: MLflow's UI groups charts by the prefix before the first '/'.
A stage logs only names declared here; `check_names` catches drift in tests.
"""

from __future__ import annotations

from collections.abc import Iterable

# ingest
INGEST_DOCUMENTS = "ingest/documents"
INGEST_CHUNKS = "ingest/chunks"
INGEST_TOKENS = "ingest/tokens"
INGEST_QUARANTINED = "ingest/quarantined"
INGEST_TOKENS_PER_S = "ingest/tokens_per_s"
INGEST = (INGEST_DOCUMENTS, INGEST_CHUNKS, INGEST_TOKENS, INGEST_QUARANTINED, INGEST_TOKENS_PER_S)

# rollout: values come from pipelines.rollout's `rollout_metrics(groups) -> dict` (with GATE's)
ROLLOUT_REWARD_MEAN = "rollout/reward_mean"
ROLLOUT_REWARD_STD = "rollout/reward_std"
ROLLOUT_ACCURACY = "rollout/accuracy"  # lenient sub_em of the final answers
ROLLOUT_FILTERED_GROUPS = "rollout/filtered_groups"  # groups with all-equal rewards (dropped)
ROLLOUT_TURNS = "rollout/turns"
ROLLOUT_MEMORY_TOKENS = "rollout/memory_tokens"
ROLLOUT_RESPONSE_TOKENS = "rollout/response_tokens"
ROLLOUT_TOKENS_PER_S = "rollout/tokens_per_s"  # generated tokens per second (train: of the batches delivered)
ROLLOUT_STALENESS = "rollout/staleness"  # policy versions behind the learner
ROLLOUT_UNGROUNDED_RATE = "rollout/ungrounded_rate"  # memory turns stating a number their prompt lacks
ROLLOUT = (ROLLOUT_REWARD_MEAN, ROLLOUT_REWARD_STD, ROLLOUT_ACCURACY, ROLLOUT_FILTERED_GROUPS,
           ROLLOUT_TURNS, ROLLOUT_MEMORY_TOKENS, ROLLOUT_RESPONSE_TOKENS, ROLLOUT_TOKENS_PER_S,
           ROLLOUT_STALENESS, ROLLOUT_UNGROUNDED_RATE)
# gates (agent.gates), beside the rollout metrics: of the rollouts' memory turns; an eval cell's
# as gate/{task}/{length}/... (gate_metric). Ungated: update_rate 1, exit_fraction 0.
GATE_UPDATE_RATE = "gate/update_rate"  # memory turns that wrote the memory (not kept) / memory turns
GATE_EXIT_FRACTION = "gate/exit_fraction"  # chunks left unread after an exit / the documents' chunks
GATE_MALFORMED = "gate/malformed"  # memory turns whose marker was malformed (taken as the memory): a count
GATE = (GATE_UPDATE_RATE, GATE_EXIT_FRACTION, GATE_MALFORMED)

# training (reserved for the learner)
TRAIN_LOSS = "train/loss"
TRAIN_KL = "train/kl"
TRAIN_CLIP_LOW = "train/clip_low"  # fraction of tokens clipped at 1 - eps_low
TRAIN_CLIP_HIGH = "train/clip_high"  # fraction clipped at 1 + eps_high
TRAIN_LR = "train/lr"
TRAIN_GRAD_NORM = "train/grad_norm"
TRAIN_TOKENS_PER_S = "train/tokens_per_s"  # every token a step reads (prompts and responses)
TRAIN_WEIGHT_PUSH_S = "train/weight_push_s"
TRAIN_RATIO_MEAN = "train/ratio_mean"
TRAIN_NLL = "train/nll"  # SFT
TRAIN_HELDOUT_LOSS = "train/heldout_loss"  # SFT: token-mean NLL on the held-back slice
TRAIN_HELDOUT_CHOICE = "train/heldout_choice"  # SFT: held-back memory writes whose start greedy would write
TRAIN_LOGPROB_MISMATCH = "train/logprob_mismatch"  # |engine - learner| logprob, same weights and tokens
TRAIN_STEP_S = "train/step_s"
TRAIN_TIS_WEIGHT = "train/tis_weight"  # learn.tis_cap: mean truncated importance weight of the response tokens
TRAIN_TIS_CLIPPED = "train/tis_clipped"  # learn.tis_cap: fraction of those tokens whose weight the cap cut
TRAIN = (TRAIN_LOSS, TRAIN_KL, TRAIN_CLIP_LOW, TRAIN_CLIP_HIGH, TRAIN_LR, TRAIN_GRAD_NORM,
         TRAIN_TOKENS_PER_S, TRAIN_WEIGHT_PUSH_S, TRAIN_RATIO_MEAN, TRAIN_NLL, TRAIN_HELDOUT_LOSS,
         TRAIN_HELDOUT_CHOICE,
         TRAIN_LOGPROB_MISMATCH, TRAIN_STEP_S, TRAIN_TIS_WEIGHT, TRAIN_TIS_CLIPPED)
ROLLOUT_WAIT_S = "rollout/wait_s"  # the learner waiting for a batch
# what `memagent train` logs each step
LEARNER = TRAIN + ROLLOUT + GATE + (ROLLOUT_WAIT_S, "rollout/kept", "rollout/filtered", "rollout/stale",
                             "rollout/delivered")

# serve (batch jobs)
SERVE_DOCUMENTS = "serve/documents"
SERVE_FAILED = "serve/failed"
SERVE_TOKENS_PER_S = "serve/tokens_per_s"
SERVE_DOCUMENTS_PER_S = "serve/documents_per_s"
SERVE_MODEL_VERSION = "serve/model_version"  # one point per model load by a replica (serve/tracking.py)
SERVE = (SERVE_DOCUMENTS, SERVE_FAILED, SERVE_TOKENS_PER_S, SERVE_DOCUMENTS_PER_S, SERVE_MODEL_VERSION)

# eval: per task and length; the memory agent without a method segment, baselines with one
# strict: the headline (pipelines.agent.reward); sub_em: the paper's, lenient; answer_recall: gold
# anywhere in the raw answer. The held-out check of training runs and the gate log strict.
EVAL_SCORES = ("strict", "em", "f1", "sub_em", "answer_recall")
EVAL_METHOD_MAIN = "memagent"


def eval_metric(task: str, length: str, score: str, method: str = EVAL_METHOD_MAIN) -> str:
    """eval/{task}/{length}/{score} for the memory agent, eval/{task}/{length}/{method}/{score} else."""
    if method == EVAL_METHOD_MAIN:
        return f"eval/{task}/{length}/{score}"
    return f"eval/{task}/{length}/{method}/{score}"


def eval_length_metric(task: str, score: str, method: str = EVAL_METHOD_MAIN) -> str:
    """The ladder as one series per task and score, its step the length in tokens (MLflow draws
    accuracy against length): eval/{task}/by_length/{score}, .../by_length/{method}/{score}."""
    if method == EVAL_METHOD_MAIN:
        return f"eval/{task}/by_length/{score}"
    return f"eval/{task}/by_length/{method}/{score}"


def gate_metric(name: str, task: str, length: str) -> str:
    """An eval cell's gate metric: gate/{task}/{length}/{update_rate,exit_fraction,malformed}."""
    return f"gate/{task}/{length}/{name.removeprefix('gate/')}"


def check_names(names: Iterable[str], allowed: Iterable[str]) -> list[str]:
    """Names not declared for a stage (empty when all are known)."""
    allowed = set(allowed)
    return sorted(n for n in names if n not in allowed)
