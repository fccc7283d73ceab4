"""pipelines.logs in a real process: whatever a library writes to stderr (logging, warnings,
prints, C-level writes, child processes) lands in the log file; the command's own lines and
stdout do not; --verbose / MEMAGENT_LOG=debug leave stderr alone; an unexpected error is one
line on the console with its traceback in the file."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support import REPO

LIBRARY = textwrap.dedent("""
    import logging, os, subprocess, sys, warnings
    from pathlib import Path
    from pipelines import logs

    early = logging.getLogger("early.lib")  # a handler made at import time, before routing
    early.addHandler(logging.StreamHandler())
    early.propagate = False
    logs.route(Path(sys.argv[1]), verbose=len(sys.argv) > 2)
    early.warning("LIBRARY early handler")
    logging.getLogger("vllm.engine").warning("LIBRARY logging")
    warnings.warn("LIBRARY python warning")
    print("LIBRARY print", file=sys.stderr)
    os.write(2, b"LIBRARY C-level write\\n")
    subprocess.run([sys.executable, "-c", "import sys; print('LIBRARY child', file=sys.stderr)"], check=True)
    print("ours on the console", file=logs.console())
    print("ours on stdout")
    logs.restore()
    print("after restore", file=sys.stderr)
""")
MARKS = ["LIBRARY early handler", "LIBRARY logging", "LIBRARY python warning", "LIBRARY print",
         "LIBRARY C-level write", "LIBRARY child"]


def python(code: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})}, timeout=120)


def log_files(home: Path) -> list[Path]:
    return sorted((home / "logs").glob("memagent-*.log"))


def test_library_output_goes_to_the_log_file_and_ours_stays(tmp_path):
    proc = python(LIBRARY, str(tmp_path), env={"MEMAGENT_LOG": ""})
    assert proc.returncode == 0, proc.stderr
    [log] = log_files(tmp_path)
    assert proc.stderr.splitlines() == [f"memagent: library logs: {log} (--verbose shows them here)",
                                        "ours on the console", "after restore"]
    assert proc.stdout == "ours on stdout\n"
    text = log.read_text()
    assert all(mark in text for mark in MARKS), text
    assert "ours" not in text


def test_verbose_and_memagent_log_debug_show_library_output(tmp_path):
    for extra, env in ((["verbose"], {"MEMAGENT_LOG": ""}), ([], {"MEMAGENT_LOG": "debug"})):
        proc = python(LIBRARY, str(tmp_path), *extra, env=env)
        assert proc.returncode == 0, proc.stderr
        assert all(mark in proc.stderr for mark in MARKS), proc.stderr
        assert "library logs:" not in proc.stderr and proc.stdout == "ours on stdout\n"
    assert not log_files(tmp_path)


BOOM = textwrap.dedent("""
    import sys, types
    from pipelines import cli

    boom = types.ModuleType("boom")
    boom.add_arguments = lambda p: None
    def run(cfg, args):
        print("LIBRARY noise", file=sys.stderr)
        raise RuntimeError("first line\\nthe reason")
    boom.run = run
    sys.modules["boom"] = boom
    cli.COMMANDS["boom"] = ("boom", "a command that fails unexpectedly")
    sys.exit(cli.main([*sys.argv[1:], "boom", "track.enabled=false"]))
""")


def test_an_unexpected_error_is_one_line_with_its_traceback_in_the_log(tmp_path):
    proc = python(BOOM, env={"MEMAGENT_HOME": str(tmp_path), "MEMAGENT_LOG": ""})
    [log] = log_files(tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[1:] == [f"memagent: error: RuntimeError: the reason (traceback in {log})"]
    text = log.read_text()
    assert "LIBRARY noise" in text and "Traceback" in text and "first line" in text
    verbose = python(BOOM, "--verbose", env={"MEMAGENT_HOME": str(tmp_path)})
    assert verbose.returncode == 1 and "Traceback" in verbose.stderr and "LIBRARY noise" in verbose.stderr


def test_an_unknown_memagent_log_is_a_one_line_error(tmp_path):
    proc = python(BOOM, env={"MEMAGENT_HOME": str(tmp_path), "MEMAGENT_LOG": "loud"})
    assert proc.returncode == 2
    assert proc.stderr.strip() == "memagent: error: MEMAGENT_LOG=loud: unknown (one of quiet, info, debug)"
