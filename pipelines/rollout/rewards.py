"""The reward of one rollout: the training verifier for the row's answer kind by default
(pipelines.agent.reward.default_reward), or any user callable.

A reward is `f(response: str, answers: list[str]) -> float` (pipelines.agent.reward). The
config names a user reward by dotted path so that every worker process can import it. An
optional cost per chunk read (`learn.turn_cost`) is subtracted from it: with gates, reading on
after the memory already answers then costs reward (GRU-Mem rewards its exit gate likewise). So is
an optional cost per ungrounded memory turn (`learn.ground_cost`): one whose memory states a number
its prompt (the question, the previous memory and the chunk: all the turn has read) does not hold
(pipelines.agent.grounding, which says why).
"""

from __future__ import annotations

import importlib
import math

from pipelines.agent.reward import Reward, default_reward
from pipelines.errors import UserError


def load_reward(path: str | None) -> Reward | None:
    """The callable named by 'module:function' or 'module.function'; None for the default."""
    if not path:
        return None
    module, sep, name = path.partition(":") if ":" in path else path.rpartition(".")
    if not sep or not module or not name:
        raise UserError(f"rollout.reward '{path}': expected 'module:function'")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise UserError(f"rollout.reward '{path}': cannot import ({e.__class__.__name__}: {e})") from None
    if not callable(fn):
        raise UserError(f"rollout.reward '{path}': not callable")
    return fn


def compute_reward(fn: Reward | None, response: str, answers: list[str], answer_kind: str,
                   sample_id: str) -> float:
    value = float((fn or default_reward(answer_kind))(response, list(answers)))
    if math.isnan(value):
        raise UserError(f"sample '{sample_id}': reward is NaN")
    return value


def with_costs(value: float, *, turn_cost: float = 0.0, chunks_read: int = 0, ground_cost: float = 0.0,
               ungrounded: int = 0) -> float:
    """The answer's reward less turn_cost per chunk read and ground_cost per ungrounded memory
    turn (both 0: the paper's reward, unchanged)."""
    return value - turn_cost * chunks_read - ground_cost * ungrounded
