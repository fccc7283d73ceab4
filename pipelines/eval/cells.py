"""Bookkeeping of the ladder's cells while one rollout stream serves every cell of a method.

The rows of all unfinished cells of a method are chained into one lazy stream, which the
rollout service's dispatcher pulls (in its own thread) as workers have room. Each row
travels under a sample_id unique across cells ("task/length/method#index"); its record
keeps the row's own id. Results come back in any order, trajectories or quarantined rows;
a cell is complete the moment all its rows are in, and only unfinished cells' records are
held. A cell's row count is known when its last row is handed out (one row of lookahead),
so its final result always finds the count set.

Resume within a cell: `saved` gives back the records a killed run checkpointed; those rows
are skipped in the stream and their records count towards the cell. `fresh()` hands out the
records that arrived since the last checkpoint, for the caller to save.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace

from pipelines.eval.records import Cell, RowRef, quarantine_record, trajectory_record
from pipelines.data.tasks import TaskRow
from pipelines.rollout.trajectory import Trajectory


def row_key(cell: Cell, index: int) -> str:
    return f"{'/'.join(cell)}#{index}"


class CellBook:
    def __init__(self, traces: int):
        self.traces = traces
        self._lock = threading.Lock()
        self._refs: dict[str, RowRef] = {}
        self._expected: dict[Cell, int] = {}
        self._records: dict[Cell, list[dict]] = {}
        self._fresh: dict[Cell, list[dict]] = {}

    def rows(self, cells: Iterable[Cell], rows_of: Callable[[Cell], Iterable[TaskRow]],
             saved: Callable[[Cell], list[dict]] = lambda cell: []) -> Iterator[TaskRow]:
        """The rows of every cell in turn, each renamed to its unique key, less the rows whose
        records were saved before; pulled lazily."""
        for cell in cells:
            restored = saved(cell)
            done = {r["index"] for r in restored}
            with self._lock:
                self._records[cell] = list(restored)
            indexed = enumerate(rows_of(cell))
            nxt = next(indexed, None)
            if nxt is None:
                self._set_expected(cell, 0)
            while nxt is not None:
                index, row = nxt
                nxt = next(indexed, None)
                if nxt is None:
                    self._set_expected(cell, index + 1)
                if index in done:
                    continue
                slim = replace(row, context="") if row.context is not None else row  # the document stays out
                with self._lock:
                    self._refs[row_key(cell, index)] = RowRef(cell, index, slim)
                yield replace(row, sample_id=row_key(cell, index))

    def _set_expected(self, cell: Cell, n: int) -> None:
        with self._lock:
            self._expected[cell] = n

    def _pop(self, key: str) -> RowRef:
        with self._lock:
            ref = self._refs.pop(key, None)
        if ref is None:
            raise RuntimeError(f"eval: a result for '{key}', which is not running (lost or duplicated)")
        return ref

    def add_trajectory(self, t: Trajectory) -> Cell:
        ref = self._pop(t.sample_id)
        self._append(ref.cell, trajectory_record(ref, t, self.traces, finished=time.time()))
        return ref.cell

    def add_failure(self, key: str, reason: str) -> Cell:
        ref = self._pop(key)
        self._append(ref.cell, quarantine_record(ref, reason))
        return ref.cell

    def _append(self, cell: Cell, record: dict) -> None:
        with self._lock:
            self._records[cell].append(record)
            self._fresh.setdefault(cell, []).append(record)

    def fresh(self, at_least: int = 1) -> list[tuple[Cell, list[dict]]]:
        """Records that arrived since the last call, per unfinished cell holding at least `at_least`."""
        with self._lock:
            ready = [c for c, recs in self._fresh.items() if len(recs) >= at_least]
            return [(c, self._fresh.pop(c)) for c in ready]

    def complete(self) -> list[tuple[Cell, list[dict]]]:
        """Cells whose rows are all in, removed from the book; their records in row order."""
        with self._lock:
            done = [c for c, recs in self._records.items() if self._expected.get(c) == len(recs)]
            out = [(c, sorted(self._records.pop(c), key=lambda r: r["index"])) for c in done]
            for c in done:
                del self._expected[c]
                self._fresh.pop(c, None)
        return out

    def unfinished(self) -> list[Cell]:
        with self._lock:
            return list(self._records)
