"""Gated memory (agent.gates): the keep and the exit marker, the loop with scripted responses, SFT
traces that teach the gates, the records that count them, and engines that end a kept turn at its
first token."""

from __future__ import annotations

import asyncio
import math
import os
from pathlib import Path

import pytest

from pipelines.agent import AgentConfig, Response, get_templates, make_loop
from pipelines.agent.codec import ChatCodec
from pipelines.agent.gates import EXIT, KEEP, read_gate
from pipelines.agent.loop import AgentLoop, LoopLimits
from pipelines.agent.templates import GATED_UPDATE, RELEASE_UPDATE
from pipelines.agent.turns import TurnRecord
from pipelines.errors import UserError
from pipelines.data.tasks import task_chunks
from pipelines.learn.traces import sft_trace
from pipelines.rollout.metrics import rollout_metrics
from pipelines.rollout.rewards import with_costs
from pipelines.rollout.trajectory import SCHEMA_VERSION, Group, Trajectory, from_row, to_row
from tests.support import built, scripted_llama

GATED = get_templates("gated")
LIMITS = LoopLimits(memory_budget=64, final_budget=16, question_budget=64)


@pytest.fixture(scope="module")
def codec(tokenizer):
    return ChatCodec(tokenizer)


@pytest.mark.parametrize("text, action, memory, malformed", [
    ("", "kept", None, False),  # the keep: an empty reply
    ("  \n", "kept", None, False),
    ("the code is 42.\n[EXIT]", "exited", "the code is 42.", False),
    ("[EXIT]", "exited", None, False),  # exits with the memory it was given
    ("the code is 42.", "updated", "the code is 42.", False),
    ("[KEEP]", "updated", "[KEEP]", False),  # the old keep marker: plain text now
    ("[EXIT] and more", "updated", "[EXIT] and more", True),  # a marker followed by text
    ("the code is 42. [EXI", "updated", "the code is 42. [EXI", True),  # cut by the token budget
    ("[exit]", "updated", "[exit]", True),
    ("a [EXIT]\n[EXIT]", "updated", "a [EXIT]\n[EXIT]", True),
])
def test_read_gate(text, action, memory, malformed):
    gate = read_gate(text)
    assert (gate.action, gate.memory, gate.malformed) == (action, memory, malformed)


def test_the_exit_marker_is_a_few_ordinary_tokens_and_the_keep_none(tokenizer):
    ids = tokenizer.encode(EXIT, add_special_tokens=False)
    assert len(ids) <= 4 and not set(tokenizer.all_special_ids) & set(ids) and tokenizer.decode(ids) == EXIT
    assert KEEP == "" and tokenizer.encode(KEEP, add_special_tokens=False) == []


def test_gated_template_is_the_release_one_plus_a_paragraph():
    paragraph = GATED_UPDATE.split("\n\n")[1]
    assert GATED_UPDATE.replace(paragraph + "\n\n", "", 1) == RELEASE_UPDATE
    assert "reply with nothing" in paragraph and EXIT in paragraph and EXIT not in RELEASE_UPDATE
    assert GATED.final == get_templates("release").final and GATED.gated and not get_templates("release").gated


def test_gates_and_template_must_agree():
    with pytest.raises(UserError, match=r"agent.gates=true with agent.template='release'.*agent.template=gated"):
        AgentConfig(gates=True)
    with pytest.raises(UserError, match=r"agent.gates=false with agent.template='gated'"):
        AgentConfig(template="gated")
    assert AgentConfig(gates=True, template="gated").gates


def test_gates_with_the_release_template_from_the_command_line():
    from pipelines.config import load_config

    with pytest.raises(UserError, match="agent.gates=true with agent.template='release'"):
        load_config(None, ["agent.gates=true", "agent.template=release"])


class Chunks:
    """A document's chunks, counting how many the loop took."""

    def __init__(self, codec: ChatCodec, n: int):
        self.chunks = [codec.encode(f"Section {i}: the grass is green.") for i in range(n)]
        self.taken = 0

    def __iter__(self):
        for chunk in self.chunks:
            self.taken += 1
            yield chunk


