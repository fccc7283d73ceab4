"""Where a training run is in its task stream: which rows are used up. Pure, serialisable.

A row is used up once its group was trained on or dropped (all-equal rewards, too stale,
failed); rows in flight or buffered when the learner stops are not, so a resumed run
re-runs them: no row is trained twice, none is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Cursor:
    start: int = 0  # every stream index below this is used up
    done: set[int] = field(default_factory=set)  # used-up indices at or above start

    def skip(self, index: int) -> bool:
        return index < self.start or index in self.done

    def mark(self, index: int) -> None:
        if index >= self.start:
            self.done.add(index)
        while self.start in self.done:
            self.done.discard(self.start)
            self.start += 1

    def to_dict(self) -> dict:
        return {"start": self.start, "done": sorted(self.done)}

    @classmethod
    def from_dict(cls, d: dict | None) -> Cursor:
        return cls(int(d["start"]), set(d["done"])) if d else cls()
