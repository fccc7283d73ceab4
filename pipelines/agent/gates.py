"""The two gates of a memory turn (agent.gates, template "gated"), read from the turn's own text.

Most chunks of a long document change nothing, and once the memory answers the question the
rest of the document changes nothing either (InfMem, GRU-Mem: MEMAGENT.md, "Successors"). So
a gated memory turn may answer

- `[KEEP]` alone: the memory stays byte-identical. The engine stops at the marker (a stop
  string), so a kept chunk costs a few generated tokens instead of a whole rewrite;
- a memory ending with `[EXIT]`: that memory (marker stripped) already answers, and the loop
  goes straight to the final turn, leaving the rest of the document unread. `[EXIT]` alone
  writes the memory it was given again and exits;
- any other text: the new memory, as in the ungated loop.

The markers are plain text every tokenizer already has (SmolLM2: four ordinary tokens each),
so any HF model can learn them without new embeddings. A marker anywhere else (followed by
text, `[KEEP]` beside a memory, a marker cut short, another spelling) is malformed: the text
is taken as the memory, as without gates, and the loop counts it (`gate/malformed`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

KEEP = "[KEEP]"
EXIT = "[EXIT]"
# What a marker looks like, however mangled: an opening or a closing half, any case, or a
# marker's start cut off by the turn's token budget.
_FRAGMENT = re.compile(r"\[\s*(?:KEEP|EXIT)|(?:KEEP|EXIT)\s*\]|\[(?:KEE?|EXI?)$", re.IGNORECASE)

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