def drive(loop, codec: ChatCodec, replies: list[str]):
    """Feed scripted texts to memory turns in order; the final turn answers \\boxed{42}."""
    requests, replies = [], list(replies)
    while (req := loop.next_request()) is not None:
        requests.append(req)
        text = "\\boxed{42}" if req.is_final else replies.pop(0)
        loop.feed(Response(codec.encode(text), text))
    return requests, loop.result()


def test_keep_leaves_the_memory_byte_identical_and_exit_goes_to_the_final_turn(codec):
    chunks = Chunks(codec, 6)
    loop = AgentLoop("What is the code?", chunks, codec, GATED, LIMITS)
    odd = "  code:\t42 \u00a0 (so far)"  # inner whitespace kept, outer stripped
    requests, result = drive(loop, codec, [KEEP, odd, KEEP, "code: 42, sure\n" + EXIT])
    assert [t.gate for t in result.turns] == ["kept", "updated", "kept", "exited", "final"]
    assert result.memory == [GATED.initial_memory, odd.strip(), odd.strip(), "code: 42, sure"]
    assert requests[2].prompt_ids == codec.encode_user(GATED.update_prompt("What is the code?", odd.strip(),
                                                                          codec.decode(chunks.chunks[2])))
    final = requests[-1]
    assert final.is_final and not any(r.is_final for r in requests[:-1])
    assert final.prompt_ids == codec.encode_user(GATED.final_prompt("What is the code?", "code: 42, sure"))
    assert chunks.taken == 4  # the rest of the document is never read
    assert (result.chunks_read, result.memory_updates, result.exit_chunk, result.malformed) == (4, 2, 4, 0)
    assert result.prediction == "42" and result.doc_tokens == sum(map(len, chunks.chunks[:4]))


def test_a_bare_exit_keeps_the_memory_and_exits(codec):
    loop = AgentLoop("What is the code?", Chunks(codec, 3), codec, GATED, LIMITS)
    requests, result = drive(loop, codec, ["code: 42", EXIT])
    assert result.memory == ["code: 42", "code: 42"] and result.exit_chunk == 2 and len(requests) == 3
    assert requests[-1].prompt_ids == codec.encode_user(GATED.final_prompt("What is the code?", "code: 42"))


def test_malformed_markers_are_memory_rewrites_and_counted(codec):
    loop = AgentLoop("What is the code?", Chunks(codec, 3), codec, GATED, LIMITS)
    _, result = drive(loop, codec, ["code: 42 [EXIT] more", "[EXIT] code: 42", "code: 42 [EXI"])
    assert result.memory == ["code: 42 [EXIT] more", "[EXIT] code: 42", "code: 42 [EXI"]
    assert [t.gate for t in result.turns] == ["updated"] * 3 + ["final"]
    assert (result.chunks_read, result.memory_updates, result.exit_chunk, result.malformed) == (3, 3, None, 3)


def test_without_gates_markers_are_plain_text(codec):
    loop = make_loop("What is the code?", Chunks(codec, 2), codec, AgentConfig(memory_budget=64))
    requests, result = drive(loop, codec, [KEEP, "code\n" + EXIT])
    assert result.memory == [KEEP, "code\n" + EXIT] and result.exit_chunk is None and result.malformed == 0
    assert [t.gate for t in result.turns] == ["updated", "updated", "final"]  # the empty reply: an empty memory


def needle_trace(tokenizer, codec, chunk_size, task="niah_single", seed=0):
    (row,) = built(task, tokenizer, n=1, seed=seed)
    chunks = list(task_chunks(row, None, codec, chunk_size))
    return row, chunks, sft_trace(row, chunks, codec, GATED, LoopLimits(1024, 64, 256))


