"""The train split built on the fly: several tasks and lengths interleave, and the curriculum
puts the shortest documents first (tasks still interleaved)."""

from __future__ import annotations

from pipelines.config import load_config
from pipelines.ingest.tasks import read_task_rows
from pipelines.learn.runs import build_split


def split_rows(tmp_path, smollm2_dir, curriculum: bool) -> list[tuple[str, int]]:
    cfg = load_config(None, ["learn.task=niah_single,niah_multikey", "learn.task_lengths=256,512", "learn.task_n=3",
                             f"learn.curriculum={str(curriculum).lower()}", "track.enabled=false"])
    uri = build_split(cfg, str(tmp_path / ("cur" if curriculum else "mix")), str(smollm2_dir))
    return [(r.task, r.doc_tokens) for r in read_task_rows(uri)]


def test_tasks_and_lengths_interleave(tmp_path, smollm2_dir):
    rows = split_rows(tmp_path, smollm2_dir, curriculum=False)
    assert len(rows) == 12
    assert [t for t, _ in rows[:4]] == ["niah_single", "niah_multikey"] * 2
    assert {n <= 256 for _, n in rows[:4]} == {True, False}  # both lengths from the start


def test_curriculum_puts_the_shortest_first(tmp_path, smollm2_dir):
    rows = split_rows(tmp_path, smollm2_dir, curriculum=True)
    lengths = [n for _, n in rows]
    assert all(n <= 256 for n in lengths[:6]) and all(256 < n <= 512 for n in lengths[6:])
    assert [t for t, _ in rows[:2]] == ["niah_single", "niah_multikey"]
