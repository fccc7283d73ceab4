"""Checkpoints of unfinished ladder cells: part files written, read back one record per row
index, and cleared; on local disk and on a real S3 server (SeaweedFS)."""

import pytest

from pipelines.eval.results import clear_parts, parts_uri, read_parts, write_part


def record(index: int, answer: str) -> dict:
    return {"index": index, "answer": answer, "prediction": None, "memory": [], "error": None}


def roundtrip(out: str) -> None:
    parts = parts_uri(out, "niah", "1K", "memagent")
    assert read_parts(parts) == []  # nothing saved yet: no folder at all
    write_part([record(2, "b"), record(0, "a")], parts)
    write_part([record(5, "c"), record(2, "b")], parts)  # a record saved twice reads back once
    assert [(r["index"], r["answer"]) for r in read_parts(parts)] == [(0, "a"), (2, "b"), (5, "c")]
    assert read_parts(parts_uri(out, "niah", "1K", "truncation")) == []  # cells do not mix
    clear_parts(parts)
    assert read_parts(parts) == []
    clear_parts(parts)  # clearing twice is harmless


def test_parts_on_local_disk(tmp_path):
    roundtrip(str(tmp_path / "out"))


@pytest.mark.slow
def test_parts_on_s3(s3):
    roundtrip("s3://memagent-test/eval-parts")
