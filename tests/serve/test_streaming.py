"""Streaming over real HTTP against the running app (one app for the module: the vLLM CPU
engine with SmolLM2, greedy, one replica): /v1/answer's memory trace as server-sent events,
a client that leaves mid-stream, and /v1/chat/completions as OpenAI clients use it (streamed
and not, stop sequences, n > 1) through the `openai` client and a raw HTTP client. Below the
app: what the transformers engines' streams may send (held-back stop strings and half
characters), their stop strings, and a closed stream ending its generation."""

import asyncio
import json
import time
from collections.abc import Iterator

import httpx
import pytest

from pipelines.config import load_config
from pipelines.engine.streaming import TextDeltas, collect
from tests.serve.running import running_app, token_client

TOKEN = "stream-token"
CHUNK = 128
QUESTION = "What is the code of box 3?"



def needle_doc(filler: int) -> str:
    return "The grass is green. The sky is blue. " * filler + "The code of box 3 is 7003. " + "Here we go. " * 10


@pytest.fixture(scope="module")
def served(tmp_path_factory, smollm2_dir):
    cfg = load_config(overrides=[
        f"model.path={smollm2_dir}", "engine.kind=vllm", "engine.cpu_kvcache_gib=1", "engine.max_model_len=2048",
        "engine.max_num_seqs=8",
        f"agent.chunk_size={CHUNK}", "agent.memory_budget=16", "agent.final_budget=16",
        "serve.replicas=1", "serve.replica_cpus=0.5", "serve.max_ongoing_requests=1", "serve.max_queued_requests=8",
        f"serve.state_dir={tmp_path_factory.mktemp('stream-state')}", f"data.store={tmp_path_factory.mktemp('empty-store')}",
        f"serve.allowed_paths=[{tmp_path_factory.getbasetemp()}]"])
    with running_app(cfg, TOKEN) as url:
        yield cfg, url


@pytest.fixture(scope="module")
def client(served):
    with token_client(served[1], TOKEN) as c:
        yield c


def sse_events(lines) -> Iterator[tuple[str | None, str]]:
    """(event name, data) of each server-sent event, as they arrive."""
    name = None
    for line in lines:
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            yield name, line.removeprefix("data: ")
            name = None


