"""The two gates of a memory turn (agent.gates, template "gated"), read from the turn's own text.

Most chunks of a long document change nothing, and once the memory answers the question the
rest of the document changes nothing either (InfMem, GRU-Mem: MEMAGENT.md, "Successors"). So
a gated memory turn may answer

- nothing (an empty reply, KEEP): the memory stays byte-identical. The turn's first token is
  the end-of-turn token, which every engine stops at, so a kept chunk costs the prompt's prefill
  and not one decode step (the first design, a four-token `[KEEP]`, cost three: half the gated
  agent's generated tokens, benchmarks/results/gates-keep/README.md). An empty rewrite is never a
  memory, so nothing is lost;
- a memory ending with `[EXIT]`: that memory (marker stripped) already answers, and the loop
  goes straight to the final turn, leaving the rest of the document unread. `[EXIT]` alone
  writes the memory it was given again and exits;
- any other text: the new memory, as in the ungated loop.

`[EXIT]` is plain text every tokenizer already has (SmolLM2: four ordinary tokens), so any HF
model can learn both gates without new embeddings. The marker anywhere else (followed by text,
cut short, another spelling) is malformed: the text is taken as the memory, as without gates,
and the loop counts it (`gate/malformed`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

KEEP = ""  # the keep: an empty reply (the end-of-turn token alone)
EXIT = "[EXIT]"
# What the exit marker looks like, however mangled: an opening or a closing half, any case, or
# its start cut off by the turn's token budget.
_FRAGMENT = re.compile(r"\[\s*EXIT|EXIT\s*\]|\[EXI?$", re.IGNORECASE)

Action = Literal["kept", "updated", "exited"]


@dataclass(frozen=True)
class Gate:
    action: Action
    memory: str | None  # the memory this turn wrote; None: the memory stays as it was
    malformed: bool = False


def read_gate(text: str) -> Gate:
    """What a gated memory turn's text asks for."""
    body = text.strip()
    if body == KEEP:
        return Gate("kept", None)
    if body.endswith(EXIT):
        head = body[:-len(EXIT)].rstrip()
        if not _FRAGMENT.search(head):
            return Gate("exited", head or None)
    return Gate("updated", body, malformed=bool(_FRAGMENT.search(body)))


def ungated(text: str) -> Gate:
    """The ungated loop's reading: the text is the new memory, markers or not."""
    return Gate("updated", text.strip())
