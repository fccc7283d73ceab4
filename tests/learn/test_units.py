"""Without Ray: the data cursor, the hub's exactly-once batches, rollout groups -> conversations,
and which policy versions the publisher keeps."""

from __future__ import annotations

import threading

import pytest

from pipelines.agent.turns import TurnRecord
from pipelines.data.tasks import write_task_rows
from pipelines.learn.batch import rl_batch
from pipelines.rollout.cursor import Cursor
from pipelines.rollout.hub import RolloutHub
from pipelines.rollout.schedule import Limits, Scheduler
from pipelines.rollout.trajectory import Group, Trajectory
from tests.learn.rows import synthetic_rows


# -- the cursor ------------------------------------------------------------------------------

def test_cursor_start_advances_over_a_contiguous_prefix_only():
    c = Cursor()
    for i in (2, 0, 4):
        c.mark(i)
    assert c.to_dict() == {"start": 1, "done": [2, 4]}
    assert [i for i in range(6) if c.skip(i)] == [0, 2, 4]
    c.mark(1)
    assert c.to_dict() == {"start": 3, "done": [4]}
    c.mark(3)
    assert c.to_dict() == {"start": 5, "done": []}
    c.mark(0)  # an index below start is already used up: no change
    assert c.to_dict() == {"start": 5, "done": []}


def test_cursor_round_trips_and_defaults_to_the_stream_start():
    c = Cursor(3, {5, 7})
    assert Cursor.from_dict(c.to_dict()) == c
    assert Cursor.from_dict(None) == Cursor() == Cursor.from_dict({})
    assert not Cursor().skip(0)


# -- the hub, on the real scheduler ------------------------------------------------------------

def turn(version: int = 0, version_end: int | None = None, response=(5, 6)) -> TurnRecord:
    return TurnRecord([1, 2, 3], list(response), [-0.5] * len(response), "stop", False, 8, version,
                      version if version_end is None else version_end, 0.0)


def trajectory(group_id: str, index: int, reward: float, turns: list[TurnRecord]) -> Trajectory:
    return Trajectory(sample_id=group_id.split("#")[0], group_id=group_id, index=index, turns=turns, memory=[],
                      answer="", prediction=None, reward=reward, accuracy=0.0, truncated=False, doc_tokens=0,
                      seconds=0.0, worker="w")


class InlineService:
    """The RolloutService's consumer surface over the real Scheduler; a group "runs" the moment it
    is dispatched. Rows named in `equal` get all-equal rewards, so dynamic sampling drops them."""

    def __init__(self, rows, equal=(), buffer_groups=4):
        self.sched = Scheduler(rows, 2, Limits(1, buffer_groups, buffer_groups, 2, None, True))
        self.equal, self.takes = set(equal), 0
        self.pulled: list[str] = []  # sample ids in dispatch order

    def _run(self) -> None:
        while (a := self.sched.next_assignment()) is not None:
            task = a[0]
            self.pulled.append(task.row.sample_id)
            rewards = (1.0, 1.0) if task.row.sample_id in self.equal else (1.0, 0.0)
            trajs = [trajectory(task.group_id, i, r, [turn()]) for i, r in enumerate(rewards)]
            self.sched.on_result(Group(task.group_id, task.row.sample_id, trajs), task.attempt)

    def take(self, n, timeout=None):
        self.takes += 1
        self._run()
        return self.sched.take(n)

    def drain_settled(self):
        out, self.sched.settled = self.sched.settled, []
        return out


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    uri = str(tmp_path_factory.mktemp("tasks") / "rows")
    write_task_rows(synthetic_rows(12, count=lambda text: len(text.split())), uri)
    return uri


def hub_on(tasks, cursor=None, **kw) -> tuple[RolloutHub, InlineService]:
    made = {}

    def service(rows):
        made["s"] = InlineService(rows, **kw)
        return made["s"]
    return RolloutHub(None, tasks, cursor=cursor, service=service), made["s"]


def ids(groups: list[Group]) -> list[str]:
    return [g.sample_id for g in groups]


