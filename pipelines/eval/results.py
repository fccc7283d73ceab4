"""Where a ladder's results live: one parquet file per finished (task, length, method) cell.

    OUT/meta.json                              what produced these results (model, budgets)
    OUT/cells/{task}/{length}/{method}.parquet per-sample records of a finished cell
    OUT/parts/{task}/{length}/{method}/*.parquet records of an unfinished cell, saved as they come

A cell file appears only when the whole cell is done (written to a temporary name, then
moved), so a re-run skips exactly the finished cells and never sees half a cell. Until then
its records are checkpointed as part files; a re-run takes them back and runs only the rest
of the cell's rows, and the parts are deleted once the cell file is written.

Cells written before the strict score lack its column (and the answers' kind): a reader
computes every score from the stored prediction and answers (`rescored`), so old folders read
as new ones and a resumed cell never mixes the two.
"""

from __future__ import annotations

import json
import uuid

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pipelines.agent import reward
from pipelines.errors import UserError
from pipelines.eval.stats import mean_ci
from pipelines.storage import first_line, is_s3, resolve, written

SCORES = (*reward.SCORES, "answer_recall")  # strict first: the headline
# The builders' all-of tasks: the answers' kind of a record written before records kept it.
LEGACY_ALL_OF = ("niah_multivalue", "niah_multiquery", "vt", "fwe")
RECORD_VERSION = 2  # bump when a record gains or changes a field: old folders are then refused


def cell_uri(out: str, task: str, length: str, method: str) -> str:
    return f"{out.rstrip('/')}/cells/{task}/{length}/{method}.parquet"


def has_cell(uri: str) -> bool:
    fs, path = resolve(uri)
    return fs.get_file_info(path).type == pafs.FileType.File


def parts_uri(out: str, task: str, length: str, method: str) -> str:
    return f"{out.rstrip('/')}/parts/{task}/{length}/{method}"


def write_part(records: list[dict], parts: str) -> None:
    write_cell(records, f"{parts}/{uuid.uuid4().hex}.parquet")


def read_parts(parts: str) -> list[dict]:
    """The checkpointed records of an unfinished cell, one per row index."""
    fs, path = resolve(parts)
    found = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    files = sorted(f.path for f in found if f.type == pafs.FileType.File and f.path.endswith(".parquet"))
    by_index = {r["index"]: r for f in files for r in read_cell(f"s3://{f}" if is_s3(parts) else f)}
    return [by_index[i] for i in sorted(by_index)]


def clear_parts(parts: str) -> None:
    fs, path = resolve(parts)
    if fs.get_file_info(path).type == pafs.FileType.Directory:
        fs.delete_dir(path)


def write_cell(records: list[dict], uri: str) -> None:
    fs, path = resolve(uri)
    with written(fs, path) as target:
        pq.write_table(pa.Table.from_pylist(records), target, filesystem=fs)


def read_cell(uri: str) -> list[dict]:
    fs, path = resolve(uri)
    try:
        records = pq.read_table(path, filesystem=fs).to_pylist()
    except (OSError, pa.ArrowInvalid) as e:
        raise UserError(f"eval results '{uri}': unreadable ({first_line(e)}); delete it to recompute") from None
    return [r if "strict" in r else rescored(r) for r in records]


def rescored(record: dict) -> dict:
    """A record's test scores computed again from its prediction and answers (see the module's docstring)."""
    kind = record.get("answer_kind") or ("all_of" if record.get("task") in LEGACY_ALL_OF else "one_of")
    answers = list(record.get("answers") or [])
    return {**record, "answer_kind": kind, **reward.scores(record.get("prediction"), answers, kind)}


def per_row(records: list[dict], key: str, value=float) -> float:
    """Mean of value(record[key]) over the records; NaN when any lacks it (cells recorded before it)."""
    if not records or any(r.get(key) is None for r in records):
        return float("nan")
    return sum(value(r[key]) for r in records) / len(records)


def summarize(records: list[dict]) -> dict:
    """Mean and 95% interval of each score over the scored samples; n/a if any sample could not
    run (the full-document baseline when a document exceeds the window)."""
    scored = [r for r in records if r.get("error") is None]
    out: dict = {"n": len(records), "n_scored": len(scored), "errors": len(records) - len(scored),
                 "na": len(scored) < len(records) or not scored,
                 "truncated": sum(bool(r.get("truncated")) for r in records),
                 "turns": sum(r.get("turns", 0) for r in scored) / max(1, len(scored)),
                 "generated": per_row(scored, "generated"),  # tokens generated (memory turns and answer)
                 "ungrounded": per_row(scored, "ungrounded", bool)}  # rows that ever stated an unread number
    for name in SCORES:
        mean, lo, hi = mean_ci([float(r[name]) for r in scored if r.get(name) is not None])
        out.update({name: mean, f"{name}_lo": lo, f"{name}_hi": hi})
    return out


def check_meta(out: str, meta: dict) -> None:
    """Refuse to mix results of different models or budgets in one folder."""
    fs, path = resolve(f"{out.rstrip('/')}/meta.json")
    if fs.get_file_info(path).type == pafs.FileType.File:
        with fs.open_input_stream(path) as f:
            old = json.loads(f.read().decode())
        diff = sorted(k for k in set(old) | set(meta) if old.get(k) != meta.get(k))
        if diff:
            raise UserError(f"eval results '{out}': made with other settings ({', '.join(diff)}); "
                            "use another --out or delete it")
        return
    if isinstance(fs, pafs.LocalFileSystem):
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(path) as f:
        f.write(json.dumps(meta, indent=1, sort_keys=True).encode())

