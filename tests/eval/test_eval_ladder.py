"""The evaluation ladder end to end through the rollout machinery: real Ray, one vLLM CPU
worker (a tiny random model: structure only), cells, baselines, quarantined rows, resume,
and a tracking server that is down. (What it logs to a real server: tests/track.)"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from pipelines.config import load_config
from pipelines.errors import UserError
from pipelines.eval.ladder import main, rollout_config
from pipelines.eval.results import (
    cell_uri,
    parts_uri,
    read_cell,
    read_parts,
    write_part,
)
from tests.eval.needles import ladder_overrides

pytestmark = pytest.mark.slow
METHODS = ("memagent", "truncation", "full")
VLLM = ["engine.kind=vllm", "engine.cpu_kvcache_gib=1", "engine.max_model_len=2048",
        "engine.max_num_seqs=16", "rollout.worker_num_cpus=0.5"]


def ladder_config(model_dir, dataset, out, *extra):
    return load_config(None, ladder_overrides(model_dir, dataset, out, *VLLM, *extra))


@pytest.fixture(scope="module")
def workers(ray_session, vllm_tiny_model_dir, needle_dataset):
    import ray

    from pipelines.rollout.worker import close_workers, start_workers

    cfg = ladder_config(vllm_tiny_model_dir, needle_dataset, "unused")
    actors = start_workers(rollout_config(cfg), str(vllm_tiny_model_dir))
    ray.get([w.ready.remote() for w in actors])
    yield actors
    close_workers(actors)


def test_ladder_writes_cells_and_resumes_finished_ones(workers, vllm_tiny_model_dir, needle_dataset, tmp_path, capfd):
    out = tmp_path / "out"
    cfg = ladder_config(vllm_tiny_model_dir, needle_dataset, out, "track.enabled=false")
    main(cfg, workers)
    files = {(ln, m): Path(cell_uri(str(out), "niah_test", ln, m)) for ln in ("1K", "2K") for m in METHODS}
    cells = {c: read_cell(str(p)) for c, p in files.items()}
    for (ln, m), recs in cells.items():
        tokens = 1000 if ln == "1K" else 2000
        assert [r["index"] for r in recs] == [0, 1, 2], (ln, m)
        assert [r["sample_id"] for r in recs] == [f"niah-{tokens}-{i}" for i in range(3)]  # the rows' own ids
        assert all(r["method"] == m and r["length"] == ln for r in recs)
    for ln, chunks in (("1K", 2), ("2K", 4)):
        memagent = cells[(ln, "memagent")]
        assert all(r["error"] is None and r["turns"] == chunks + 1 for r in memagent)
        assert len(memagent[0]["memory"]) == chunks and all(len(r["memory"]) == 1 for r in memagent[1:])
    assert all(r["turns"] == 1 and not r["truncated"] for r in cells[("1K", "full")] + cells[("1K", "truncation")])
    assert all(r["truncated"] and r["error"] is None for r in cells[("2K", "truncation")])
    assert all(r["error"].startswith("exceeds window: ") and r["turns"] == 0 for r in cells[("2K", "full")])
    stamps = {c: p.stat().st_mtime_ns for c, p in files.items()}
    first = json.loads((out / "summary.json").read_text())
    assert first["table"]["niah_test"]["2K"]["full"]["na"] and first["table"]["niah_test"]["2K"]["full"]["errors"] == 3
    files[("2K", "memagent")].unlink()  # as if killed before that cell finished, its row 1 checkpointed
    parts = parts_uri(str(out), "niah_test", "2K", "memagent")
    write_part([{**cells[("2K", "memagent")][1], "answer": "from the checkpoint"}], parts)
    capfd.readouterr()
    again = main(cfg, workers)
    assert "5 of 6 cells already done" in capfd.readouterr().err
    redone = read_cell(str(files[("2K", "memagent")]))
    assert [r["index"] for r in redone] == [0, 1, 2] and redone[1]["answer"] == "from the checkpoint"
    assert redone[0]["answer"] == cells[("2K", "memagent")][0]["answer"]  # rows 0 and 2 ran again
    assert not Path(parts).exists()  # the cell file replaces its checkpoints
    for c, p in files.items():
        if c != ("2K", "memagent"):
            assert p.stat().st_mtime_ns == stamps[c], c
    assert again["metrics"] == first["metrics"]  # greedy decoding: the recomputed cell agrees
    with pytest.raises(UserError, match="other settings"):
        main(ladder_config(vllm_tiny_model_dir, needle_dataset, out, "track.enabled=false", "agent.chunk_size=256"),
             workers)


def test_ladder_survives_tracking_server_down(workers, vllm_tiny_model_dir, needle_dataset, tmp_path, caplog,
                                              monkeypatch):
    from tests.support import free_port

    monkeypatch.setenv("MEMAGENT_HOME", str(tmp_path / "home"))
    dead = f"http://127.0.0.1:{free_port()}"
    cfg = ladder_config(vllm_tiny_model_dir, needle_dataset, tmp_path / "out", f"track.tracking_uri={dead}",
                        "eval.lengths=[1K]", "eval.methods=[memagent]")
    with caplog.at_level(logging.WARNING, logger="memagent.track"):
        out = main(cfg, workers)
    assert out["summary"]["niah_test"]["1K"]["memagent"]["n"] == 3
    assert (tmp_path / "out" / "table.md").is_file()
    warnings = [r for r in caplog.records if r.name == "memagent.track"]
    assert len(warnings) == 1 and dead in warnings[0].getMessage()
    spooled = [json.loads(line) for f in (tmp_path / "home" / "tracking-spool").glob("*.jsonl")
               for line in f.read_text().splitlines()]
    logged = {k for s in spooled if s["kind"] == "metrics" for k in s["record"]["metrics"]}
    assert "eval/niah_test/1K/sub_em" in logged


def test_an_interrupted_cell_resumes_from_its_checkpoint(workers, vllm_tiny_model_dir, needle_dataset, tmp_path,
                                                         monkeypatch):
    from pipelines.eval import ladder

    out = tmp_path / "out"
    cfg = ladder_config(vllm_tiny_model_dir, needle_dataset, out, "track.enabled=false", "eval.lengths=[2K]",
                        "eval.methods=[memagent]")
    real, calls = ladder.save_complete, []

    def interrupted(*args):  # Ctrl-C once the first row is in
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        real(*args)

    monkeypatch.setattr(ladder, "save_complete", interrupted)
    with pytest.raises(KeyboardInterrupt):
        main(cfg, workers)
    parts = parts_uri(str(out), "niah_test", "2K", "memagent")
    [first] = read_parts(parts)  # saved on the way out, though checkpoint_rows (8) was not reached
    monkeypatch.setattr(ladder, "save_complete", real)
    main(cfg, workers)
    records = read_cell(cell_uri(str(out), "niah_test", "2K", "memagent"))
    assert [r["index"] for r in records] == [0, 1, 2] and records[first["index"]] == first
    assert not Path(parts).exists()
