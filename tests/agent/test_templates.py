import re
from pathlib import Path

import pytest

from pipelines.agent.templates import RELEASE_FINAL, RELEASE_UPDATE, get_templates
from pipelines.errors import UserError

DOC = Path(__file__).resolve().parents[3] / "shared" / "docs" / "MEMAGENT.md"


def doc_blocks() -> list[str]:
    text = DOC.read_text()
    section = text.split("## Prompt format of the released checkpoints", 1)[1].split("## Budgets", 1)[0]
    return re.findall(r"```\n(.*?)```", section, flags=re.S)


@pytest.mark.skipif(not DOC.exists(), reason="shared/docs/MEMAGENT.md not beside the repo")
def test_release_templates_byte_exact_with_memagent_md():
    update, final = doc_blocks()
    assert RELEASE_UPDATE == update
    assert RELEASE_FINAL.format(prompt="{prompt}", memory="{memory}") == final


def test_release_template_details():
    t = get_templates("release")
    text = t.update_prompt("Q?", "M", "C")
    assert "<problem> \nQ?\n</problem>" in text  # trailing space after <problem>
    assert text.endswith("<section>\nC\n</section>\n\nUpdated memory:\n")
    final = t.final_prompt("Q?", "M")
    assert "put the answer in \\boxed{}." in final
    assert final.endswith("<memory>\nM\n</memory>\n\nYour answer:\n")
    assert t.initial_memory == "No previous memory"


def test_unknown_template_set_is_named():
    with pytest.raises(UserError, match="template set 'nope'"):
        get_templates("nope")


@pytest.mark.skipif(not DOC.exists(), reason="shared/docs/MEMAGENT.md not beside the repo")
def test_gates_off_the_loop_sends_the_release_text(tokenizer):
    """The default agent config (gates off) sends MEMAGENT.md's text, byte for byte, with no stop string."""
    from pipelines.agent import AgentConfig, Response, make_loop
    from pipelines.agent.codec import ChatCodec

    update, final = doc_blocks()
    codec = ChatCodec(tokenizer)
    chunk = codec.encode("Some section text.")
    loop = make_loop("Q?", [chunk], codec, AgentConfig())
    req = loop.next_request()
    sent = update.replace("{prompt}", "Q?").replace("{memory}", "No previous memory").replace(
        "{chunk}", codec.decode(chunk))
    assert req.prompt_ids == codec.encode_user(sent)
    loop.feed(Response(codec.encode("M"), "M"))
    req = loop.next_request()
    assert req.is_final and req.prompt_ids == codec.encode_user(final.replace("{prompt}", "Q?").replace("{memory}", "M"))
