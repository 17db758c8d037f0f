"""Reward functions a user might write, imported by tests as ``tests.tasks.reward_functions:NAME``."""


def length(prompt: str, completion: str, answer: str) -> float:
    """Dense: longer completions earn more, so even a random policy's groups differ."""
    return len(completion) / 8


def fails(prompt: str, completion: str, answer: str) -> float:
    raise ValueError("cannot score this")


def says_yes(prompt: str, completion: str, answer: str) -> str:
    return "yes"