def test_sft_trace_keeps_before_the_needle_writes_it_and_exits(tokenizer, codec):
    row, chunks, turns = needle_trace(tokenizer, codec, 200)
    (needle,) = [e.text for e in row.evidence]
    at = next(k for k, t in enumerate(turns) if t.text != KEEP)  # the chunk the needle ends in
    eos = tokenizer.eos_token_id
    assert at > 0 and all(t.response_ids == [eos] for t in turns[:at])  # the keep: EOS alone
    assert turns[at].text == f"{needle}\n{EXIT}" and turns[at].response_ids[-1] == eos
    assert len(turns) == at + 2 < len(chunks) + 1 and turns[-1].is_final
    assert turns[-1].text == f"\\boxed{{{row.answers[0]}}}"
    prompt = codec.decode(turns[-1].prompt_ids)
    assert f"<memory>\n{needle}\n</memory>" in prompt and EXIT not in prompt.split("<memory>")[1]


def test_sft_trace_of_a_cut_needle_writes_its_part_then_exits(tokenizer, codec):
    (row,) = built("niah_single", tokenizer, n=1)
    cut = row.evidence[0].offset + 6  # the first chunk ends inside the needle
    _, _, turns = needle_trace(tokenizer, codec, cut)
    needle = row.evidence[0].text
    assert needle.startswith(turns[0].text) and turns[0].text != needle and EXIT not in turns[0].text
    assert turns[1].text == f"{needle}\n{EXIT}" and turns[2].is_final and len(turns) == 3


def test_sft_trace_of_an_all_of_row_exits_after_its_last_piece(tokenizer, codec):
    row, chunks, turns = needle_trace(tokenizer, codec, 200, task="niah_multivalue")
    memory = [t for t in turns if not t.is_final]
    assert [EXIT in t.text for t in memory] == [False] * (len(memory) - 1) + [True]
    assert memory[-1].text == "\n".join(e.text for e in row.evidence) + f"\n{EXIT}"
    last = max(e.offset for e in row.evidence)
    assert len(memory) == last // 200 + 1 or len(memory) == last // 200 + 2  # its chunk, or the next if cut


def gated_turns(*gates: str) -> list[TurnRecord]:
    return [TurnRecord([1], [2, 3], [-0.1, -0.2], "stop", g == "final", 8, 0, 0, 0.1, g) for g in gates]


def test_trajectories_records_and_metrics_carry_the_gates():
    from pipelines.eval.records import RowRef, gate_metrics, trajectory_record
    from pipelines.data.tasks import TaskRow

    t = Trajectory("s", "s#1", 0, gated_turns("kept", "updated", "kept", "exited", "final"), ["a"] * 4, "\\boxed{1}",
                   "1", 1.0, 1.0, False, 400, 0.5, "w", malformed=1, chunks_unread=6)
    assert (t.chunks_read, t.memory_updates, t.exit_chunk) == (4, 2, 4)
    row = to_row(t)
    assert (row["chunks_read"], row["memory_updates"], row["exit_chunk"], row["chunks_unread"]) == (4, 2, 4, 6)
    assert from_row(row) == t
    plain = Trajectory("p", "p#1", 0, gated_turns("updated", "updated", "final"), ["a"] * 2, "", None, 0.0, 0.0,
                       False, 200, 0.5, "w")
    m = rollout_metrics([Group("s#1", "s", [t]), Group("p#1", "p", [plain])])
    assert m["gate/update_rate"] == 4 / 6 and m["gate/exit_fraction"] == 6 / 12 and m["gate/malformed"] == 1.0
    task_row = TaskRow("s", "q?", ["1"], "one_of", None, "doc", 400, "niah", "test")
    cell = ("niah", "4K", "memagent")
    rec = trajectory_record(RowRef(cell, 0, task_row), t, traces=1, finished=1e9)
    assert (rec["finished"], rec["seconds"]) == (1e9, 0.5)  # a cell's span for documents per hour
    assert (rec["chunks_read"], rec["memory_updates"], rec["exit_chunk"], rec["malformed"]) == (4, 2, 4, 1)
    assert rec["generated"] == 10  # 2 tokens in each of the 5 turns: what the benchmark's tokens/doc reads
    from pipelines.eval.results import summarize

    assert summarize([rec, {**rec, "generated": 20}])["generated"] == 15
    assert math.isnan(summarize([rec, {k: v for k, v in rec.items() if k != "generated"}])["generated"])  # older cells
    assert gate_metrics(cell, [rec, {**rec, "exit_chunk": None, "chunks_unread": 0, "malformed": 0}]) == {
        "gate/niah/4K/update_rate": 0.5, "gate/niah/4K/exit_fraction": 6 / 14, "gate/niah/4K/malformed": 1.0}
    assert gate_metrics(("niah", "4K", "truncation"), [rec]) == {}


