"""Prompt template sets. `release` is byte-exact with the released RL-MemoryAgent checkpoints;
`gated` is the same text with the update prompt explaining the keep and exit markers
(pipelines.agent.gates), for agents run with `agent.gates=true`.

Each turn is its own user message inside the model's chat template; no turn sees another
turn's transcript, only the memory text. Note the trailing space after `<problem>`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipelines.agent.gates import EXIT
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

# The release's update prompt, with one paragraph after its instructions on the two gates.
GATED_UPDATE = RELEASE_UPDATE.replace("useful information.\n\n", f"""useful information.

If the section adds nothing that helps to answer the problem, reply with nothing at all and the memory stays as it is. If the updated memory already answers the problem, end it with {EXIT} and the reading stops there.

""", 1)


@dataclass(frozen=True)
class TemplateSet:
    name: str
    update: str
    final: str
    initial_memory: str = INITIAL_MEMORY
    gated: bool = False  # the update prompt explains the keep/exit markers: for agent.gates=true only

    def update_prompt(self, question: str, memory: str, chunk: str) -> str:
        return self.update.format(prompt=question, memory=memory, chunk=chunk)

    def final_prompt(self, question: str, memory: str) -> str:
        return self.final.format(prompt=question, memory=memory)


TEMPLATE_SETS: dict[str, TemplateSet] = {
    "release": TemplateSet("release", RELEASE_UPDATE, RELEASE_FINAL),
    "gated": TemplateSet("gated", GATED_UPDATE, RELEASE_FINAL, gated=True),
}


def get_templates(name: str) -> TemplateSet:
    try:
        return TEMPLATE_SETS[name]
    except KeyError:
        known = ", ".join(sorted(TEMPLATE_SETS))
        raise UserError(f"template set '{name}': unknown (known: {known})") from None


def check_gates(gates: bool, template: str) -> None:
    """The loop reads markers only with gates on, and only a gated template teaches them: the two
    settings must agree (a template not known here is refused later, by get_templates)."""
    known = TEMPLATE_SETS.get(template)
    if known is None or known.gated == gates:
        return
    if gates:
        gated = ", ".join(sorted(n for n, t in TEMPLATE_SETS.items() if t.gated))
        raise UserError(f"agent.gates=true with agent.template='{template}': that template has no keep/exit "
                        f"markers (the released checkpoints' format); use agent.template={gated}")
    raise UserError(f"agent.gates=false with agent.template='{template}': that template asks for keep/exit "
                    f"markers the loop would then keep as memory text; set agent.gates=true or agent.template=release")
