"""The trajectory contract, its parquet form, resumable writing, metrics and rewards: no Ray."""

import math

import pyarrow.parquet as pq
import pytest

from pipelines.errors import UserError
from pipelines.rollout.metrics import MetricsTally, rollout_metrics
from pipelines.rollout.rewards import compute_reward, load_reward
from pipelines.rollout.trajectory import SCHEMA, SCHEMA_VERSION, from_row, groups_from_table, to_row, to_table
from pipelines.rollout.writer import TrajectoryWriter, read_groups
from tests.rollout.helpers import group, trajectory


def test_table_round_trip_keeps_groups_and_versions():
    groups = [group("a#1", (0.0, 1.0), versions=(0, 1)), group("b#2", (1.0, 1.0, 0.5))]
    table = to_table(groups)
    assert table.schema.equals(SCHEMA) and table.num_rows == 5
    assert table.column("version_max").to_pylist()[:2] == [1, 1]
    back = list(groups_from_table(table))
    assert back == groups


def test_rows_of_another_schema_version_are_refused():
    row = to_row(trajectory("a#1", 0, 1.0))
    row["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(UserError, match="schema_version"):
        from_row(row)


def test_writer_parts_resume_and_quarantine(tmp_path):
    out = tmp_path / "out"
    w = TrajectoryWriter(str(out))
    assert w.done_samples() == set() and w.next_part == 0
    w.write([group("a#1", (0.0, 1.0)), group("b#2", (1.0, 0.0))])
    w.write([group("c#3", (1.0, 0.0))])
    assert w.write_quarantine([("d", "UserError: question: empty")]).endswith("quarantine-00000.parquet")
    again = TrajectoryWriter(str(out))
    assert again.done_samples() == {"a", "b", "c"} and again.next_part == 2
    assert [g.group_id for g in read_groups(str(out))] == ["a#1", "b#2", "c#3"]
    assert pq.read_table(out / "quarantine-00000.parquet").to_pylist() == [
        {"sample_id": "d", "reason": "UserError: question: empty"}]
    assert not list(out.glob(".*tmp"))


def test_writer_refuses_a_file(tmp_path):
    f = tmp_path / "f.parquet"
    f.write_text("x")
    with pytest.raises(UserError, match="is a file"):
        TrajectoryWriter(str(f))


def test_metrics_by_hand():
    g1 = group("a#1", (0.0, 1.0), versions=(0, 1))  # each: memory turn of 4 tokens, final of 2
    g2 = group("b#2", (1.0, 1.0), versions=(2, 2))
    m = rollout_metrics([g1, g2], filtered_groups=3, seconds=2.0, version=2)
    assert m["rollout/reward_mean"] == 0.75
    assert math.isclose(m["rollout/reward_std"], math.sqrt(0.1875))
    assert m["rollout/filtered_groups"] == 3.0
    assert m["rollout/turns"] == 2.0
    assert m["rollout/memory_tokens"] == 4.0
    assert m["rollout/response_tokens"] == 6.0
    assert m["rollout/tokens_per_s"] == 12.0
    assert m["rollout/staleness"] == 1.0  # two trajectories 2 behind, two 0
    assert m["rollout/accuracy"] == 0.0
    streamed = MetricsTally().add([g1], 2).add([g2], 2).metrics(3, 2.0)
    assert streamed == m


def test_default_rewards_by_answer_kind():
    assert compute_reward(None, "so \\boxed{Paris}", ["paris"], "one_of", "s") == 1.0
    assert compute_reward(None, "Paris", ["paris"], "one_of", "s") == 0.0
    assert compute_reward(None, "\\boxed{red, blue}", ["red", "blue", "green"], "all_of", "s") == pytest.approx(2 / 3)


def test_user_reward_by_dotted_path():
    fn = load_reward("pipelines.agent.reward:recall_all")
    assert compute_reward(fn, "red and blue", ["red", "blue"], "one_of", "s") == 1.0
    assert load_reward("pipelines.agent.reward.strict_reward")("\\boxed{1}", ["1"]) == 1.0
    assert load_reward(None) is None
    with pytest.raises(UserError, match="rollout.reward 'nowhere:fn': cannot import"):
        load_reward("nowhere:fn")
    with pytest.raises(UserError, match="expected 'module:function'"):
        load_reward("justaname")
    with pytest.raises(UserError, match="reward is NaN"):
        compute_reward(lambda r, a: float("nan"), "x", ["y"], "one_of", "s")


def test_writer_resumes_on_s3(s3):
    out = "s3://memagent-test/rollout-writer"
    TrajectoryWriter(out).write([group("a#1", (0.0, 1.0))])
    again = TrajectoryWriter(out)
    assert again.done_samples() == {"a"} and again.next_part == 1
    again.write([group("b#2", (1.0, 0.0))])
    assert [g.group_id for g in read_groups(out)] == ["a#1", "b#2"]
