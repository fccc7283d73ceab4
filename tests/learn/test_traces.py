"""SFT memory traces from task evidence: no Ray, the real SmolLM2 tokenizer, rows from the real builders."""

from __future__ import annotations

import re

import pytest

from pipelines.agent import Response, get_templates
from pipelines.agent.codec import ChatCodec
from pipelines.agent.loop import AgentLoop, LoopLimits
from pipelines.errors import UserError
from pipelines.data.tasks import Evidence, TaskRow, task_chunks
from pipelines.learn.traces import EvidenceReader, Trace, hashed_share, iter_traces, select_memory, sft_trace
from tests.support import built

TEMPLATES = get_templates("release")
LIMITS = LoopLimits(memory_budget=1024, final_budget=64, question_budget=256)
NEEDLE = re.compile(r"One of the special magic numbers for \S+ is: \d+\.")


@pytest.fixture(scope="module")
def codec(tokenizer):
    return ChatCodec(tokenizer)



def run(row: TaskRow, codec: ChatCodec, chunk_size: int, limits: LoopLimits = LIMITS):
    chunks = list(task_chunks(row, None, codec, chunk_size))
    return chunks, sft_trace(row, chunks, codec, TEMPLATES, limits)


def read_so_far(pieces: list[str], read: str) -> list[str]:
    """Each piece read whole, or, where the text read ends inside it, its part read (the rule as
    a reader of the documents states it)."""
    out = []
    for p in pieces:
        cut = [p[:k] for k in range(1, len(p)) if read.endswith(p[:k])]
        out += [p] if p in read else [max(cut, key=len)] if cut else []
    return out


def check_turns(row, chunks, turns, codec, limits=LIMITS):
    """Budgets, EOS, and each memory = the evidence read so far (whole pieces, a cut piece's part
    read, nothing from later chunks)."""
    eos = codec.tokenizer.eos_token_id
    assert len(turns) == len(chunks) + 1 and turns[-1].is_final and not any(t.is_final for t in turns[:-1])
    for k, turn in enumerate(turns[:-1]):
        assert len(turn.response_ids) <= limits.memory_budget and turn.response_ids[-1] == eos
        assert codec.decode(turn.response_ids[:-1]) == turn.text
        read = codec.decode([i for c in chunks[:k + 1] for i in c])
        pieces = [e.text for e in row.evidence]
        if turn.text == TEMPLATES.initial_memory:
            assert not any(p in read for p in pieces)
            continue
        assert all(line in read_so_far(pieces, read) for line in turn.text.split("\n"))
        if limits is LIMITS:  # the budget holds everything: the memory is exactly the pieces read
            assert turn.text.split("\n") == read_so_far(pieces, read)
    final = turns[-1]
    assert len(final.response_ids) <= limits.final_budget and final.response_ids[-1] == eos
    answer = ", ".join(row.answers) if row.answer_kind == "all_of" else row.answers[0]
    assert final.text == f"\\boxed{{{answer}}}" == codec.decode(final.response_ids[:-1])


def test_select_memory_keeps_whole_pieces_earliest_first():
    words = lambda text: len(text.split())  # noqa: E731
    assert select_memory(["a b", "c d e", "f"], 3, words, "none") == "a b\nf"
    assert select_memory(["a b", "c d e", "f"], 5, words, "none") == "a b\nc d e"
    assert select_memory(["a b", "c d e", "f"], 1, words, "none") == "f"
    assert select_memory(["a b"], 1, words, "none") == "none" == select_memory([], 9, words, "none")


def test_reader_counts_a_piece_whole_only_once_all_its_tokens_are_read(codec):
    needle = "One of the special magic numbers for calm-lake is: 4411223."
    text = "The grass is green. " * 10 + needle + " Here we go." * 10
    piece = NEEDLE.search(text).group(0)
    ids = codec.encode(text)
    offset = len(codec.encode(text[:text.index(piece) - 1]))
    n = len(codec.encode(piece))
    reader = EvidenceReader("s", [Evidence(piece, offset)], codec)
    reader.read(ids[:offset + n - 1])  # all but the needle's last token (the final ".")
    assert reader.seen == [piece[:-1]]  # its part read
    reader.read(ids[offset + n - 1:offset + n])
    assert reader.seen == [piece]
    wrong = EvidenceReader("row-9", [Evidence(piece, offset + 40)], codec)
    for i in range(0, len(ids), 16):
        wrong.read(ids[i:i + 16])
    with pytest.raises(UserError, match="^task row 'row-9': evidence 'One of .* not found in its document near token"):
        wrong.finish()


