"""The evaluation ladder end to end on a tiny random model (HF engine): cells, baselines,
resume, and a tracking server that is down. (What it logs to a real server: tests/track.)"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from pipelines.config import load_config
from pipelines.errors import UserError
from pipelines.eval.ladder import main
from pipelines.eval.results import cell_uri
from tests.eval.needles import ladder_overrides

METHODS = ("memagent", "truncation", "full")


def ladder_config(model_dir, dataset, out, *extra):
    return load_config(None, ladder_overrides(model_dir, dataset, out, *extra))


def test_ladder_resumes_finished_cells(tiny_model_dir, needle_dataset, tmp_path, capfd):
    out = tmp_path / "out"
    cfg = ladder_config(tiny_model_dir, needle_dataset, out, "track.enabled=false")
    main(cfg)
    files = {(ln, m): Path(cell_uri(str(out), "niah_test", ln, m)) for ln in ("1K", "2K") for m in METHODS}
    stamps = {c: p.stat().st_mtime_ns for c, p in files.items()}
    first = json.loads((out / "summary.json").read_text())
    files[("2K", "memagent")].unlink()  # as if killed before that cell finished
    capfd.readouterr()
    again = main(cfg)
    assert "5 of 6 cells already done" in capfd.readouterr().err
    assert files[("2K", "memagent")].exists()
    for c, p in files.items():
        if c != ("2K", "memagent"):
            assert p.stat().st_mtime_ns == stamps[c], c
    assert again["metrics"] == first["metrics"]  # greedy decoding: the recomputed cell agrees
    with pytest.raises(UserError, match="other settings"):
        main(ladder_config(tiny_model_dir, needle_dataset, out, "track.enabled=false", "agent.chunk_size=256"))


def test_ladder_survives_tracking_server_down(tiny_model_dir, needle_dataset, tmp_path, caplog, monkeypatch):
    from infra.seaweedfs import free_port

    monkeypatch.setenv("MEMAGENT_HOME", str(tmp_path / "home"))
    dead = f"http://127.0.0.1:{free_port()}"
    cfg = ladder_config(tiny_model_dir, needle_dataset, tmp_path / "out", f"track.tracking_uri={dead}",
                        "eval.lengths=[1K]", "eval.methods=[memagent]")
    with caplog.at_level(logging.WARNING, logger="memagent.track"):
        out = main(cfg)
    assert out["summary"]["niah_test"]["1K"]["memagent"]["n"] == 3
    assert (tmp_path / "out" / "table.md").is_file()
    warnings = [r for r in caplog.records if r.name == "memagent.track"]
    assert len(warnings) == 1 and dead in warnings[0].getMessage()
    spooled = [json.loads(line) for f in (tmp_path / "home" / "tracking-spool").glob("*.jsonl")
               for line in f.read_text().splitlines()]
    logged = {k for s in spooled if s["kind"] == "metrics" for k in s["record"]["metrics"]}
    assert "eval/niah_test/1K/sub_em" in logged
