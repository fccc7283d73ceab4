"""pipelines.progress: a bar on a terminal, one-line status records elsewhere, never on stdout.

Counts only: no timing is asserted (the interval is set far beyond the test, so lines come
from the every-tenth rule and the end)."""

from __future__ import annotations

import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pipelines.progress import Progress

NEVER = 1e9  # seconds: no line is due by time in a test


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_non_terminal_prints_a_line_per_tenth_and_one_at_the_end(capsys):
    stream = io.StringIO()
    with Progress("job", total=4, unit="row", every_s=NEVER, stream=stream) as bar:
        for _ in range(4):
            bar.update(1, errors=0)
        bar.update(0, errors=1)  # no new tenth: no line
    lines = stream.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == [
        "job: 1/4 rows (25%)", "job: 2/4 rows (50%)", "job: 3/4 rows (75%)", "job: 4/4 rows (100%)",
        "job: 4/4 rows (100%)"]
    assert "left" in lines[0] and "rows/s" in lines[0] and lines[0].endswith("errors=0")
    assert "done in" in lines[-1] and lines[-1].endswith("errors=1")
    assert capsys.readouterr().out == ""


def test_a_small_step_waits_for_the_next_tenth():
    stream = io.StringIO()
    with Progress("eval", total=100, unit="row", every_s=NEVER, stream=stream) as bar:
        for _ in range(25):
            bar.update(1)
    assert [line.split(",")[0] for line in stream.getvalue().splitlines()] == [
        "eval: 10/100 rows (10%)", "eval: 20/100 rows (20%)", "eval: 25/100 rows (25%)"]


def test_without_a_total_only_the_end_is_printed_and_set_is_absolute():
    stream = io.StringIO()
    bar = Progress("ingest", unit="object", every_s=NEVER, stream=stream)
    bar.set(3, documents=9)
    bar.set(5)
    bar.close()
    bar.update(1)  # after close: ignored
    [line] = stream.getvalue().splitlines()
    assert line.startswith("ingest: 5 objects, ") and line.endswith("documents=9") and "done in" in line


def test_write_goes_to_stdout_between_status_lines(capsys):
    stream = io.StringIO()
    with Progress("ask", total=2, unit="chunk", every_s=NEVER, stream=stream) as bar:
        bar.update(1)
        bar.write("memory 1")
    assert capsys.readouterr().out == "memory 1\n"
    assert len(stream.getvalue().splitlines()) == 2


def test_a_terminal_gets_a_tqdm_bar_and_output_lines_do_not_tear_it(capsys):
    stream = Tty()
    with Progress("ask", total=3, unit="chunk", stream=stream) as bar:
        bar.update(2, **{"tok/s": 812.25})
        bar.write("memory 2")
    shown = stream.getvalue()
    assert "\r" in shown and "2/3" in shown and "tok/s=812" in shown
    assert "ask: 2/3 chunks" not in shown  # no status records on a terminal
    assert capsys.readouterr().out == "memory 2\n"


class Jobs(BaseHTTPRequestHandler):
    """A job server stand-in speaking the real status protocol: done grows by one per poll."""

    polls = 0

    def do_GET(self):  # noqa: N802
        Jobs.polls += 1
        done = min(Jobs.polls, 3)
        body = json.dumps({"job_id": "j1", "status": "done" if done == 3 else "running", "done": done,
                           "total": 3, "errors": 0, "documents_per_s": 1.0, "tokens_per_s": 50.0,
                           "output": "o", "message": ""}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def job_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Jobs)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_batch_follow_shows_status_lines_on_stderr_only(job_server, capsys):
    from pipelines.serve.batch import Client, follow

    st = follow(Client(job_server, None), "j1", poll_s=0.01)
    out, err = capsys.readouterr()
    assert st["status"] == "done" and out == ""
    lines = err.splitlines()
    assert [line.split(",")[0] for line in lines] == [
        "job j1: 1/3 rows (33%)", "job j1: 2/3 rows (67%)", "job j1: 3/3 rows (100%)", "job j1: 3/3 rows (100%)"]
    assert lines[-1].endswith("errors=0, tok/s=50") and "done in" in lines[-1]
