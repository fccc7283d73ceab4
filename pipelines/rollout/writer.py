"""Trajectories to parquet parts (local or s3://), resumable: finished samples are skipped on re-run.

    out/part-00000.parquet ...     one row per trajectory (trajectory.SCHEMA), whole groups
    out/quarantine-00000.parquet   sample_id, reason: groups that could not run

A part appears only once complete (local: written aside then renamed; S3: one PUT), so a
killed run leaves no half part, and a re-run neither loses nor repeats a written group.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pipelines.errors import UserError
from pipelines.rollout.trajectory import SCHEMA, Group, groups_from_table, to_table
from pipelines.storage import first_line, resolve, written

PART = re.compile(r"part-(\d{5,})\.parquet$")
QUARANTINE_SCHEMA = pa.schema([("sample_id", pa.string()), ("reason", pa.string())])


class TrajectoryWriter:
    def __init__(self, uri: str):
        self.uri = uri
        self.fs, self.root = resolve(uri)
        try:
            info = self.fs.get_file_info(self.root)
        except OSError as e:
            raise UserError(f"out '{uri}': cannot reach ({first_line(e)})") from None
        if info.type == pafs.FileType.File:
            raise UserError(f"out '{uri}': is a file; give a folder or prefix")
        self.parts = sorted(self._list(PART))
        self.next_part = int(PART.search(self.parts[-1]).group(1)) + 1 if self.parts else 0

    def _list(self, pattern: re.Pattern) -> list[str]:
        selector = pafs.FileSelector(self.root, allow_not_found=True)
        return [i.path for i in self.fs.get_file_info(selector)
                if i.type == pafs.FileType.File and pattern.search(i.base_name)]

    def done_samples(self) -> set[str]:
        """sample_ids already written by earlier runs (only this column is read)."""
        done: set[str] = set()
        for path in self.parts:
            table = pq.read_table(path, columns=["sample_id"], filesystem=self.fs)
            done.update(table.column("sample_id").to_pylist())
        return done

    def _put(self, table: pa.Table, name: str) -> str:
        path = f"{self.root}/{name}"
        with written(self.fs, path) as target:
            pq.write_table(table, target, filesystem=self.fs)
        return path

    def write(self, groups: list[Group]) -> str:
        path = self._put(to_table(groups), f"part-{self.next_part:05d}.parquet")
        self.parts.append(path)
        self.next_part += 1
        return path

    def write_quarantine(self, records: list[tuple[str, str]]) -> str | None:
        if not records:
            return None
        n = len(self._list(re.compile(r"quarantine-\d+\.parquet$")))
        table = pa.Table.from_pylist([{"sample_id": s, "reason": r} for s, r in records], schema=QUARANTINE_SCHEMA)
        return self._put(table, f"quarantine-{n:05d}.parquet")


def read_groups(uri: str) -> Iterator[Group]:
    """Groups from every part under `uri`, one part in memory at a time."""
    writer = TrajectoryWriter(uri)
    for path in writer.parts:
        table = pq.read_table(path, filesystem=writer.fs, schema=SCHEMA)
        yield from groups_from_table(table)
