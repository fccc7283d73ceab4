"""The window budget: the longest turn the memory agent sends must fit engine.max_model_len.

A memory turn's prompt is the update template (inside the model's chat template) holding
the question, the memory and one chunk; its output is the new memory. The final turn holds
no chunk and writes the answer. So the bound counted is

    template + question_budget + memory_budget + chunk_size + max(memory_budget, final_budget)

An engine that gets a longer prompt refuses it at the first long document, hours into a run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipelines.config import Config
from pipelines.errors import UserError
from pipelines.models.refs import kind_of
from pipelines.models.store import store_dir


@dataclass(frozen=True)
class TemplateCount:
    """Fixed tokens of a template set's longest prompt (fields empty) inside a chat template with
    its default system prompt. Qwen2.5 (151,643 BPE tokens) is the paper's and the released
    checkpoints' tokenizer, rarely on the machine that checks a cluster config; a model whose
    tokenizer is on this machine is counted with it instead. SmolLM2's count is kept beside it
    (tests re-measure it, so an edited template cannot leave a stale constant)."""

    qwen: int
    smollm2: int  # measured with SmolLM2-135M-Instruct's tokenizer and chat template
    qwen_measured: bool  # False: estimated (no Qwen2.5 tokenizer where it was added)


TEMPLATE_TOKENS = {
    "release": TemplateCount(qwen=116, smollm2=132, qwen_measured=True),
    # Qwen2.5 estimated: SmolLM2's 181 less the 16 tokens by which Qwen2.5's chat template and system
    # prompt are shorter on the release set (132 - 116); the gated text's own tokens taken as equal.
    "gated": TemplateCount(qwen=165, smollm2=181, qwen_measured=False),
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


@dataclass(frozen=True)
class WindowBudget:
    parts: dict[str, int]  # template, question, memory, chunk, output
    limit: int
    template_source: str

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    @property
    def fits(self) -> bool:
        return self.total <= self.limit

    def line(self) -> str:
        p = self.parts
        sums = (f"template {p['template']} + question {p['question']} + memory {p['memory']} + chunk {p['chunk']}"
                f" + output {p['output']} = {self.total}")
        return (f"window: {sums} {'<=' if self.fits else '>'} engine.max_model_len={self.limit} "
                f"(template counted {self.template_source}; output: the longer of agent.memory_budget "
                f"and agent.final_budget)")

    def summary(self) -> dict:
        return {"parts": self.parts, "total": self.total, "limit": self.limit, "fits": self.fits,
                "template_source": self.template_source}


def local_tokenizer_dir(cfg: Config) -> Path | None:
    """The model's folder if it is on this machine already; nothing is fetched or imported."""
    ref = cfg.model.path
    kind = kind_of(ref)
    if kind == "store":
        folder = store_dir(cfg.home_path) / ref
    elif kind == "s3":
        folder = cfg.home_path / "cache" / "s3" / ref[len("s3://"):].strip("/")
    elif kind == "folder":
        folder = Path(ref).expanduser()
    else:  # a registry version: only its server knows which folder
        return None
    return folder if any((folder / f).is_file() for f in TOKENIZER_FILES) else None


def template_tokens(cfg: Config) -> tuple[int, str]:
    """(tokens, how counted): with the model's own tokenizer where it is local, else the constant."""
    from pipelines.agent.templates import get_templates

    templates = get_templates(cfg.agent.template)
    folder = local_tokenizer_dir(cfg)
    if folder is None:
        if templates.name not in TEMPLATE_TOKENS:
            raise UserError(f"agent.template '{templates.name}': no token count (TEMPLATE_TOKENS in "
                            f"pipelines/cluster/window.py) and the model's tokenizer is not on this machine")
        count = TEMPLATE_TOKENS[templates.name]
        if count.qwen_measured:
            return count.qwen, f"as measured for '{templates.name}' with Qwen2.5's tokenizer"
        return count.qwen, (f"as estimated for '{templates.name}' with Qwen2.5's tokenizer (not measured; "
                            f"SmolLM2's measures {count.smollm2})")
    from transformers import AutoTokenizer

    from pipelines.agent.codec import ChatCodec

    codec = ChatCodec(AutoTokenizer.from_pretrained(folder))
    prompts = (templates.update_prompt("", "", ""), templates.final_prompt("", ""))
    return max(len(codec.encode_user(p)) for p in prompts), f"with the tokenizer in {folder}"


def window_budget(cfg: Config) -> WindowBudget:
    a = cfg.agent
    template, source = template_tokens(cfg)
    parts = {"template": template, "question": a.question_budget, "memory": a.memory_budget,
             "chunk": a.chunk_size, "output": max(a.memory_budget, a.final_budget)}
    return WindowBudget(parts, cfg.engine.max_model_len, source)
