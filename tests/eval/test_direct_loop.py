"""The one-turn baselines' sans-IO loop driven by hand: no engine, no Ray."""

import pytest

from pipelines.agent.chunking import iter_chunks
from pipelines.agent.codec import ChatCodec
from pipelines.agent import Response
from pipelines.agent.direct import DirectLoop, context_room
from pipelines.errors import UserError

QUESTION = "Which word comes last?"


def doc(tokenizer, n_tokens):
    words = " ".join(f"w{i}" for i in range(2000))
    return tokenizer.encode(words, add_special_tokens=False)[:n_tokens]


def make(tokenizer, n_tokens, window=400, full=False):
    codec = ChatCodec(tokenizer)
    ids = doc(tokenizer, n_tokens)
    return DirectLoop(QUESTION, list(iter_chunks([ids], 64)), codec, window, 16, full, keep_ids=True), codec, ids


def test_truncation_keeps_head_and_tail_within_the_window(tokenizer):
    loop, codec, ids = make(tokenizer, 1000)
    room = context_room(codec, QUESTION, 400, 16)
    req = loop.next_request()
    assert req.is_final and req.turn == 0 and req.max_tokens == 16
    assert len(req.prompt_ids) + req.max_tokens <= 400
    prompt = codec.decode(req.prompt_ids)
    assert codec.decode(ids[: room // 2]) in prompt and codec.decode(ids[-(room - room // 2):]) in prompt
    assert codec.decode(ids[room // 2: room // 2 + 20]) not in prompt  # the middle is cut
    assert loop.progress.truncated
    answer = codec.encode("it is \\boxed{w9}")
    loop.feed(Response(answer, "it is \\boxed{w9}", "stop", [-0.1] * len(answer)))
    assert loop.next_request() is None and loop.done
    result = loop.result()
    assert (result.doc_tokens, result.n_turns, result.memory, result.prediction) == (1000, 1, [], "w9")
    [conv] = result.turns
    assert conv.is_final and conv.prompt_ids == req.prompt_ids and conv.response_ids == answer


def test_full_reads_the_whole_document_when_it_fits(tokenizer):
    loop, codec, ids = make(tokenizer, 100, full=True)
    req = loop.next_request()
    assert codec.decode(ids) in codec.decode(req.prompt_ids) and not loop.progress.truncated
    loop.feed(Response([], ""))
    assert loop.result().prediction is None and loop.result().doc_tokens == 100


def test_full_refuses_a_document_beyond_the_window(tokenizer):
    loop, codec, _ = make(tokenizer, 1000, full=True)
    room = context_room(codec, QUESTION, 400, 16)
    with pytest.raises(UserError, match=f"^exceeds window: 1000 document tokens > {room} that fit$"):
        loop.next_request()


def test_bad_inputs_and_request_sequence(tokenizer):
    codec = ChatCodec(tokenizer)
    with pytest.raises(UserError, match="question: empty"):
        DirectLoop(" ", [[1]], codec, 400, 16)
    with pytest.raises(UserError, match="window 100: too small"):
        DirectLoop(QUESTION, [[1]], codec, 100, 16)
    with pytest.raises(UserError, match="document: empty"):
        DirectLoop(QUESTION, [], codec, 400, 16).next_request()
    loop, _, _ = make(tokenizer, 50)
    with pytest.raises(RuntimeError, match="before the answer"):
        loop.result()
    loop.next_request()
    with pytest.raises(RuntimeError, match="twice"):
        loop.next_request()
    with pytest.raises(RuntimeError, match="max_tokens"):
        loop.feed(Response(list(range(17)), "x"))
