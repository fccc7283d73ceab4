"""Grounded memory (pipelines.agent.grounding): a memory write that states a number its turn did not
read is counted in every loop, and a grounded loop (agent.grounded) drops those sentences."""

from __future__ import annotations

from pipelines.agent import Response, get_templates
from pipelines.agent.codec import ChatCodec
from pipelines.agent.grounding import grounded, invented_numbers
from pipelines.agent.loop import AgentLoop, LoopLimits

QUESTION = "What is the special magic number for rich-tower mentioned in the provided text?"
NEEDLE = "One of the special magic numbers for rich-tower is: 6246763."
INVENTED = "One of the special magic numbers for rich-tower is: 2."


def test_invented_numbers_by_hand():
    before = f"{QUESTION}\nNo previous memory\nHe wrote 3 essays in 1997."
    assert invented_numbers(before, INVENTED) == {"2"}
    assert invented_numbers(before, "No previous memory") == set()
    assert invented_numbers(before, "He wrote 3 essays in 1997.") == set()  # read in the chunk
    at = f"{QUESTION}\nNo previous memory\n{NEEDLE}"
    assert invented_numbers(at, NEEDLE) == set()
    assert invented_numbers(at, "One of the special magic numbers for rich-tower is: 6246.") == {"6246"}  # cut short
    after = f"{QUESTION}\n{NEEDLE}\nAn essay chunk with no numbers."
    assert invented_numbers(after, NEEDLE) == set()  # kept from the previous memory


def test_grounded_drops_only_the_sentences_that_invent():
    read = f"{QUESTION}\nNo previous memory\nHe wrote 3 essays in 1997. Pi is 3.14 here."
    assert grounded(read, "He wrote 3 essays in 1997.") == "He wrote 3 essays in 1997."  # nothing invented: as is
    assert grounded(read, f"He wrote 3 essays. {INVENTED}") == "He wrote 3 essays."
    assert grounded(read, f"{INVENTED}\nPi is 3.14 here!") == "Pi is 3.14 here!"  # "3.14": one sentence
    assert grounded(read, INVENTED) is None  # nothing left: the caller keeps the memory it had
    assert grounded(read, "Pi is 3.15 here.") is None


def drive(loop: AgentLoop, codec: ChatCodec, writes: list[str]) -> None:
    while (req := loop.next_request()) is not None:
        text = writes[req.turn] if not req.is_final else "\\boxed{6246763}"
        ids = codec.encode(text)[: req.max_tokens]
        loop.feed(Response(ids, codec.decode(ids)))


def test_a_grounded_loop_keeps_its_memory_free_of_invented_numbers(tokenizer):
    """Chunk 1 is essay text, chunk 2 the needle: the model writes the needle sentence with an
    invented number at chunk 1. Counted either way; grounded, the memory stays as it was until the
    needle is read, and the turn's record keeps the model's own text."""
    codec = ChatCodec(tokenizer)
    chunks = [codec.encode("Startups are odd. Most of them fail."), codec.encode(NEEDLE)]
    writes = [INVENTED, NEEDLE]
    limits = LoopLimits(memory_budget=32, final_budget=16, question_budget=64)
    plain = AgentLoop(QUESTION, iter(chunks), codec, get_templates("release"), limits)
    drive(plain, codec, writes)
    assert plain.result().memory == [INVENTED, NEEDLE] and plain.result().ungrounded == 1
    loop = AgentLoop(QUESTION, iter(chunks), codec, get_templates("release"), limits, grounded=True)
    drive(loop, codec, writes)
    result = loop.result()
    assert result.memory == [get_templates("release").initial_memory, NEEDLE] and result.ungrounded == 1
    assert codec.decode(result.turns[0].response_ids) == INVENTED
