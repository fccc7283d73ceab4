"""learn.tis_cap through a real optimizer step of a tiny random model: the learner's own logprobs
stand for the old ones, so the weights are min(learner / behaviour, cap) and the DAPO clip is idle."""

from __future__ import annotations

import math
import random

import pytest
import torch

from pipelines.learn.config import LearnConfig
from pipelines.learn.forward import response_logprobs
from pipelines.learn.packing import TrainSeq, pack
from pipelines.learn.policy import Policy


def test_a_step_weighs_tokens_by_the_truncated_learner_over_behaviour_ratio(tiny_model_dir):
    cfg = LearnConfig(lr=1e-3, token_budget=64, seed=0, freeze_layers=0, autocast=False, warmup_steps=0,
                      tis_cap=2.0)
    policy = Policy(str(tiny_model_dir), cfg)
    rng = random.Random(0)
    vocab = policy.model.config.vocab_size
    seqs = [TrainSeq([rng.randrange(vocab) for _ in range(6)], [rng.randrange(vocab) for _ in range(r)], None,
                     adv, i) for i, (r, adv) in enumerate([(3, 1.0), (4, -1.0), (5, 0.5)])]
    with torch.no_grad():
        learner = response_logprobs(policy.model, pack(seqs, [0, 1, 2])).tolist()
    # behaviour 3x less likely than the learner on the first 7 tokens (weight cut to 2), 2x more on the last 5
    shift = [-math.log(3.0)] * 7 + [math.log(2.0)] * 5
    behaviour = [lp + d for lp, d in zip(learner, shift)]
    seqs = [TrainSeq(s.prompt_ids, s.response_ids, behaviour[a:b], s.advantage, s.rollout)
            for s, (a, b) in zip(seqs, [(0, 3), (3, 7), (7, 12)])]
    m = policy.step(seqs)
    assert m["tis_clipped"] == pytest.approx(7 / 12, abs=1e-6)
    assert m["tis_weight"] == pytest.approx((7 * 2.0 + 5 * 0.5) / 12, rel=1e-4)
    assert m["clip_high"] == 0.0 and m["clip_low"] == 0.0 and m["ratio_mean"] == pytest.approx(1.0)
    assert math.isfinite(m["loss"]) and m["grad_norm"] > 0
