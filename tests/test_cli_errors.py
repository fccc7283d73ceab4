"""Every bad input to `memagent ask` gives one line naming the input, exit 2, no traceback."""

import pytest

from tests.support import check_error, run_cli



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
