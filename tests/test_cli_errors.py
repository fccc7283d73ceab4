"""Every bad input to `memagent ask` gives one line naming the input, exit 2, no traceback."""

import os

import pytest

from tests.support import REPO, check_error, run_cli



@pytest.fixture
def good_doc(tmp_path):
    p = tmp_path / "good.txt"
    p.write_text("Some text. " * 50)
    return p


def test_missing_document(tmp_path):
    check_error(run_cli("ask", "--doc", str(tmp_path / "nope.txt"), "--question", "q?"), "nope.txt", "no such")


def test_empty_document(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    check_error(run_cli("ask", "--doc", str(tmp_path / "empty.txt"), "--question", "q?"), "empty.txt", "empty")


def test_not_utf8(tmp_path):
    (tmp_path / "bin.dat").write_bytes(b"\xff\xfe\x00\x81binary" * 10)
    check_error(run_cli("ask", "--doc", str(tmp_path / "bin.dat"), "--question", "q?"), "bin.dat", "not UTF-8")


def test_empty_question(good_doc):
    check_error(run_cli("ask", "--doc", str(good_doc), "--question", "  "), "question")


def test_missing_s3_object(s3):
    check_error(run_cli("ask", "--doc", "s3://memagent-test/no/such.txt", "--question", "q?"),
                "s3://memagent-test/no/such.txt", "no such")


def test_missing_model_folder(good_doc, tmp_path):
    check_error(run_cli("ask", "--doc", str(good_doc), "--question", "q?", f"model.path={tmp_path / 'm'}"),
                "model", "no such folder")


def test_not_a_model_folder(good_doc, tmp_path):
    (tmp_path / "notmodel").mkdir()
    check_error(run_cli("ask", "--doc", str(good_doc), "--question", "q?", f"model.path={tmp_path / 'notmodel'}"),
                "notmodel", "not a model folder")


def test_unknown_config_key(good_doc):
    check_error(run_cli("ask", "--doc", str(good_doc), "--question", "q?", "agent.chunksize=3"),
                "unknown key 'agent.chunksize'")


def test_a_home_that_cannot_be_a_folder(tmp_path):
    (tmp_path / "afile").write_text("")
    home = tmp_path / "afile" / "home"
    check_error(run_cli("config", "show", env={"MEMAGENT_HOME": str(home)}), str(home), "not a writable folder")


def test_a_relative_home_in_a_deleted_working_directory(tmp_path):
    import subprocess
    import sys

    gone = tmp_path / "gone"
    gone.mkdir()
    script = f"import os, sys; os.chdir({str(gone)!r}); os.rmdir({str(gone)!r}); " \
             "from pipelines.cli import main; sys.exit(main(['config', 'show']))"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ, "MEMAGENT_HOME": "rel", "PYTHONPATH": str(REPO)}, timeout=300)
    check_error(proc, "home 'rel'", "no longer exists")
