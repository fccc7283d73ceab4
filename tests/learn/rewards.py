"""Rewards for learner tests: a random model never answers, so these give groups mixed rewards."""

import os

LOG_ENV = "MEMAGENT_TEST_REWARD_LOG"


def length_reward(response: str, answers: list[str]) -> float:
    """Varies with the response, so a group's rewards differ and advantages are non-zero."""
    return (len(response) % 7) / 6.0


def logged_length_reward(response: str, answers: list[str]) -> float:
    """length_reward, and the row's first answer appended to the file $MEMAGENT_TEST_REWARD_LOG
    (the rows were made with distinct answers: the log names every row a rollout finished)."""
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a") as f:
            f.write(answers[0] + "\n")
    return length_reward(response, answers)