def stream_answer(client, body: dict) -> list[dict]:
    with client.stream("POST", "/v1/answer", json={**body, "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), r.read()
        events = list(sse_events(r.iter_lines()))
    parsed = [json.loads(data) for _, data in events]
    assert [name for name, _ in events] == [e["event"] for e in parsed]
    return parsed


def replica_info(cfg) -> dict:
    from ray import serve

    [info] = serve.get_deployment_handle("Agent", cfg.serve.app_name).broadcast("info").results()
    return info


@pytest.mark.slow
def test_answer_streams_one_event_per_turn_then_the_unstreamed_answer(client, tokenizer, tmp_path):
    text = needle_doc(28)
    n_tokens = len(tokenizer.encode(text, add_special_tokens=False))
    body = {"question": QUESTION, "document": text, "show_memory": True}
    plain = client.post("/v1/answer", json=body).json()
    events = stream_answer(client, body)
    turns = [e for e in events if e["event"] == "turn"]
    assert [e["event"] for e in events] == ["start"] + ["turn"] * len(turns) + ["answer"]
    assert events[0] == {"event": "start", "total": n_tokens, "unit": "tokens"}
    assert len(turns) == -(-n_tokens // CHUNK) == plain["turns"] - 1
    assert [e["turn"] for e in turns] == list(range(1, len(turns) + 1))
    assert [e["tokens_read"] for e in turns] == [min(n_tokens, CHUNK * k) for k in range(1, len(turns) + 1)]
    assert all(e["read"] == e["tokens_read"] and e["total"] == n_tokens and e["seconds"] > 0 for e in turns)
    assert [e["memory"] for e in turns] == plain["memory"]
    answer = {k: v for k, v in events[-1].items() if k not in ("event", "seconds")}
    assert answer == {k: v for k, v in plain.items() if k != "seconds"}

    (tmp_path / "doc.txt").write_text(text)
    by_uri = stream_answer(client, {"question": QUESTION, "uri": str(tmp_path / "doc.txt")})
    size = len(text.encode())
    assert by_uri[0] == {"event": "start", "total": size, "unit": "bytes"}
    reads = [e["read"] for e in by_uri if e["event"] == "turn"]
    assert reads == sorted(reads) and reads[-1] == size and 0 < reads[0] < size
    assert by_uri[-1]["event"] == "answer" and "memory" not in by_uri[-1] and by_uri[-1]["doc_tokens"] > 0


@pytest.mark.slow
def test_a_client_that_leaves_mid_stream_frees_its_slot(client, served, tokenizer):
    cfg = served[0]
    text = needle_doc(600)
    n_turns = -(-len(tokenizer.encode(text, add_special_tokens=False)) // CHUNK) + 1
    before = replica_info(cfg)["turns"]
    with client.stream("POST", "/v1/answer", json={"question": QUESTION, "document": text, "stream": True}) as r:
        assert r.status_code == 200
        for name, _ in sse_events(r.iter_lines()):
            if name == "turn":
                break  # leaving the block closes the connection mid-stream
    deadline = time.monotonic() + 120
    while (info := replica_info(cfg))["ongoing"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert info["ongoing"] == 0, info
    assert 1 <= info["turns"] - before < n_turns / 2, (info, before, n_turns)
    ok = client.post("/v1/answer", json={"question": QUESTION, "document": needle_doc(3)})
    assert ok.status_code == 200 and ok.json()["turns"] == 2  # the one slot (max_ongoing_requests=1) is free
    assert replica_info(cfg)["turns"] == info["turns"] + 2  # and the loop that was left ran no further


@pytest.mark.slow
def test_a_bad_streamed_request_gets_its_4xx(client):
    r = client.post("/v1/answer", json={"question": QUESTION, "doc_id": "d1", "stream": True})
    assert r.status_code == 404 and "doc_id 'd1': not in store" in r.json()["error"]["message"]
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "stream": True,
                                                  "stop": ["a", "b", "c", "d", "e"]})
    assert r.status_code == 422 and "stop: at most 4" in r.json()["error"]["message"]


MESSAGES = [{"role": "user", "content": "Name three colours of the rainbow."}]


@pytest.mark.slow
def test_openai_client_streams_stops_and_returns_n_choices(served):
    from openai import OpenAI

    oa = OpenAI(base_url=served[1] + "/v1", api_key=TOKEN)
    args = dict(model="smollm2", messages=MESSAGES, max_tokens=24, temperature=0)
    full = oa.chat.completions.create(**args)  # each request alone: greedy vLLM output depends on its batch
    text = full.choices[0].message.content
    assert len(text) > 12 and full.usage.completion_tokens == 24 and full.choices[0].finish_reason == "length"
    two = oa.chat.completions.create(n=2, **args)
    assert [c.index for c in two.choices] == [0, 1] and all(c.message.content for c in two.choices)
    assert two.usage.prompt_tokens == full.usage.prompt_tokens and 2 < two.usage.completion_tokens <= 2 * 24

    chunks = list(oa.chat.completions.create(stream=True, stream_options={"include_usage": True}, **args))
    assert {c.object for c in chunks} == {"chat.completion.chunk"} and len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 24
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 3  # token by token, not at once

    stop = text[len(text) // 2:len(text) // 2 + 3]
    cut = text[:text.index(stop)]
    stopped = oa.chat.completions.create(stop=[stop, "never-there"], **args)
    assert stopped.choices[0].message.content == cut and stopped.choices[0].finish_reason == "stop"
    assert stopped.usage.completion_tokens < 24
    streamed = list(oa.chat.completions.create(stop=stop, stream=True, **args))
    assert "".join(c.choices[0].delta.content or "" for c in streamed) == cut
    assert streamed[-1].choices[0].finish_reason == "stop"


@pytest.mark.slow
def test_a_script_posting_json_gets_openai_sse(served):
    body = {"model": "smollm2", "messages": MESSAGES, "stream": True, "max_tokens": 8, "temperature": 0, "n": 2}
    with httpx.stream("POST", served[1] + "/v1/chat/completions", json=body, timeout=300,
                      headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = list(sse_events(r.iter_lines()))
    assert all(name is None for name, _ in events) and events[-1][1] == "[DONE]"
    chunks = [json.loads(data) for _, data in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" and "usage" not in c for c in chunks)
    by_choice = {i: [c["choices"][0] for c in chunks if c["choices"][0]["index"] == i] for i in (0, 1)}
    for choices in by_choice.values():
        assert choices[0]["delta"] == {"role": "assistant", "content": ""}
        assert choices[-1]["finish_reason"] == "length" and [c["finish_reason"] for c in choices[:-1]] == \
            [None] * (len(choices) - 1)
    assert all("".join(c["delta"].get("content", "") for c in by_choice[i]) for i in (0, 1))


def pieces_of(tokenizer, text: str, stops: tuple[str, ...], finish: str = "length") -> list:
    """Push text's tokens one at a time, as an engine would; the finish piece unless a stop came."""
    deltas = TextDeltas(tokenizer, stops)
    out = []
    for i in tokenizer.encode(text, add_special_tokens=False):
        if (piece := deltas.push([i])) is not None:
            out.append(piece)
            if piece.finish_reason:
                return out
    return out + [deltas.finish(finish)]


def test_a_stream_holds_back_half_characters_and_stop_strings(tokenizer):
    pizza = pieces_of(tokenizer, "I like 🍕 a lot.", ())  # the emoji is three byte-level tokens
    assert "".join(p.text for p in pizza) == "I like 🍕 a lot." and not any("\ufffd" in p.text for p in pizza)
    assert sum(len(p.token_ids) for p in pizza) == len(tokenizer.encode("I like 🍕 a lot.", add_special_tokens=False))
    stopped = pieces_of(tokenizer, "Hello world. STOP here", ("STOP",))  # " ST" + "OP": held back, then cut
    assert "".join(p.text for p in stopped) == "Hello world. " and stopped[-1].finish_reason == "stop"
    assert [p.finish_reason for p in stopped[:-1]] == [None] * (len(stopped) - 1)
    assert not any("ST" in p.text for p in stopped)
    near = pieces_of(tokenizer, "Say ST and go", ("STOP",))  # a stop's start that never completes is sent
    assert "".join(p.text for p in near) == "Say ST and go" and near[-1].finish_reason == "length"


def test_hf_engine_streams_what_it_generates_and_ends_at_stop_strings(tiny_model_dir):
    from pipelines.engine import GenRequest, Sampling
    from pipelines.engine.hf_engine import HFEngine

    engine = HFEngine(str(tiny_model_dir))
    prompt = engine.codec.encode_user("Tell me about the sea.")

    def req(**kw) -> GenRequest:  # sampled, seeded: the tiny random model's greedy text is all newlines
        return GenRequest(Sampling(max_tokens=32, temperature=1.0, seed=5, **kw), prompt_ids=prompt)

    async def scenario():
        full = await engine.generate(req())
        stop = full.text[len(full.text) // 2:len(full.text) // 2 + 3]
        return (full, await collect(engine.stream(req())), stop, await engine.generate(req(stop=(stop,))),
                await collect(engine.stream(req(stop=("never-there", stop)))))

    full, streamed, stop, cut, cut_streamed = asyncio.run(scenario())
    assert streamed == (full.token_ids, full.text, full.finish_reason) and len(full.text) > 20
    want = full.text[:full.text.index(stop)]
    assert cut.text == want and cut.finish_reason == "stop" and len(cut.token_ids) < len(full.token_ids)
    assert cut_streamed == (cut.token_ids, want, "stop")
