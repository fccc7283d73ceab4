"""The train split built on the fly: several tasks and lengths interleave, and the curriculum
stages the opening rows by length, shortest first (tasks still interleaved), losing no row."""

from __future__ import annotations

from pipelines.config import load_config
from pipelines.data.tasks import read_task_rows
from pipelines.learn.runs import build_split


def split_rows(tmp_path, smollm2_dir, curriculum: int) -> list[tuple[str, str, int]]:
    cfg = load_config(None, ["learn.task=niah_single,niah_multikey", "learn.task_lengths=256,512", "learn.task_n=3",
                             f"learn.curriculum={curriculum}", "track.enabled=false"])
    uri = build_split(cfg, str(tmp_path / ("cur" if curriculum else "mix")), str(smollm2_dir))
    return [(r.sample_id, r.task, r.doc_tokens) for r in read_task_rows(uri)]


def test_tasks_and_lengths_interleave(tmp_path, smollm2_dir):
    rows = split_rows(tmp_path, smollm2_dir, curriculum=0)
    assert len(rows) == 12
    assert [t for _, t, _ in rows[:4]] == ["niah_single", "niah_multikey"] * 2
    assert {n <= 256 for _, _, n in rows[:4]} == {True, False}  # both lengths from the start


def test_curriculum_stages_the_shortest_first_then_mixes(tmp_path, smollm2_dir):
    rows = split_rows(tmp_path, smollm2_dir, curriculum=2)  # 2 rows of each task at 256, then at 512, then the rest
    lengths = [n for _, _, n in rows]
    assert all(n <= 256 for n in lengths[:4]) and all(256 < n <= 512 for n in lengths[4:8])
    assert {n <= 256 for n in lengths[8:]} == {True, False}  # the remaining row of each stream, lengths mixed
    assert [t for _, t, _ in rows[:4]] == ["niah_single", "niah_multikey"] * 2
    assert sorted(r[0] for r in rows) == sorted(r[0] for r in split_rows(tmp_path, smollm2_dir, curriculum=0))
