"""Only questions that teach (pipelines/learn/teach.py): the pass-rate filter before RL."""

from __future__ import annotations

import json
from collections import Counter
from types import SimpleNamespace

import pytest

from pipelines.config import load_config
from pipelines.errors import UserError
from pipelines.data.tasks import read_task_rows, write_task_rows
from pipelines.learn.config import PassFilterConfig
from pipelines.learn.teach import filtered, rows_needed, select, summary_line, verdict
from tests.learn.rows import synthetic_rows, token_counter

F = PassFilterConfig()


def test_verdicts_name_why_a_row_is_dropped():
    assert [verdict(r, F) for r in (0.0, 0.25, 0.75, 1.0)] == ["always_wrong", "kept", "kept", "always_right"]
    narrow = PassFilterConfig(low=0.3, high=0.6)
    assert [verdict(r, narrow) for r in (0.25, 0.5, 0.75)] == ["out_of_range", "kept", "out_of_range"]


def test_probing_stops_once_enough_rows_are_kept_and_failed_rows_are_named():
    rows = [SimpleNamespace(sample_id=f"r{i}") for i in range(10)]
    rates = [0.0, None, 0.5, 1.0, 0.25, 0.75, 0.5]
    probes = list(select(zip(rows, rates), F, need=3))
    assert [p.verdict for p in probes] == ["always_wrong", "failed", "kept", "always_right", "kept", "kept"]
    assert summary_line(Counter(p.verdict for p in probes), len(probes)) == \
        "teach: 6 rows probed, 3 kept (1 always wrong, 1 always right, 1 failed dropped)"
    assert rows_needed(10, 2) == 26


def test_the_filter_keeps_exactly_the_rows_the_model_sometimes_answers(tmp_path, tiny_model_dir, tokenizer,
                                                                       ray_session):
    tasks, out = str(tmp_path / "tasks"), str(tmp_path / "run")
    write_task_rows(synthetic_rows(12, token_counter(tokenizer)), tasks)
    cfg = load_config(None, [f"model.path={tiny_model_dir}", "engine.kind=hf", "engine.dtype=float32",
                             "agent.chunk_size=128", "agent.memory_budget=8", "agent.final_budget=8",
                             "rollout.worker_num_cpus=0.5", "rollout.loops_per_worker=8", "rollout.batch_groups=1",
                             "rollout.reward=tests.learn.rewards:teach_reward", "learn.pass_filter={samples: 2}"])
    uri = filtered(cfg, tasks, out, steps=100)  # more than the split holds: every row is probed
    kept = [r.sample_id for r in read_task_rows(uri)]
    assert kept == [f"r{i:02d}" for i in range(12) if i % 3 == 2]
    probes = [json.loads(line) for line in (tmp_path / "run" / "teach" / "rates.jsonl").read_text().splitlines()]
    assert Counter(p["verdict"] for p in probes) == {"kept": 4, "always_right": 4, "always_wrong": 4}
    assert filtered(cfg, tasks, out, steps=100) == uri  # made once: a resume reads it back
    with pytest.raises(UserError, match="resume it without the filter"):
        filtered(cfg, tasks, str(tmp_path / "other"), steps=100, resuming=True)