@pytest.mark.parametrize("cut", ["calm-lake is:", "One of the special magic", "One"])
def test_a_needle_cut_by_the_chunk_end_is_kept_as_far_as_read(codec, cut):
    needle = "One of the special magic numbers for calm-lake is: 4411223."
    text = "The grass is green. " * 10 + needle + " Here we go." * 10
    offset = len(codec.encode(text[:text.index(needle) - 1]))
    ids = codec.encode(text)
    end = len(codec.encode(text[:text.index(cut) + len(cut)]))
    reader = EvidenceReader("s", [Evidence(needle, offset)], codec)
    reader.read(ids[:end])
    assert reader.seen == [needle[:needle.index(cut) + len(cut)]]
    reader.read(ids[end:end + 32])
    assert reader.seen == [needle]


@pytest.mark.parametrize("chunk_size", [128, 500])
def test_multikey_memory_holds_the_queried_needle_only(tokenizer, codec, chunk_size):
    for row in built("niah_multikey", tokenizer):
        chunks, turns = run(row, codec, chunk_size)
        check_turns(row, chunks, turns, codec)
        (asked,) = [e.text for e in row.evidence]
        distractors = [n for n in NEEDLE.findall(row.context) if n != asked]
        assert len(distractors) == 3
        assert not any(d in t.text for t in turns for d in distractors)
        assert turns[-2].text == asked and (turns[0].text == TEMPLATES.initial_memory or asked.startswith(turns[0].text))
        assert any(t.text == TEMPLATES.initial_memory for t in turns[:-1]) or row.evidence[0].offset < chunk_size


def test_multivalue_all_values_then_boxed_list(tokenizer, codec):
    (row,) = built("niah_multivalue", tokenizer, n=1)
    chunks, turns = run(row, codec, 256)
    check_turns(row, chunks, turns, codec)
    assert turns[-2].text.split("\n") == [e.text for e in row.evidence] and len(row.evidence) == 4
    assert turns[-1].text == "\\boxed{" + ", ".join(row.answers) + "}"


def test_memory_over_budget_keeps_the_earliest_pieces_that_fit(tokenizer, codec):
    (row,) = built("niah_multivalue", tokenizer, n=1, seed=2)
    first_two = "\n".join(e.text for e in row.evidence[:2])
    limits = LoopLimits(len(codec.encode(first_two)) + 1, 64, 256)  # two pieces and EOS, not three
    chunks, turns = run(row, codec, 200, limits)
    check_turns(row, chunks, turns, codec, limits)
    assert turns[-2].text == first_two
    assert max(len(t.response_ids) for t in turns[:-1]) <= limits.memory_budget


def test_hotpotqa_memory_holds_supporting_facts_read_so_far(tokenizer, codec):
    for row in built("hotpotqa", tokenizer, target=3072):
        chunks, turns = run(row, codec, 300)
        check_turns(row, chunks, turns, codec)
        assert turns[-2].text.split("\n") == [e.text for e in row.evidence] and len(row.evidence) >= 2


def test_final_memory_does_not_depend_on_chunk_size(tokenizer, codec):
    (row,) = built("vt", tokenizer, n=1)
    finals = {run(row, codec, size)[1][-2].text for size in (97, 256, 2048)}
    assert len(finals) == 1 and finals.pop().split("\n") == [e.text for e in row.evidence]


def test_prompts_are_the_agent_loops(tokenizer, codec):
    (row,) = built("niah_single", tokenizer, n=1)
    chunks, turns = run(row, codec, 300)
    loop, memory = AgentLoop(row.question, iter(chunks), codec, TEMPLATES, LIMITS), TEMPLATES.initial_memory
    for k, turn in enumerate(turns):
        req = loop.next_request()
        assert req.is_final == turn.is_final and req.prompt_ids == turn.prompt_ids
        by_hand = (TEMPLATES.final_prompt(row.question, memory) if turn.is_final
                   else TEMPLATES.update_prompt(row.question, memory, codec.decode(chunks[k])))
        assert codec.encode_user(by_hand) == turn.prompt_ids
        loop.feed(Response(turn.response_ids, turn.text))
        memory = turn.text
    assert loop.next_request() is None


def test_deterministic(tokenizer, codec):
    rows, again = built("niah_multiquery", tokenizer), built("niah_multiquery", tokenizer)
    first = list(iter_traces(rows, None, codec, TEMPLATES, LIMITS, 256))
    assert first == list(iter_traces(again, None, codec, TEMPLATES, LIMITS, 256))
    assert [t.turns for t in first] == [run(r, codec, 256)[1] for r in rows]
    records = first[0].records()
    assert [r["turn"] for r in records] == list(range(len(first[0].turns))) and records[-1]["is_final"]


