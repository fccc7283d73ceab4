"""The Serve app end to end over HTTP: vLLM CPU engines (2 replicas) on the tiny random model
(only routes, shapes and faults matter here; tests/serve/test_streaming.py runs SmolLM2), a real
chunk store, SeaweedFS for s3:// documents, the openai client, a batch job that survives killed
processes, a weight reload under traffic, every bad-input and auth rule, and the path rule (uri,
input and output only under serve.allowed_paths / allowed_s3_prefixes). One app for the module."""

import json
import os
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.config import load_config
from tests.support import run_cli
from tests.serve.running import running_app, token_client

pytestmark = pytest.mark.slow

TOKEN = "test-token"
S3_ALLOWED = "s3://memagent-test/serve"
N_DOCS, N_ROWS, SHARD = 10, 32, 4  # 32 rows: 8 shards of 4, the kills land after the first



def needle_doc(i: int) -> str:
    return "The grass is green. The sky is blue. " * (14 + 2 * i) + f"The code of box {i} is {7000 + i}. " \
        + "Here we go. " * 10


@pytest.fixture(scope="module")
def store(tmp_path_factory, smollm2_dir, home):
    from pipelines.ingest.config import IngestConfig
    from pipelines.ingest.pipeline import ingest

    root = tmp_path_factory.mktemp("serve-store")
    (root / "src").mkdir()
    with open(root / "src" / "docs.jsonl", "w") as f:
        for i in range(N_DOCS):
            f.write(json.dumps({"id": f"doc-{i}", "text": needle_doc(i)}) + "\n")
    ingest(str(root / "src"), str(root / "store"), IngestConfig(runner="local", chunk_size=128),
           str(smollm2_dir), home)
    return str(root / "store")


@pytest.fixture(scope="module")
def served(s3, store, tmp_path_factory, vllm_tiny_model_dir):
    state = tmp_path_factory.mktemp("serve-state")
    cfg = load_config(overrides=[
        f"model.path={vllm_tiny_model_dir}", "engine.kind=vllm", "engine.cpu_kvcache_gib=1", "engine.max_model_len=2048", "engine.max_num_seqs=16",
        "agent.chunk_size=128", "agent.memory_budget=16", "agent.final_budget=16",
        "serve.replicas=2", "serve.replica_cpus=0.5", "serve.max_ongoing_requests=4",
        "serve.max_queued_requests=2", "serve.retry_after_s=1", f"serve.shard_rows={SHARD}", "serve.max_doc_tokens=2000",
        f"serve.store={store}", f"serve.state_dir={state}",
        # every test's tmp_path may be named; `outside` below may not
        f"serve.allowed_paths=[{tmp_path_factory.getbasetemp()}]", f"serve.allowed_s3_prefixes=[{S3_ALLOWED}]"])
    with running_app(cfg, TOKEN) as url:
        yield cfg, url


@pytest.fixture(scope="module")
def client(served):
    with token_client(served[1], TOKEN) as c:
        yield c


def check_answer(out: dict, memory: bool) -> None:
    assert isinstance(out["answer"], str) and out["turns"] >= 2 and out["doc_tokens"] > 0
    assert out["prediction"] is None or "\\boxed{" + out["prediction"] + "}" in out["answer"]
    assert out["seconds"] > 0 and isinstance(out["model_version"], int)
    assert ("memory" in out) == memory
    if memory:
        assert len(out["memory"]) == out["turns"] - 1


