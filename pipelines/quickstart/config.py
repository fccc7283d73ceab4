"""The `quickstart:` config section: the sizes of each stage (configs/quickstart.yaml sets them,
the tests shrink them)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from pipelines.learn.config import LearnConfig
from pipelines.typed import Strict


class QuickstartConfig(Strict):
    task: str = "niah_single"
    # Needles in Paul Graham's essays (real text whose sentences look like the needle's neighbours),
    # or RULER's repeated noise sentences (the easy case).
    haystack: Literal["essay", "noise"] = "essay"
    train_lengths: str = "512,768,1024"  # training documents: 2-4 chunks at agent.chunk_size 256
    train_n: int = Field(64, gt=0)  # train rows per length
    heldout_length: str = "1K"
    heldout_n: int = Field(24, gt=0)  # held-out questions scored before and after training
    batch_n: int = Field(8, gt=0)  # held-out questions answered by the batch job through Serve
    registry_name: str = "memagent-quickstart"
    # learn.* settings of each training stage over the config's learn section, e.g. {lr: 3e-4}.
    sft: dict[str, Any] = {}
    rl: dict[str, Any] = {}

    @field_validator("sft", "rl")
    @classmethod
    def _learn_keys(cls, v: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(v) - set(LearnConfig.model_fields))
        if unknown:
            raise ValueError(f"not a learn setting: {', '.join(unknown)}")
        return v