def test_trajectories_of_schema_2_read_as_ungated():
    row = to_row(Trajectory("s", "s#1", 0, gated_turns("updated", "final"), ["a"], "", None, 0.0, 0.0, False, 9,
                            0.1, "w"))
    old = {k: v for k, v in row.items() if k not in ("malformed", "chunks_unread", "chunks_read", "memory_updates",
                                                        "exit_chunk")}
    old.update(schema_version=2, turns=[{k: v for k, v in turn.items() if k != "gate"} for turn in row["turns"]])
    t = from_row(old)
    assert [x.gate for x in t.turns] == ["updated", "final"] and (t.chunks_read, t.exit_chunk, t.malformed) == (1, None, 0)
    with pytest.raises(UserError, match=f"schema_version {SCHEMA_VERSION + 1}, this code reads 2, 3"):
        from_row({**row, "schema_version": SCHEMA_VERSION + 1})


def test_turn_cost_per_chunk_read():
    assert with_costs(1.0, chunks_read=7) == 1.0 and with_costs(1.0, turn_cost=0.05, chunks_read=4) == pytest.approx(0.8)


@pytest.fixture(scope="module")
def keeper_dir(tmp_path_factory, tokenizer, codec) -> Path:
    """Answers every turn with nothing: EOS first."""
    newline = codec.encode_user("x")[-1]
    return scripted_llama(tmp_path_factory.mktemp("keeper"), tokenizer, [newline, tokenizer.eos_token_id])


async def run_gated_async(engine, codec: ChatCodec, n_chunks: int = 3):
    from pipelines.engine.base import Sampling
    from pipelines.engine.driver import run_loop

    loop = AgentLoop("What is the code?", Chunks(codec, n_chunks), codec, GATED, LIMITS, keep_ids=True)
    return await run_loop(engine, loop, Sampling(logprobs=True))


def run_gated(engine, codec: ChatCodec):
    return asyncio.run(run_gated_async(engine, codec))


def check_kept(result, codec: ChatCodec) -> None:
    memory = result.turns[:-1]
    assert [t.gate for t in memory] == ["kept"] * 3 and result.memory == [GATED.initial_memory] * 3
    for t in memory:  # one token generated, EOS, and its logprob is the generated token's
        assert t.response_ids == [codec.tokenizer.eos_token_id] and t.finish_reason == "stop"
        assert len(t.logprobs) == 1 and -1e-3 < t.logprobs[0] <= 0


def test_hf_engine_ends_a_kept_turn_at_its_first_token(keeper_dir, codec):
    from pipelines.engine.hf_engine import HFEngine

    check_kept(run_gated(HFEngine(str(keeper_dir)), codec), codec)


def test_hf_batch_engine_ends_a_kept_turn_at_its_first_token(keeper_dir, codec):
    from pipelines.engine.config import EngineConfig
    from pipelines.engine.hf_batch_engine import HFBatchEngine

    engine = HFBatchEngine(str(keeper_dir), EngineConfig(kind="hf_batch", max_model_len=512, max_num_seqs=2))
    try:
        check_kept(run_gated(engine, codec), codec)
    finally:
        asyncio.run(engine.close())


