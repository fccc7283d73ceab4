"""Rollout on real Ray with two vLLM CPU workers (SmolLM2): contract, dynamic sampling,
backpressure, a weight push mid-run with the staleness bound, and a worker killed mid-run.

The base model answers badly, so these tests check structure, never correctness.
"""

from __future__ import annotations

import math
import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from pipelines.agent.chunking import n_turns
from pipelines.errors import UserError
from pipelines.rollout.metrics import rollout_metrics
from pipelines.rollout.service import RolloutService
from pipelines.rollout.trajectory import to_table
from tests.rollout.conftest import rollout_cfg
from tests.rollout.helpers import needle_row

pytestmark = pytest.mark.slow
REPEATS = (4, 12, 20, 30, 8, 16, 26, 6)  # ~100 to ~730 tokens: 1 to 3 chunks of 256


def parity_reward(response: str, answers: list[str]) -> float:
    """A user reward that varies between rollouts (the base model's strict reward is always 0)."""
    return float(len(response) % 2)


def rows(n: int = len(REPEATS)):
    return [needle_row(i, REPEATS[i % len(REPEATS)]) for i in range(n)]


def wait_for(predicate, what: str, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def take_all(service: RolloutService, n: int = 1) -> list:
    out = []
    while groups := service.take(n, timeout=600):
        out += groups
    return out


def test_trajectories_match_the_contract(workers, tokenizer):
    cfg = rollout_cfg("rollout.group_size=2", "rollout.drop_equal_rewards=false", "rollout.max_staleness=null")
    tasks = rows()
    with RolloutService(cfg, tasks, workers=workers).start() as service:
        groups = take_all(service, 3)
    assert sorted(g.sample_id for g in groups) == sorted(r.sample_id for r in tasks)
    by_id = {r.sample_id: r for r in tasks}
    for g in groups:
        doc_tokens = len(tokenizer.encode(by_id[g.sample_id].context, add_special_tokens=False))
        assert [t.index for t in g.trajectories] == [0, 1]
        for t in g.trajectories:
            assert t.group_id == g.group_id and t.doc_tokens == doc_tokens
            assert len(t.turns) == n_turns(doc_tokens, 256) and len(t.memory) == len(t.turns) - 1
            assert [turn.is_final for turn in t.turns] == [False] * len(t.memory) + [True]
            for turn in t.turns:
                assert len(turn.logprobs) == len(turn.response_ids) > 0
                assert all(math.isfinite(lp) and lp <= 0 for lp in turn.logprobs)
                assert len(turn.response_ids) <= 16 and turn.finish_reason in ("stop", "length")
                assert turn.version == turn.version_end == 0 and turn.prompt_ids
            assert t.version_min == t.version_max == 0
            assert t.reward in (0.0, 1.0) and t.worker in ("worker-0", "worker-1")
    assert {t.worker for g in groups for t in g.trajectories} == {"worker-0", "worker-1"}
    assert to_table(groups).num_rows == 2 * len(tasks)
    m = rollout_metrics(groups, seconds=1.0, version=0)
    assert m["rollout/turns"] > 2 and 0 < m["rollout/memory_tokens"] <= 16 and m["rollout/staleness"] == 0


def test_groups_with_equal_rewards_are_dropped_and_counted(workers):
    cfg = rollout_cfg("rollout.group_size=4", "rollout.max_staleness=null",
                      "rollout.reward=tests.rollout.test_rollout_ray:parity_reward")
    with RolloutService(cfg, rows(6), workers=workers).start() as service:
        groups = take_all(service, 2)
        stats = service.stats()
    assert groups, "every group had equal rewards (probability 8^-6)"
    assert all(len(set(g.rewards)) > 1 for g in groups)
    assert stats["kept"] + stats["filtered"] == stats["started"] == 6
    assert len(groups) == stats["delivered"] == stats["kept"]


def test_backpressure_holds_the_buffer_at_its_bound(workers):
    cfg = rollout_cfg("rollout.group_size=1", "rollout.buffer_groups=2", "rollout.max_staleness=null",
                      "rollout.drop_equal_rewards=false")
    with RolloutService(cfg, rows(), workers=workers).start() as service:
        wait_for(lambda: service.stats()["buffered"] == 2, "a full buffer")
        time.sleep(1.0)  # the consumer is slow: nothing more may start meanwhile
        stats = service.stats()
        assert stats["started"] == 2 and stats["in_flight"] == 0
        assert len(service.take(1)) == 1
        wait_for(lambda: service.stats()["buffered"] == 2, "a refilled buffer")
        assert service.stats()["started"] == 3
        rest = take_all(service)
        assert service.stats()["max_buffered"] == 2
    assert len(rest) == len(REPEATS) - 1


def first_token_logprobs(groups) -> dict:
    """(sample, turn) -> (prompt ids, logprob of the first sampled token, versions)."""
    return {(g.sample_id, i): (tuple(turn.prompt_ids), turn.logprobs[0], turn.version, turn.version_end)
            for g in groups for i, turn in enumerate(g.trajectories[0].turns)}


def upload_folder(s3, folder: Path, prefix: str) -> str:
    client = s3.client()
    for f in folder.iterdir():
        client.put_object(Bucket="memagent-test", Key=f"{prefix}/{f.name}", Body=f.read_bytes())
    return f"s3://memagent-test/{prefix}"


def test_weight_push_mid_run_drops_nothing_changes_logprobs_and_bounds_staleness(workers, perturbed_dir, s3):
    sources = [str(perturbed_dir), upload_folder(s3, perturbed_dir, "ckpt/perturbed")]  # local and s3 pushes
    greedy = ["rollout.group_size=1", "rollout.temperature=0", "rollout.drop_equal_rewards=false"]
    with RolloutService(rollout_cfg(*greedy, "rollout.max_staleness=null"), rows(), workers=workers).start() as s:
        baseline = first_token_logprobs(take_all(s))
    cfg = rollout_cfg(*greedy, "rollout.max_staleness=1", "rollout.batch_groups=2")
    delivered, version = [], 0
    with RolloutService(cfg, rows(), workers=workers).start() as service:
        while batch := service.take(2, timeout=600):
            stats = service.stats()
            live = stats["started"] - stats["filtered"] - stats["stale"] - stats["failed"]
            assert (live - 1) // 2 <= version + 1  # admission: nothing started that would end too stale
            assert all(version - g.version_min <= 1 for g in batch)
            delivered += batch
            version += 1
            service.push_weights(sources[version % 2], version)  # the same weights, a new version
        stats = service.stats()
    ids = [g.sample_id for g in delivered]
    assert len(ids) == len(set(ids)) and len(ids) + stats["stale"] == len(REPEATS)
    assert any(t.version_min < t.version_max for g in delivered for t in g.trajectories), \
        "no rollout was in flight across a push"
    pushed = first_token_logprobs(delivered)
    before = [abs(lp - baseline[k][1]) for k, (p, lp, v0, v1) in pushed.items() if v1 == 0 and p == baseline[k][0]]
    after = [abs(lp - baseline[k][1]) for k, (p, lp, v0, v1) in pushed.items() if v0 >= 1 and p == baseline[k][0]]
    assert before and after
    assert sum(after) / len(after) > 5 * (sum(before) / len(before) + 0.01)
    assert version >= 2, "both the local and the s3:// push ran"
    with pytest.raises(UserError, match=r"^weights 's3://memagent-test/none': no config.json"):
        RolloutService(cfg, [], workers=workers).push_weights("s3://memagent-test/none", version + 1)


def test_a_killed_worker_loses_and_duplicates_nothing(workers):
    cfg = rollout_cfg("rollout.group_size=2", "rollout.drop_equal_rewards=false", "rollout.max_staleness=null")
    tasks = rows()
    with RolloutService(cfg, tasks, version=service_version(workers), workers=workers).start() as service:
        victim = service.worker_info()[0]
        wait_for(lambda: service.stats()["loads"][0] > 0, "work on worker 0")
        os.kill(victim["pid"], signal.SIGKILL)
        groups = take_all(service)
        stats = service.stats()
        assert service.worker_info()[0]["pid"] != victim["pid"]  # Ray restarted it
    assert sorted(g.sample_id for g in groups) == sorted(r.sample_id for r in tasks)
    assert stats["retried"] >= 1 and stats["delivered"] == len(tasks)
    wait_for(lambda: not any(psutil.pid_exists(p) for p in victim["children"]), "the engine's processes to exit", 60)


def service_version(workers) -> int:
    import ray

    return max(ray.get([w.info.remote() for w in workers]), key=lambda i: i["version"])["version"]
