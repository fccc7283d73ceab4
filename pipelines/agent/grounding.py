"""Grounded memory: every number a memory states was read by the turn that wrote it.

A memory turn sees the question, the previous memory and one chunk (its prompt). A number (a
whole digit run) its new memory states that the prompt does not hold was invented, or cut short
("1185" for 1185699). RL on 2-4 chunk documents taught SmolLM2 to write the question's needle
sentence with an invented number ("... for rich-tower is: 2.") before reading the needle: short
documents forgive it, long ones do not (the memory keeps it, and the real needle, 58 chunks later,
is passed over). Two uses:

- counted (every loop: `AgentResult.ungrounded`, rollouts' `ungrounded`, eval records), and in
  RL priced (`learn.ground_cost`, pipelines.rollout.rewards);
- with `agent.grounded`, dropped: the loop keeps only the sentences of a memory write that state no
  invented number, and when none is left the memory stays as it was (a kept turn). The model's
  text is untouched in the turn's record; only the memory the next turn sees changes.
"""

from __future__ import annotations

import re

_NUMBER = re.compile(r"\d+")
# A sentence ends at . ! or ? followed by whitespace, or at a line break ("3.5" stays whole).
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def invented_numbers(prompt: str, memory: str) -> set[str]:
    """The numbers `memory` states that its turn's `prompt` does not hold."""
    return set(_NUMBER.findall(memory)) - set(_NUMBER.findall(prompt))


def grounded(prompt: str, memory: str) -> str | None:
    """`memory` without its sentences that state a number `prompt` does not hold; None when no
    sentence is left (the caller keeps the previous memory)."""
    read = set(_NUMBER.findall(prompt))
    if set(_NUMBER.findall(memory)) <= read:
        return memory
    kept = [s for s in _SENTENCE_END.split(memory) if s.strip() and set(_NUMBER.findall(s)) <= read]
    return " ".join(s.strip() for s in kept) or None
