"""The two baselines measured beside the memory agent, as pure prompt builders.

- truncation (the paper's no-memory ablation): one turn that sees the question and as many
  document tokens as fit the window; the rest is cut from the middle (head and tail kept,
  as LongBench does), because answers sit anywhere in the document.
- full: the same prompt with the whole document, only where it fits the window.

Documents arrive as a chunk stream; truncation keeps at most `keep` tokens in memory.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from pipelines.agent.codec import ChatCodec

DIRECT = """You are presented with a problem and an article that may contain the answer to the problem. Please read the article carefully and answer the problem based on it, and put the answer in \\boxed{{}}.

<problem> 
{prompt}
</problem>

<article>
{context}
</article>

Your answer:
"""
MARGIN = 8  # tokens of slack: decoding a cut and re-encoding it can grow by a token or two


def head_tail(chunks: Iterable[list[int]], keep: int) -> tuple[list[int], int]:
    """(at most `keep` ids: the first keep//2 and the last keep - keep//2, total seen)."""
    head_n = keep // 2
    head: list[int] = []
    tail: deque[int] = deque(maxlen=keep - head_n)
    total = 0
    for ids in chunks:
        total += len(ids)
        room = head_n - len(head)
        head.extend(ids[:room] if room > 0 else [])
        tail.extend(ids[max(room, 0):])
    return head + list(tail), total


def direct_overhead(codec: ChatCodec, question: str) -> int:
    """Tokens the direct prompt costs without any document."""
    return len(codec.encode_user(DIRECT.format(prompt=question, context=""))) + MARGIN


def context_room(codec: ChatCodec, question: str, window: int, answer_budget: int) -> int:
    return window - answer_budget - direct_overhead(codec, question)


def direct_prompt(codec: ChatCodec, question: str, doc_ids: list[int]) -> list[int]:
    return codec.encode_user(DIRECT.format(prompt=question, context=codec.decode(doc_ids)))