def used(cursor: dict) -> set[int]:
    return set(range(cursor["start"])) | set(cursor["done"])


def test_a_step_asked_again_gets_the_same_batch(tasks):
    hub, service = hub_on(tasks)
    first = hub.take(2, 1)
    assert ids(first) == ["r00", "r01"]
    assert hub.take(2, 1) is first and service.takes == 1  # a restarted learner re-asks step 1
    hub.ack(1)
    assert ids(hub.take(2, 2)) == ["r02", "r03"]


def test_the_cursor_holds_trained_and_dropped_rows_only_up_to_its_step(tasks):
    hub, _ = hub_on(tasks, equal={"r01"})
    assert ids(hub.take(2, 1)) == ["r00", "r02"]  # r01's group was dropped (all-equal rewards)
    c1 = hub.cursor_for(1)
    assert used(c1) == {0, 1, 2}  # stream index = row order: r00 trained, r01 dropped, r02 trained
    hub.ack(1)
    assert ids(hub.take(2, 2)) == ["r03", "r04"]
    assert used(hub.cursor_for(1)) == {0, 1, 2}  # step 2 is not in step 1's cursor
    assert used(hub.cursor_for(2)) == {0, 1, 2, 3, 4}
    # r05..r08 are buffered (the buffer runs ahead): not used up, so a resume re-runs them


def test_a_resumed_hub_skips_every_used_row_and_no_other(tasks):
    hub, _ = hub_on(tasks, equal={"r01"})
    hub.take(2, 1)
    hub.ack(1)
    hub.take(2, 2)
    checkpoint = hub.cursor_for(2)  # the learner is killed after this checkpoint: step 3 is lost
    hub.take(2, 3)
    resumed, service = hub_on(tasks, cursor=checkpoint)
    assert ids(resumed.take(2, 3)) == ["r05", "r06"]  # step 3 again, from the first unused row
    assert service.pulled[:4] == ["r05", "r06", "r07", "r08"]
    assert used(resumed.cursor_for(3)) == set(range(7))


def test_a_cursor_with_holes_reruns_exactly_the_holes(tasks):
    _, service = hub_on(tasks, cursor={"start": 2, "done": [3, 5]}, buffer_groups=5)
    service.take(1)
    assert service.pulled == ["r02", "r04", "r06", "r07", "r08"]


def test_the_stream_wraps_around_for_another_pass(tasks):
    hub, service = hub_on(tasks, cursor={"start": 11, "done": []})
    assert ids(hub.take(2, 1)) == ["r11", "r00"]
    assert used(hub.cursor_for(1)) == set(range(13))  # index 12 is r00 of the second pass


def test_concurrent_asks_of_one_step_get_one_batch(tasks):
    """A learner restarted while its first take still waits asks again: one batch, not two."""
    hub, service = hub_on(tasks)
    gate, entered = threading.Event(), threading.Event()
    take = service.take

    def slow_take(n, timeout=None):
        entered.set()
        gate.wait(10)
        return take(n, timeout)
    service.take = slow_take
    out: list = []
    first = threading.Thread(target=lambda: out.append(hub.take(2, 1)))
    first.start()
    entered.wait(10)
    second = threading.Thread(target=lambda: out.append(hub.take(2, 1)))
    second.start()
    gate.set()
    first.join(10)
    second.join(10)
    assert len(out) == 2 and out[0] is out[1] and service.takes == 1


def test_a_batch_is_the_steps_groups_with_their_rollout_metrics(tasks):
    """The hub computes a batch's rollout metrics (rollout.source.Batch): the learner only merges them."""
    from pipelines.config import Config
    from pipelines.rollout.metrics import rollout_metrics

    cfg = Config()
    cfg = cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"batch_groups": 2})})
    hub = RolloutHub(cfg, tasks, service=lambda rows: InlineService(rows))
    batch = hub.batch(1, version=2)
    assert ids(batch.groups) == ["r00", "r01"] and hub.take(2, 1) is batch.groups  # the step's one batch
    expected = rollout_metrics(batch.groups, version=2)
    assert {k: v for k, v in batch.metrics.items() if k != "rollout/tokens_per_s"} == {
        k: v for k, v in expected.items() if k != "rollout/tokens_per_s"}
    assert batch.metrics["rollout/staleness"] == 2.0 and batch.metrics["rollout/reward_mean"] == 0.5
    assert batch.metrics["rollout/tokens_per_s"] > 0 and batch.wait_s >= 0