def test_answer_from_text_doc_id_and_s3_uri(client, s3, tokenizer):
    text = needle_doc(3)
    n_tokens = len(tokenizer.encode(text, add_special_tokens=False))
    out = client.post("/v1/answer", json={"question": "What is the code of box 3?", "document": text,
                                          "show_memory": True}).json()
    check_answer(out, memory=True)
    assert out["doc_tokens"] == n_tokens and out["turns"] == -(-n_tokens // 128) + 1
    by_id = client.post("/v1/answer", json={"question": "What is the code of box 3?", "doc_id": "doc-3"}).json()
    check_answer(by_id, memory=False)
    assert by_id["doc_tokens"] == n_tokens
    s3.client().put_object(Bucket="memagent-test", Key="serve/doc3.txt", Body=text.encode())
    by_uri = client.post("/v1/answer", json={"question": "What is the code of box 3?",
                                             "uri": "s3://memagent-test/serve/doc3.txt"}).json()
    check_answer(by_uri, memory=False)
    assert by_uri["doc_tokens"] == n_tokens


def test_bad_inputs_get_a_4xx_with_one_line(client, served):
    big = "word " * (served[0].serve.max_request_bytes // 5 + 10)
    cases = [
        (dict(content=b'{"question": "q", "document": '), 400, "malformed JSON"),
        (dict(json={"document": "some text"}), 422, "question: missing"),
        (dict(json={"question": "q", "doc_id": "no-such-doc"}), 404, "doc_id 'no-such-doc': not in store"),
        (dict(json={"question": "q", "uri": "s3://memagent-test/serve/missing.txt"}), 400, "no such file"),
        (dict(json={"question": "q", "document": big}), 413, "request body"),
    ]
    for kwargs, status, reason in cases:
        r = client.post("/v1/answer", **kwargs)
        assert r.status_code == status, (kwargs.keys(), r.text[:300])
        msg = r.json()["error"]["message"]
        assert reason in msg and "\n" not in msg
    over = client.post("/v1/answer", json={"question": "q", "document": "word " * 3000})
    assert over.status_code == 413 and "max_doc_tokens=2000" in over.json()["error"]["message"]


def test_auth_is_required_on_every_route(served):
    url = served[1]
    for method, path in [("GET", "/healthz"), ("GET", "/v1/models"), ("POST", "/v1/answer"),
                         ("POST", "/v1/chat/completions"), ("GET", "/v1/jobs/abc"), ("POST", "/v1/admin/reload")]:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            r = httpx.request(method, url + path, headers=headers, json={})
            assert r.status_code == 401, (path, r.text)
            assert r.headers["www-authenticate"] == "Bearer"
    assert httpx.get(url + "/healthz", headers={"Authorization": f"Bearer {TOKEN}"}).json() == {"status": "ok"}


def test_serve_refuses_a_public_address_without_token():
    proc = run_cli("serve", "--host", "0.0.0.0", env={"MEMAGENT_SERVE_TOKEN": ""}, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("memagent: error: --host 0.0.0.0: not a loopback")


def test_openai_client_models_and_chat(served):
    from openai import OpenAI

    oa = OpenAI(base_url=served[1] + "/v1", api_key=TOKEN)
    models = oa.models.list().data
    assert len(models) == 1 and models[0].id
    out = oa.chat.completions.create(model=models[0].id, max_tokens=8, temperature=0,
                                     messages=[{"role": "user", "content": "Name a colour."}])
    assert out.choices[0].message.role == "assistant" and isinstance(out.choices[0].message.content, str)
    assert 0 < out.usage.completion_tokens <= 8 and out.usage.prompt_tokens > 0
    spec = httpx.get(served[1] + "/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert {"/v1/answer", "/v1/jobs", "/v1/chat/completions", "/v1/admin/reload"} <= set(spec["paths"])


def test_overload_answers_503_with_retry_after(client):
    # 16 requests released at once against 2 replicas x (4 running + 2 queued): the barrier makes
    # them arrive together and each reads 4 turns, so the last arrives before any finishes, however
    # fast the machine (14 short requests started one by one were all served on a fast CI machine).
    long_doc = needle_doc(0) * 2  # 390 tokens: 3 chunks of 128
    start = threading.Barrier(16)

    def call(results):
        start.wait()
        r = client.post("/v1/answer", json={"question": "What is the code of box 0?", "document": long_doc})
        results.append((r.status_code, r.headers.get("retry-after"), r.json()))

    results: list = []
    threads = [threading.Thread(target=call, args=(results,)) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = [c for c, _, _ in results]
    # Capacity depends on how many replicas are up: some are served, the rest refused at once.
    assert set(codes) <= {200, 503} and codes.count(200) >= 1 and codes.count(503) >= 1
    assert all(h == "1" and "overloaded" in body["error"]["message"] for c, h, body in results if c == 503)


def serve_pids(cfg, name: str) -> list[int]:
    from ray import serve

    return [r["pid"] for r in serve.get_deployment_handle(name, cfg.serve.app_name).broadcast("info").results()]


def kill_tree(pid: int) -> None:
    proc = psutil.Process(pid)
    for p in [*proc.children(recursive=True), proc]:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass


def wait_job(client, job_id: str, until, timeout: float = 600) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = client.get(f"/v1/jobs/{job_id}")
        if r.status_code == 200 and until(r.json()):
            return r.json()
        time.sleep(0.5)
    raise AssertionError(f"job {job_id}: not there in {timeout} s")


def test_batch_job_survives_killed_replica_and_job_manager(client, served, tmp_path):
    cfg = served[0]
    rows = [{"id": f"q{i}", "question": f"What is the code of box {i % N_DOCS}?", "doc_id": f"doc-{i % N_DOCS}"}
            for i in range(N_ROWS)] + [{"id": "bad", "question": "q", "doc_id": "no-such-doc"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "questions.parquet")
    body = {"input": str(tmp_path / "questions.parquet"), "output": str(tmp_path / "answers")}
    r = client.post("/v1/jobs", json=body)
    assert r.status_code == 202, r.text
    job_id = r.json()["job_id"]
    seen = wait_job(client, job_id, lambda s: s["done"] >= SHARD)
    assert seen["done"] < seen["total"], seen  # the kills land mid-job
    victim = serve_pids(cfg, "Agent")[0]
    kill_tree(victim)
    for pid in serve_pids(cfg, "Jobs"):
        kill_tree(pid)
    final = wait_job(client, job_id, lambda s: s["status"] in ("done", "failed"))
    assert final["status"] == "done", final
    assert final["done"] == final["total"] == len(rows) and final["errors"] >= 1
    out = pq.read_table(tmp_path / "answers")
    assert sorted(out.column("id").to_pylist()) == sorted(r["id"] for r in rows)  # one-to-one, no duplicates
    by_id = {r["id"]: r for r in out.to_pylist()}
    assert "not in store" in by_id["bad"]["error"]
    good = [by_id[r["id"]] for r in rows[:-1]]
    assert all(g["error"] is None and g["turns"] >= 2 and g["tokens"] > 0 and len(g["memory"]) == g["turns"] - 1
               for g in good)
    assert all(g["doc_id"] == r["doc_id"] and g["question"] == r["question"] for g, r in zip(good, rows))
    assert client.post("/v1/jobs", json=body).json() == {"job_id": job_id, "status": "done"}


def test_reload_mid_traffic_drops_nothing(client, served, vllm_tiny_model_dir, tmp_path):
    new = tmp_path / "checkpoint-2"
    new.mkdir()
    for f in Path(vllm_tiny_model_dir).iterdir():
        (new / f.name).symlink_to(f)
    before = client.get("/v1/models").json()["data"][0]["version"]
    results: list = []

    def call():
        for _ in range(60):  # a real client honours 503 + Retry-After; an admitted request must finish
            r = client.post("/v1/answer", json={"question": "What is the code of box 0?", "doc_id": "doc-0"})
            if r.status_code != 503:
                break
            time.sleep(float(r.headers.get("retry-after", "1")))
        results.append(r)

    # More callers than 2 replicas x (4 ongoing + 2 queued) admit: routed calls would get 503s
    # now, and the reload's control-plane calls must still go through.
    threads = [threading.Thread(target=call) for _ in range(16)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    bad = client.post("/v1/admin/reload", json={"model": str(tmp_path / "nope")})
    assert bad.status_code == 400 and "no such folder" in bad.json()["error"]["message"]
    r = client.post("/v1/admin/reload", json={"model": str(new)})
    assert r.status_code == 200, r.text
    version = r.json()["version"]
    assert version == before + 1
    for t in threads:
        t.join()
    assert [x.status_code for x in results] == [200] * 16, [x.text[:200] for x in results]
    assert client.get("/v1/models").json()["data"][0]["version"] == version
    after = client.post("/v1/answer", json={"question": "q?", "doc_id": "doc-0"}).json()
    assert after["model_version"] == version
    from pipelines.serve.state import read_model_state

    assert read_model_state(served[0].serve.state_dir) == (str(new), version)  # recorded once loaded
    denied = client.post("/v1/admin/reload", json={"model": "models:/someone-else/1"})
    assert denied.status_code == 403 and "serve.allowed_models" in denied.json()["error"]["message"]
    stale = client.post("/v1/admin/reload", json={"model": str(new), "version": version})
    assert stale.status_code == 409 and "not above the served version" in stale.json()["error"]["message"]
    assert read_model_state(served[0].serve.state_dir) == (str(new), version)


def test_batch_command_follows_a_job_on_the_server(served, tmp_path):
    """`memagent batch --server URL`: the command a user runs, over jsonl rows with inline text."""
    rows = [{"id": f"t{i}", "question": f"What is the code of box {i}?", "document": needle_doc(i)}
            for i in range(4)]
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = run_cli("batch", "--input", str(tmp_path / "q.jsonl"), "--output", str(tmp_path / "out"),
                   "--server", served[1], timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "done, 4/4 rows, 0 errors" in proc.stdout
    out = pq.read_table(tmp_path / "out").to_pylist()
    assert sorted(r["id"] for r in out) == [r["id"] for r in rows]
    assert all(r["error"] is None and r["turns"] >= 2 for r in out)
    bad = run_cli("batch", "--input", str(tmp_path / "none.jsonl"), "--output", str(tmp_path / "o2"),
                  "--server", served[1])
    assert bad.returncode == 2 and "none.jsonl" in bad.stderr.strip().splitlines()[-1]


SECRET = "The vault code is 31337."


@pytest.fixture(scope="module")
def outside(s3):
    """A folder and buckets the app may not touch, holding a secret. Access times are set before
    modification times, so any read of a file would move its atime (relatime)."""
    folder = Path(tempfile.mkdtemp(prefix="memagent-outside-"))
    (folder / "secret.txt").write_text(SECRET)
    (folder / "rows.jsonl").write_text(json.dumps({"question": "What is the vault code?", "document": SECRET}) + "\n")
    for f in folder.iterdir():
        os.utime(f, (1000, 2000))
    s3.create_bucket("memagent-other")
    s3.client().put_object(Bucket="memagent-other", Key="secret.txt", Body=SECRET.encode())
    s3.client().put_object(Bucket="memagent-test", Key="serve-private/secret.txt", Body=SECRET.encode())
    yield folder
    shutil.rmtree(folder)


def untouched(folder: Path) -> None:
    """Nothing was read from the folder, and nothing was written into it."""
    assert sorted(p.name for p in folder.iterdir()) == ["rows.jsonl", "secret.txt"]
    assert [p.stat().st_atime for p in folder.iterdir()] == [1000, 1000]


def escapes(tmp_path: Path, outside: Path) -> dict[str, tuple[str, str]]:
    """name -> (uri, reason): each way out of the allowed paths, starting from inside tmp_path."""
    (tmp_path / "link.txt").symlink_to(outside / "secret.txt")
    (tmp_path / "linkdir").symlink_to(outside)
    out, s3_out = "outside the allowed paths", "outside the allowed s3:// prefixes"
    return {"dotdot": (f"{tmp_path}/{os.path.relpath(outside / 'secret.txt', tmp_path)}", out),
            "link": (str(tmp_path / "link.txt"), out), "linkdir": (str(tmp_path / "linkdir" / "secret.txt"), out),
            "absolute": (str(outside / "secret.txt"), out), "etc": ("/etc/passwd", out),
            "proc": ("/proc/self/environ", "under /proc"), "bucket": ("s3://memagent-other/secret.txt", s3_out),
            "prefix": ("s3://memagent-test/serve-private/secret.txt", s3_out)}


def test_answer_reads_only_under_the_allowed_paths(client, tmp_path, outside):
    for name, (uri, reason) in escapes(tmp_path, outside).items():
        r = client.post("/v1/answer", json={"question": "What is the vault code?", "uri": uri, "show_memory": True})
        msg = r.json()["error"]["message"]
        assert r.status_code == 403 and msg.startswith(f"uri '{uri}': {reason}") and "\n" not in msg, (name, r.text)
        assert "31337" not in r.text
    untouched(outside)
    (tmp_path / "sub").mkdir()
    (tmp_path / "doc.txt").write_text(needle_doc(2))
    ok = client.post("/v1/answer", json={"question": "What is the code of box 2?", "uri": f"{tmp_path}/sub/../doc.txt"})
    assert ok.status_code == 200, ok.text
    check_answer(ok.json(), memory=False)


def test_jobs_read_and_write_only_under_the_allowed_paths(client, s3, tmp_path, outside):
    (tmp_path / "rows.jsonl").write_text(json.dumps({"question": "q", "document": "d"}) + "\n")
    (tmp_path / "linkdir").symlink_to(outside)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "rows.jsonl").symlink_to(outside / "rows.jsonl")
    good_in, good_out = str(tmp_path / "rows.jsonl"), str(tmp_path / "answers")
    out = "outside the allowed paths"
    cases = [("input", str(outside / "rows.jsonl"), out), ("input", str(tmp_path / "linkdir" / "rows.jsonl"), out),
             ("input", "/proc/self/environ", "under /proc"), ("input", str(tmp_path / "in"), "links outside the folder"),
             ("output", str(outside / "evil"), out), ("output", str(tmp_path / "linkdir" / "evil"), out),
             ("output", f"{tmp_path}/{os.path.relpath(outside, tmp_path)}/evil", out),
             ("output", "s3://memagent-other/evil", "outside the allowed s3:// prefixes")]
    for field, uri, reason in cases:
        r = client.post("/v1/jobs", json={"input": good_in, "output": good_out, field: uri})
        msg = r.json()["error"]["message"]
        assert r.status_code == 403 and msg.startswith(f"{field} '{uri}'") and reason in msg, (field, uri, r.text)
    untouched(outside)
    assert not (tmp_path / "answers").exists()  # refused before anything was written, inside or out
    assert s3.client().list_objects_v2(Bucket="memagent-other", Prefix="evil")["KeyCount"] == 0


def test_batch_rows_naming_uris_outside_the_roots_get_an_error(client, tmp_path, outside):
    ways = escapes(tmp_path, outside)
    (tmp_path / "doc.txt").write_text(needle_doc(1))
    rows = [{"id": "inside", "question": "What is the code of box 1?", "uri": str(tmp_path / "doc.txt")}] + \
        [{"id": name, "question": "What is the vault code?", "uri": uri} for name, (uri, _) in ways.items()]
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = client.post("/v1/jobs", json={"input": str(tmp_path / "q.jsonl"), "output": str(tmp_path / "out")})
    assert r.status_code == 202, r.text
    final = wait_job(client, r.json()["job_id"], lambda s: s["status"] in ("done", "failed"))
    assert final["status"] == "done" and final["done"] == len(rows) and final["errors"] == len(ways), final
    out = {row["id"]: row for row in pq.read_table(tmp_path / "out").to_pylist()}
    assert out["inside"]["error"] is None and out["inside"]["turns"] >= 2, out["inside"]
    for name, (uri, reason) in ways.items():
        assert out[name]["error"].startswith(f"uri '{uri}': {reason}") and out[name]["turns"] == 0, out[name]
    assert "31337" not in json.dumps(list(out.values()))
    untouched(outside)
