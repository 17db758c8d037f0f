"""Reward functions a user might write, imported by tests as ``tests.tasks.reward_functions:NAME``."""


def length(prompt: str, completion: str, answer: str) -> float:
    """Dense: longer completions earn more, so even a random policy's groups differ."""
    return len(completion) / 8


def fails(prompt: str, completion: str, answer: str) -> float:
    raise ValueError("cannot score this")


def says_yes(prompt: str, completion: str, answer: str) -> str:
    return "yes"


_first_prompt: list[str] = []


def never_returns(prompt: str, completion: str, answer: str) -> float:
    """Stuck on the first prompt after the first it scored: a loop that never ends, swallowing
    what it can."""
    _first_prompt[:] = _first_prompt or [prompt]
    if prompt != _first_prompt[0]:
        while True:
            try:
                pass
            except Exception:
                continue
    return 1.0


def waits_forever(prompt: str, completion: str, answer: str) -> float:
    """Blocked on its second prompt in a call that never returns (a checker waiting on nothing)."""
    import threading

    if prompt.endswith("2="):
        threading.Event().wait()
    return 1.0
