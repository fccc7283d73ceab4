"""Prompt template sets. `release` is byte-exact with the released RL-MemoryAgent checkpoints.

Each turn is its own user message inside the model's chat template; no turn sees another
turn's transcript, only the memory text. Note the trailing space after `<problem>`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipelines.errors import UserError

INITIAL_MEMORY = "No previous memory"

RELEASE_UPDATE = """You are presented with a problem, a section of an article that may contain the answer to the problem, and a previous memory. Please read the provided section carefully and update the memory with the new information that helps to answer the problem. Be sure to retain all relevant details from the previous memory while adding any new, useful information.

<problem> 
{prompt}
</problem>

<memory>
{memory}
</memory>

<section>
{chunk}
</section>

Updated memory:
"""

RELEASE_FINAL = """You are presented with a problem and a previous memory. Please answer the problem based on the previous memory and put the answer in \\boxed{{}}.

<problem> 
{prompt}
</problem>

<memory>
{memory}
</memory>

Your answer:
"""


@dataclass(frozen=True)
class TemplateSet:
    name: str
    update: str
    final: str
    initial_memory: str = INITIAL_MEMORY

    def update_prompt(self, question: str, memory: str, chunk: str) -> str:
        return self.update.format(prompt=question, memory=memory, chunk=chunk)

    def final_prompt(self, question: str, memory: str) -> str:
        return self.final.format(prompt=question, memory=memory)


TEMPLATE_SETS: dict[str, TemplateSet] = {
    "release": TemplateSet("release", RELEASE_UPDATE, RELEASE_FINAL),
}


def get_templates(name: str) -> TemplateSet:
    try:
        return TEMPLATE_SETS[name]
    except KeyError:
        known = ", ".join(sorted(TEMPLATE_SETS))
        raise UserError(f"template set '{name}': unknown (known: {known})") from None
