"""Builders shared by the rollout tests: task rows and hand-made trajectories (no engine)."""

from __future__ import annotations

from pipelines.data.tasks import TaskRow
from pipelines.ingest.builders.needle_file import NOISE
from pipelines.agent import TurnRecord
from pipelines.rollout.trajectory import Group, Trajectory


def row(i: int, context: str = "Some text.", answers: tuple[str, ...] = ("42",), kind: str = "one_of") -> TaskRow:
    return TaskRow(f"s{i}", f"What is item {i}?", list(answers), kind, None, context, 0, "unit", "test")


def needle_row(i: int, repeats: int) -> TaskRow:
    """A noise haystack of ~24 * repeats tokens with the answer at the end."""
    value = str(1000 + i)
    context = NOISE * repeats + f"The special magic number is {value}."
    return TaskRow(f"n{i}", "What is the special magic number?", [value], "one_of", None, context,
                   0, "needle", "test")


def turn(n_response: int = 3, version: int = 0, final: bool = False, end: int | None = None) -> TurnRecord:
    return TurnRecord([1, 2, 3], list(range(n_response)), [-0.5] * n_response, "stop", final, 8, version,
                      version if end is None else end, 0.1)


def trajectory(group_id: str, index: int, reward: float, versions: tuple[int, ...] = (0, 0),
               accuracy: float = 0.0) -> Trajectory:
    turns = [turn(4, v) for v in versions[:-1]] + [turn(2, versions[-1], final=True)]
    return Trajectory(group_id.split("#")[0], group_id, index, turns, ["m"] * (len(turns) - 1), "ans",
                      None, reward, accuracy, False, 100, 1.0, "w")


def group(group_id: str, rewards: tuple[float, ...], versions: tuple[int, ...] = (0, 0)) -> Group:
    return Group(group_id, group_id.split("#")[0],
                 [trajectory(group_id, i, r, versions) for i, r in enumerate(rewards)])