def test_an_evaluation_scores_the_first_n_heldout_rows_with_the_policy_it_ran(tasks):
    """The hub's in-run evaluation hands its scorer (eval.heldout.task_scores) the first n rows
    and the workers, and reports the policy version it scored."""
    import time

    from pipelines.rollout.source import Evaluation

    seen = {}

    def score(cfg, rows, workers):
        seen.update(rows=[r.sample_id for r in rows], workers=workers)
        return {"synthetic": 0.5}, len(rows)
    service = InlineService([])
    service.version, service.cfg, service.workers = 4, None, ["w0"]
    hub = RolloutHub(None, tasks, service=lambda rows: service, score=score)
    hub.evaluate(6, tasks, 3)
    deadline = time.monotonic() + 30
    while not (done := hub.evaluations()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert done == [Evaluation(6, 4, {"synthetic": 0.5}, 3)]
    assert seen == {"rows": ["r00", "r01", "r02"], "workers": ["w0"]}


# -- rollout groups -> conversations -----------------------------------------------------------

def test_every_conversation_of_a_rollout_carries_its_advantage():
    a = Group("qa#1", "qa", [trajectory("qa#1", 0, 1.0, [turn(), turn(), turn()]),
                             trajectory("qa#1", 1, 0.0, [turn(), turn(response=())])])
    b = Group("qb#2", "qb", [trajectory("qb#2", 0, 0.25, [turn()]), trajectory("qb#2", 1, 0.25, [turn()]),
                             trajectory("qb#2", 2, 1.0, [turn(), turn()])])
    seqs, fresh = rl_batch([a, b], version=0)
    # group a: mean 0.5 -> +0.5 (3 conversations), -0.5 (1: an empty response carries no loss);
    # group b: mean 0.5 -> -0.25, -0.25, +0.5 (2 conversations). No std division (Dr.GRPO).
    assert [s.advantage for s in seqs] == [0.5] * 3 + [-0.5] + [-0.25, -0.25] + [0.5] * 2
    assert [s.rollout for s in seqs] == [0, 0, 0, 1, 2, 3, 4, 4]
    assert all(s.old_logprobs == [-0.5, -0.5] and s.prompt_ids == [1, 2, 3] for s in seqs)
    assert fresh == [True] * 8
    normed, _ = rl_batch([a], version=0, norm_std=True)
    assert normed[0].advantage == pytest.approx(0.5 / (0.5 + 1e-6), rel=1e-4)  # population std 0.5


def test_fresh_flags_name_conversations_generated_by_the_current_weights_only():
    turns = [turn(1), turn(0), turn(1, 2), turn(2)]  # v1; v0 (stale); v1 -> v2 mid-turn; v2
    g = Group("q#1", "q", [trajectory("q#1", 0, 1.0, turns), trajectory("q#1", 1, 0.0, [turn(1)])])
    _, fresh = rl_batch([g], version=1)
    assert fresh == [True, False, False, False, True]
    assert rl_batch([], version=0) == ([], [])


# -- published versions ------------------------------------------------------------------------

def test_pruning_keeps_the_last_versions_and_any_a_checkpoint_may_name(tmp_path, tiny_model_dir):
    from pipelines.learn.policy import load_model
    from pipelines.learn.weights import FolderPublisher

    model = load_model(str(tiny_model_dir), "float32")
    pub = FolderPublisher(str(tmp_path), str(tiny_model_dir), keep=2)
    kept = lambda: sorted(p.name for p in (tmp_path / "weights").iterdir())  # noqa: E731
    for v in (1, 2, 3):
        uri = pub.publish(model, v, keep_from=1)  # the run's index names the checkpoint of v1
    assert kept() == ["v1", "v2", "v3"]
    assert (tmp_path / "weights" / "v3" / "model.safetensors").is_file() and uri.endswith("/weights/v3")
    pub.publish(model, 4, keep_from=3)
    assert kept() == ["v3", "v4"]
    pub.publish(model, 5, keep_from=3)  # the index lags: v3 stays, and so does v4 it may name next
    assert kept() == ["v3", "v4", "v5"]
    pub.prune(5)  # the run's end: its last checkpoint names v5
    assert kept() == ["v4", "v5"]


def test_frozen_weights_are_written_once_and_linked_into_later_versions(tmp_path, tiny_model_dir):
    import os

    import torch
    from safetensors.torch import load_file

    from pipelines.learn.policy import load_model
    from pipelines.learn.weights import FolderPublisher

    model = load_model(str(tiny_model_dir), "float32")
    for p in [*model.model.embed_tokens.parameters(), *model.model.layers[0].parameters()]:
        p.requires_grad_(False)
    frozen = frozenset(n for n, p in model.named_parameters() if not p.requires_grad)
    pub = FolderPublisher(str(tmp_path), str(tiny_model_dir), keep=1, frozen=frozen)
    pub.publish(model, 1)
    with torch.no_grad():
        model.model.layers[1].mlp.up_proj.weight.add_(1.0)  # a trained weight moves
    pub.publish(model, 2)
    v2 = tmp_path / "weights" / "v2"
    assert sorted(p.name for p in (tmp_path / "weights").iterdir()) == ["v2"]  # v1 removed, its shard lives on
    assert os.stat(v2 / "frozen.safetensors").st_nlink == 1 and not (v2 / "model.safetensors").exists()
    assert set(load_file(v2 / "frozen.safetensors")) == frozen
    inode = os.stat(v2 / "frozen.safetensors").st_ino
    pub.publish(model, 3)
    v3 = tmp_path / "weights" / "v3"
    assert os.stat(v3 / "frozen.safetensors").st_ino == inode  # linked, not written again
    loaded = load_model(str(v3), "float32").state_dict()  # transformers reads the two-shard folder
    assert all(torch.equal(loaded[k], v) for k, v in model.state_dict().items())


def test_pin_puts_every_thread_of_the_process_on_the_cores():
    import os
    import threading

    from pipelines.learn.trainer import pin

    before = os.sched_getaffinity(0)
    started = threading.Event()
    t = threading.Thread(target=started.wait, daemon=True)  # a thread that exists before pinning
    t.start()
    try:
        core = min(before)
        pin((core,))
        assert {tid: os.sched_getaffinity(int(tid)) for tid in os.listdir("/proc/self/task")} == {
            tid: {core} for tid in os.listdir("/proc/self/task")}
    finally:
        started.set()
        for tid in os.listdir("/proc/self/task"):
            os.sched_setaffinity(int(tid), before)


def test_pin_to_a_core_the_machine_lacks_is_one_line_naming_the_setting():
    from pipelines.errors import UserError
    from pipelines.learn.trainer import pin

    with pytest.raises(UserError, match=r"learn.cpu_cores=\[4095\]"):
        pin((4095,))


def test_rl_without_signal_names_all_wrong_or_all_right_and_the_remedy():
    from pipelines.errors import UserError
    from pipelines.learn.trainer import check_signal, waiting_line

    stats = {"started": 9, "kept": 1, "filtered": 8, "filtered_in_a_row": 8, "filtered_reward": 0.0}
    check_signal(stats, 9)  # below the limit: nothing
    with pytest.raises(UserError, match=r"8 groups in a row .*all wrong.*SFT first"):
        check_signal(stats, 8)
    with pytest.raises(UserError, match=r"all right.*harder or longer rows"):
        check_signal({**stats, "filtered_reward": 8.0}, 8)
    line = waiting_line(3, {**stats, "filtered_reward": 2.0})
    assert line == ("step 3: waiting for a batch: 9 groups generated, 1 kept, 8 dropped for equal rewards "
                    "(mean reward 0.25), 8 in a row")
