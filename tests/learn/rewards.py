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


def teach_reward(response: str, answers: list[str]) -> float:
    """By the row's number (answers a00, a01, ...): multiples of 3 always right, n % 3 == 1 always
    wrong, the rest mixed (length_reward): a pass-rate filter must keep exactly the third kind."""
    n = int(answers[0][1:])
    return 1.0 if n % 3 == 0 else 0.0 if n % 3 == 1 else 0.2 + 0.6 * length_reward(response, answers)
