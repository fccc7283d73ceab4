"""The trajectory contract between rollout and learner: typed, versioned records + their arrow schema.

One Trajectory is one rollout of the memory agent over one question: several independent
conversations (the memory turns and the final turn) that share one scalar reward. A Group
holds the G rollouts of one question; the learner consumes complete groups only.

Versioning: SCHEMA_VERSION changes whenever a field is added, removed or changes meaning;
readers refuse rows of a newer version with a one-line error instead of guessing, and read
rows of the versions listed in `_UPGRADES` as what they mean today.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

import pyarrow as pa

from pipelines.agent.turns import GateCounts, TurnRecord
from pipelines.errors import UserError

# 2: turns are agent TurnRecords (max_tokens added); `truncated`
# 3: gates: each turn's `gate`; `malformed`, `chunks_unread`; chunks_read, memory_updates and
#    exit_chunk as columns (derived from the turns)
# 4: `ungrounded` (memory turns stating a number their prompt does not hold)
SCHEMA_VERSION = 4


@dataclass(frozen=True)
class Trajectory(GateCounts):
    sample_id: str
    group_id: str
    index: int  # rollout index within its group
    turns: list[TurnRecord]  # one per conversation: the memory turns, then the final turn
    memory: list[str]  # the memory after each memory turn
    answer: str
    prediction: str | None  # last \boxed{} of the answer
    reward: float  # the training verifier's (or the user's reward callable's)
    accuracy: float  # lenient sub_em of the prediction (recall_all for all-of rows)
    truncated: bool  # the one-turn baselines: the document was cut to fit the window
    doc_tokens: int
    seconds: float
    worker: str
    malformed: int = 0  # gated memory turns whose marker was malformed
    chunks_unread: int = 0  # chunks an exited rollout left unread (of the row's document)
    ungrounded: int = 0  # memory turns whose memory states a number their prompt does not hold
    schema_version: int = SCHEMA_VERSION

    @property
    def version_min(self) -> int:
        return min(t.version for t in self.turns)

    @property
    def version_max(self) -> int:
        return max(t.version_end for t in self.turns)

    @property
    def response_tokens(self) -> int:
        return sum(len(t.response_ids) for t in self.turns)


@dataclass(frozen=True)
class Group:
    """The G rollouts of one question, complete. Advantages are computed within a group."""

    group_id: str
    sample_id: str
    trajectories: list[Trajectory] = field(default_factory=list)

    @property
    def rewards(self) -> list[float]:
        return [t.reward for t in self.trajectories]

    @property
    def all_equal(self) -> bool:
        r = self.rewards
        return all(x == r[0] for x in r)

    @property
    def version_min(self) -> int:
        return min(t.version_min for t in self.trajectories)

    @property
    def version_max(self) -> int:
        return max(t.version_max for t in self.trajectories)


TURN_TYPE = pa.struct([
    ("prompt_ids", pa.list_(pa.int32())),
    ("response_ids", pa.list_(pa.int32())),
    ("logprobs", pa.list_(pa.float32())),
    ("finish_reason", pa.string()),
    ("is_final", pa.bool_()),
    ("max_tokens", pa.int32()),
    ("version", pa.int64()),
    ("version_end", pa.int64()),
    ("seconds", pa.float64()),
    ("gate", pa.string()),
])

SCHEMA = pa.schema([
    ("schema_version", pa.int32()),
    ("sample_id", pa.string()),
    ("group_id", pa.string()),
    ("index", pa.int32()),
    ("turns", pa.list_(TURN_TYPE)),
    ("memory", pa.list_(pa.string())),
    ("answer", pa.string()),
    ("prediction", pa.string()),
    ("reward", pa.float64()),
    ("accuracy", pa.float64()),
    ("truncated", pa.bool_()),
    ("doc_tokens", pa.int64()),
    ("seconds", pa.float64()),
    ("worker", pa.string()),
    ("malformed", pa.int32()),
    ("chunks_unread", pa.int32()),
    ("ungrounded", pa.int32()),
    ("version_min", pa.int64()),
    ("version_max", pa.int64()),
    ("chunks_read", pa.int32()),
    ("memory_updates", pa.int32()),
    ("exit_chunk", pa.int32()),
], metadata={"memagent.trajectory.schema_version": str(SCHEMA_VERSION)})


DERIVED = ("version_min", "version_max", "chunks_read", "memory_updates", "exit_chunk")


def to_row(t: Trajectory) -> dict:
    row = asdict(t)
    row.update({k: getattr(t, k) for k in DERIVED})
    return row


def to_table(groups: list[Group]) -> pa.Table:
    """One row per trajectory; a group's rows are contiguous."""
    rows = [to_row(t) for g in groups for t in g.trajectories]
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def _from_v2(row: dict) -> dict:
    """Before gates every memory turn wrote the memory and every document was read to its end."""
    turns = [{**t, "gate": "final" if t["is_final"] else "updated"} for t in row["turns"]]
    return {**row, "turns": turns, "malformed": 0, "chunks_unread": 0, "schema_version": 3}


def _from_v3(row: dict) -> dict:
    """Rows written before the count: none counted (a v3 row's reward never paid for one)."""
    return {**row, "ungrounded": 0, "schema_version": 4}


_UPGRADES = {2: _from_v2, 3: _from_v3}  # version -> the row as the next version writes it


def from_row(row: dict) -> Trajectory:
    version = row.get("schema_version")
    while version in _UPGRADES:
        row = _UPGRADES[version](row)
        version = row["schema_version"]
    if version != SCHEMA_VERSION:
        raise UserError(f"trajectory '{row.get('sample_id')}': schema_version {version}, "
                        f"this code reads {', '.join(map(str, [*_UPGRADES, SCHEMA_VERSION]))}")
    fields = {k: v for k, v in row.items() if k not in DERIVED}
    fields["turns"] = [TurnRecord(**t) for t in fields["turns"]]
    return Trajectory(**fields)


def groups_from_table(table: pa.Table) -> Iterator[Group]:
    """Regroup contiguous trajectory rows (as written by to_table) into Groups."""
    current: Group | None = None
    for row in table.to_pylist():
        t = from_row(row)
        if current is None or current.group_id != t.group_id:
            if current is not None:
                yield current
            current = Group(t.group_id, t.sample_id, [])
        current.trajectories.append(t)
    if current is not None:
        yield current
