"""The data runner's shard plan (no Ray, no engine): each shard, read where the plan says it
lies, holds the very requests the Serve runner's shard of the same number holds."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.errors import UserError
from pipelines.serve.jobs import iter_rows, iter_shards
from pipelines.serve.shards import Shard, plan, read


def write_inputs(folder):
    """Three files whose lengths do not divide the shard size: jsonl with blank and broken
    lines and CRLF endings, parquet of several row groups, jsonl again."""
    folder.mkdir()
    lines = [json.dumps({"question": f"a{i}", "document": "d"}) for i in range(7)]
    lines[3] = "{broken"
    (folder / "a.jsonl").write_text("\n".join(lines[:4]) + "\n\n  \n" + "\r\n".join(lines[4:]) + "\r\n")
    pq.write_table(pa.Table.from_pylist([{"id": f"p{i}", "question": f"p{i}", "doc_id": "x"} for i in range(11)]),
                   folder / "b.parquet", row_group_size=4)
    (folder / "c.jsonl").write_text("".join(json.dumps({"question": f"c{i}", "uri": "/u"}) + "\n" for i in range(5)))
    return str(folder)


@pytest.mark.parametrize("shard_rows", [1, 3, 5, 7, 64])
def test_plan_reads_the_serve_runners_shards(tmp_path, shard_rows):
    uri = write_inputs(tmp_path / "in")
    expected = list(iter_shards(iter_rows(uri), shard_rows))
    shards = [Shard.from_record(s.record()) for s in plan(uri, shard_rows)]  # through a dataset row and back
    assert [s.k for s in shards] == [k for k, _ in expected]
    assert [read(uri, s) for s in shards] == [rows for _, rows in expected]
    assert sum(s.rows for s in shards) == 23


def test_a_changed_or_broken_input_is_one_line(tmp_path):
    uri = write_inputs(tmp_path / "in")
    shards = list(plan(uri, 5))
    (tmp_path / "in" / "c.jsonl").write_text("")
    with pytest.raises(UserError, match="shard 3 has 3 rows, not the 5 planned"):
        read(uri, shards[3])
    (tmp_path / "in" / "b.parquet").write_bytes(b"not parquet")
    with pytest.raises(UserError, match="b.parquet': not a readable parquet file"):
        list(plan(uri, 5))