def test_served_answers_and_batch_rows_carry_the_gates(keeper_dir, codec):
    """A replica's core on the keeper model: every chunk kept, the stream's events say so."""
    from pipelines.engine.config import EngineConfig
    from pipelines.engine.hf_engine import HFEngine
    from pipelines.serve.config import ServeConfig
    from pipelines.serve.replica import AgentCore, ReplicaSettings

    agent = AgentConfig(gates=True, template="gated", chunk_size=16, memory_budget=8, final_budget=4)
    settings = ReplicaSettings("keeper", "", "", EngineConfig(kind="hf"), agent, ServeConfig())
    core = AgentCore(settings, HFEngine(str(keeper_dir)), "keeper")
    document = " ".join(f"Sentence {i} says nothing at all." for i in range(6))
    n = len(codec.encode(document)) // 16 + 1

    async def run():
        body = {"question": "What is the code?", "document": document}
        events = [e async for e in core.answer_events(body)]
        return await core.answer(body), events, await core.answer_row({"id": "r", "doc_id": None, **body})

    reply, events, row = asyncio.run(run())
    assert reply.status == 200 and (reply.body["chunks_read"], reply.body["memory_updates"]) == (n, 0)
    assert reply.body["exit_chunk"] is None
    assert [e["event"] for e in events] == ["start"] + ["kept"] * n + ["answer"]
    assert all(e["memory"] == GATED.initial_memory for e in events[1:-1])
    assert (row.chunks_read, row.memory_updates, row.exit_chunk, row.error) == (n, 0, None, None)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("MEMAGENT_TEST_VLLM_GATES"),
                    reason="starts a vLLM engine of its own (~2 min on 2 cores, beyond CI's budget); "
                           "MEMAGENT_TEST_VLLM_GATES=1 runs it")
def test_vllm_ends_a_kept_turn_at_its_first_token(tmp_path, tokenizer, codec):
    """vLLM ends a turn whose first token is EOS with that token alone; its CPU attention needs
    head_dim 64, so the keeper is built wider."""
    from pipelines.engine.config import EngineConfig
    from pipelines.engine.vllm_engine import VLLMEngine

    newline = codec.encode_user("x")[-1]
    model = scripted_llama(tmp_path / "keeper", tokenizer, [newline, tokenizer.eos_token_id], 128, 2)
    cfg = EngineConfig(dtype="float32", max_model_len=1024, max_num_seqs=4, cpu_kvcache_gib=1)

    async def run():
        engine = VLLMEngine(str(model), cfg)  # inside the loop: its async state belongs to it
        try:
            return await run_gated_async(engine, codec)
        finally:
            await engine.close()

    check_kept(asyncio.run(run()), codec)


def test_a_rollout_that_exits_pays_less_turn_cost_and_counts_what_it_left(tmp_path, tokenizer, codec):
    """WorkerCore on a model scripted to answer "[EXIT]": the first chunk's turn ends the reading."""
    from pipelines.engine.hf_engine import HFEngine
    from pipelines.rollout.core import RolloutSpec, WorkerCore
    from pipelines.rollout.schedule import GroupTask
    from tests.rollout.helpers import needle_row

    newline = codec.encode_user("x")[-1]
    model = scripted_llama(tmp_path / "exiter", tokenizer, [newline, *codec.encode(EXIT), tokenizer.eos_token_id])
    agent = AgentConfig(gates=True, template="gated", chunk_size=32, memory_budget=8, final_budget=8)
    core = WorkerCore(HFEngine(str(model)), agent, loops=2)
    row = needle_row(0, 4)
    row = type(row)(**{**row.__dict__, "doc_tokens": len(codec.encode(row.context))})
    group = asyncio.run(core.run_group(GroupTask("n0#1", row, 1), RolloutSpec(temperature=0.0, turn_cost=0.25)))
    (t,) = group.trajectories
    assert [x.gate for x in t.turns] == ["exited", "final"] and t.memory == [GATED.initial_memory]
    assert (t.chunks_read, t.exit_chunk, t.chunks_unread) == (1, 1, -(-row.doc_tokens // 32) - 1)
    assert t.reward == -0.25 and t.accuracy == 0.0  # the answer "[EXIT]" boxes nothing
