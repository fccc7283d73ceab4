import pytest

from pipelines.agent.chunking import iter_chunks, iter_token_blocks, n_turns, split_at_whitespace


@pytest.mark.parametrize("n,size,expected", [
    (12, 4, [4, 4, 4]),        # exact multiple: no empty trailing chunk
    (13, 4, [4, 4, 4, 1]),     # last partial chunk
    (3, 4, [3]),               # shorter than one chunk
    (0, 4, []),
])
def test_chunk_boundaries(n, size, expected):
    ids = list(range(n))
    chunks = list(iter_chunks([ids], size))
    assert [len(c) for c in chunks] == expected
    assert [i for c in chunks for i in c] == ids


def test_chunks_across_uneven_blocks():
    blocks = [[1, 2, 3], [], [4], [5, 6, 7, 8, 9]]
    assert list(iter_chunks(blocks, 2)) == [[1, 2], [3, 4], [5, 6], [7, 8], [9]]


def test_turns_formula():
    assert n_turns(20000, 4096) == 5 + 1
    assert n_turns(8192, 4096) == 2 + 1


def test_split_at_whitespace():
    assert split_at_whitespace("hello big world") == ("hello big", " world")
    assert split_at_whitespace("nospace") == ("", "nospace")
    assert split_at_whitespace("a b  ") == ("a", " b  ")


def test_streamed_tokenization_matches_whole(tokenizer):
    text = ("The quick brown fox jumps over the lazy dog. " * 50 + "Numbers 12345 and\nnew lines.\n") * 20
    whole = tokenizer.encode(text, add_special_tokens=False)
    blocks = [text[i:i + 997] for i in range(0, len(text), 997)]
    enc = lambda s: tokenizer.encode(s, add_special_tokens=False)  # noqa: E731
    streamed = [i for b in iter_token_blocks(blocks, enc) for i in b]
    assert tokenizer.decode(streamed) == text
    assert streamed == whole
