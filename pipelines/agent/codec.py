"""The two tokenizer operations the loop needs, over any HF-style tokenizer."""

from __future__ import annotations

from typing import Any


class ChatCodec:
    """Renders one user turn with the model's chat template and tokenizes it."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self.has_chat_template = bool(getattr(tokenizer, "chat_template", None))

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def render_chat(self, messages: list[dict]) -> str:
        if not self.has_chat_template:
            return "\n\n".join(m["content"] for m in messages) + "\n"
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def encode_chat(self, messages: list[dict]) -> list[int]:
        return self.encode(self.render_chat(messages))

    def encode_user(self, text: str) -> list[int]:
        return self.encode_chat([{"role": "user", "content": text}])
