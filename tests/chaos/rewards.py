"""Rewards for the chaos tests (tests/learn's length reward underneath):

- pid_logged_reward: each finished rollout's row and process id appended to
  $MEMAGENT_TEST_REWARD_LOG (which worker, before or after a fault, ran it);
- gated_reward: a row numbered $MEMAGENT_TEST_HOLD_FROM or above (answers a00, a01, ...) holds
  while the file $MEMAGENT_TEST_GATE exists, so a test can keep a run from finishing until a
  restarted server is back, however long its start takes on a loaded machine, while the rows
  before it train freely."""

import os
import time

from tests.learn.rewards import LOG_ENV, length_reward

GATE_ENV, HOLD_ENV = "MEMAGENT_TEST_GATE", "MEMAGENT_TEST_HOLD_FROM"


def pid_logged_reward(response: str, answers: list[str]) -> float:
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a") as f:
            f.write(f"{answers[0]} {os.getpid()}\n")
    return length_reward(response, answers)


def gated_reward(response: str, answers: list[str]) -> float:
    gate = os.environ.get(GATE_ENV)
    held = int(answers[0][1:]) >= int(os.environ.get(HOLD_ENV, "0"))
    while held and gate and os.path.exists(gate):
        time.sleep(0.1)
    return length_reward(response, answers)
