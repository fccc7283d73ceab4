"""A trained model carries the agent settings it was trained with.

A model trained with chunks of 256 tokens and a 64-token memory answers worse when run with
others it never saw. Training writes its agent section into the model folder (memagent.json,
so the file travels with the folder to S3 and into the registry); `ask`, `serve`, `batch` and
`eval` run a model with its own settings unless the command line names an `agent.` key, and
say so on stderr.
"""

from __future__ import annotations

import json
from pathlib import Path

from pipelines.agent.config import AgentConfig

SETTINGS_FILE = "memagent.json"
# What a model's training fixed: the prompt format, what one turn reads and may write, the gates.
TRAINED = ("template", "chunk_size", "memory_budget", "final_budget", "question_budget", "gates")


def stamp(model_uri: str, agent: AgentConfig) -> None:
    """Write the agent settings a model was trained with into its folder (local or s3://)."""
    from pipelines.storage import write_whole

    settings = {"agent": {k: getattr(agent, k) for k in TRAINED}}
    write_whole(f"{model_uri.rstrip('/')}/{SETTINGS_FILE}", (json.dumps(settings, indent=1) + "\n").encode())


def trained_agent(model_dir: Path) -> dict | None:
    """The agent settings a model folder records, or None (a base model, or one trained before)."""
    try:
        own = json.loads((Path(model_dir) / SETTINGS_FILE).read_text()).get("agent")
    except (OSError, ValueError, AttributeError):
        return None
    return {k: v for k, v in own.items() if k in TRAINED} if isinstance(own, dict) else None


def overridden(overrides: list[str]) -> set[str]:
    """The agent keys the command line sets (`agent.chunk_size=512` -> chunk_size)."""
    keys = (item.split("=", 1)[0].strip() for item in overrides)
    return {k.removeprefix("agent.") for k in keys if k.startswith("agent.")}


def adopt(agent: AgentConfig, own: dict | None, overrides: list[str]) -> tuple[AgentConfig, dict]:
    """The agent section to run with: the model's own settings over the config's, the command
    line's over both; and what the model's changed."""
    if not own:
        return agent, {}
    keep = overridden(overrides)
    changed = {k: v for k, v in own.items() if k not in keep and getattr(agent, k) != v}
    return (AgentConfig.model_validate({**agent.model_dump(), **changed}) if changed else agent), changed


def with_model_settings(cfg, model_dir: Path, overrides: list[str]):
    """cfg with the agent settings of the model in `model_dir` (config_model_dir's) adopted; one line
    on stderr when they differ from the config's."""
    from pipelines import logs

    agent, changed = adopt(cfg.agent, trained_agent(model_dir), overrides)
    if changed:
        shown = ", ".join(f"{k} {v}" for k, v in changed.items())
        print(f"agent settings: the model's own ({shown}; from {model_dir}/{SETTINGS_FILE}); "
              "agent.KEY=VALUE on the command line overrides them", file=logs.console(), flush=True)
    return cfg.model_copy(update={"agent": agent})


def version_tags(model_dir: Path) -> dict[str, str]:
    """A registered version's tags for the settings its folder records."""
    return {f"agent.{k}": str(v) for k, v in (trained_agent(model_dir) or {}).items()}