def test_rows_without_evidence_are_refused_naming_them(tokenizer, codec):
    old = TaskRow("old-row-7", "What is x?", ["7"], "one_of", None, "x is 7.", 4, "niah_single", "train")
    with pytest.raises(UserError, match=r"^task row 'old-row-7': no evidence recorded[^\n]*$"):
        list(iter_traces([old], None, codec, TEMPLATES, LIMITS, 64))
    (fwe,) = built("fwe", tokenizer, n=1)
    with pytest.raises(UserError, match=f"^task row '{re.escape(fwe.sample_id)}': no evidence recorded"):
        run(fwe, codec, 256)
    tiny = LoopLimits(3, 64, 256)  # the initial memory alone does not fit
    row = TaskRow("r", "What is x?", ["7"], "one_of", None, "x is 7.", 4, "t", "train", [Evidence("x is 7.", 0)])
    with pytest.raises(UserError, match="^task row 'r': the initial memory takes"):
        run(row, codec, 2, tiny)


def test_store_rows_trace_like_inline_rows(tmp_path, tokenizer, codec, home):
    """A document sliced by the ingest path (whitespace-cut tokenizer calls) keeps its evidence offsets."""
    from dataclasses import replace

    from pipelines.ingest.config import IngestConfig
    from pipelines.ingest.pipeline import ingest
    from pipelines.data.store import ChunkStore

    row = built("niah_multivalue", tokenizer, n=1, seed=4)[0]
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "doc.txt").write_text(row.context)
    cfg = IngestConfig(runner="local", chunk_size=64, batch_chars=2048, piece_chars=1500)
    ingest(str(tmp_path / "c"), str(tmp_path / "s"), cfg, "smollm2", home)
    stored = replace(row, doc_id="doc.txt", context=None)
    (trace,) = iter_traces([stored], ChunkStore(str(tmp_path / "s")), codec, TEMPLATES, LIMITS, 200)
    assert [t.text for t in trace.turns] == [t.text for t in run(row, codec, 200)[1]]


def test_decoys_hold_the_most_question_like_sentence_until_the_evidence_replaces_it(codec):
    """learn.sft_decoys: before the evidence, the memory is the sentence read so far sharing the most
    words with the question (a sentence sharing more comes later and replaces it; one the chunk's
    edge cut never counts; a paragraph's first sentence without its document header); the evidence
    replaces it when read, and stays."""
    filler = " ".join(f"Plain filler sentence number {i} says nothing here." for i in range(30))
    weak = "The river festival happens every spring."
    strong = "The river festival in Oslo was founded by sailors."
    evidence = "The Oslo river festival was founded in 1921 by Karl Berg."
    doc = " ".join([filler, f"\n\nDocument 2:\n{weak}", filler, strong, filler, evidence, filler])
    row = TaskRow("d", "Who founded the Oslo river festival?", ["Karl Berg"], "one_of", None, doc,
                  len(codec.encode(doc)), "squad", "train", (Evidence(evidence, len(codec.encode(doc[:doc.index(evidence)]))),))
    chunks = list(task_chunks(row, None, codec, 128))
    plain = [t.text for t in sft_trace(row, chunks, codec, TEMPLATES, LIMITS)[:-1]]
    turns = sft_trace(row, chunks, codec, TEMPLATES, LIMITS, decoys=True)
    memories = [t.text for t in turns[:-1]]
    read = [codec.decode([i for c in chunks[:k + 1] for i in c]) for k in range(len(chunks))]
    first = {s: next(k for k, r in enumerate(read) if s in r) for s in (weak, strong, evidence)}
    assert first[weak] < first[strong] < first[evidence]
    for k, memory in enumerate(memories):
        want = (TEMPLATES.initial_memory if k < first[weak] else weak if k < first[strong]
                else strong if k < first[evidence] else evidence)
        assert memory == want, (k, memory)
    # without decoys the same row's memory is the initial one until the evidence
    assert plain[:first[evidence]] == [TEMPLATES.initial_memory] * first[evidence] and plain[-1] == evidence
    assert turns[-1].text == "\\boxed{Karl Berg}"


def test_copy_turns_are_thinned_by_hash_and_nothing_else_is(codec):
    """learn.sft_copies: a memory turn writing what the turn before wrote is kept for a fixed share
    of (sample_id, turn) hashes; first writes, replacements and the final turn always stay."""
    row = built("niah_single", codec.tokenizer, n=1, seed=3)[0]
    _, turns = run(row, codec, 64)
    trace = Trace(row.sample_id, turns)
    copies = [i for i in range(len(turns)) if trace.copied(i)]
    others = [i for i in range(len(turns)) if not trace.copied(i)]
    assert copies and others and turns[-1].is_final and len(others) >= 2
    assert [r["turn"] for r in trace.records()] == list(range(len(turns)))
    assert [r["turn"] for r in trace.records(1e-12)] == others
    half = [r["turn"] for r in trace.records(0.5)]
    assert half == [i for i in range(len(turns)) if i in others or hashed_share(f"{row.sample_id}/{i}") < 0.5]
    assert half == [r["turn"] for r in trace.records(0.5)]  # the same turns every time
    # the held-back choice metric's turns: every memory turn but the copies, never the final one
    assert [i for i in range(len(turns)) if trace.chooses(i)] == others[:-1]
