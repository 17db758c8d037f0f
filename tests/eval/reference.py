"""What ``distrl eval`` must report for a checkpoint, worked out apart from it: the same episodes
played here, step by step, with the policy ``load_policy`` rebuilds."""

from __future__ import annotations

from pathlib import Path

import torch

from distrl.envs import make_vec_env
from distrl.eval.policy import load_policy
from distrl.models.memory import policy_state_size

MAX_EPISODES = 16
"""``distrl eval`` plays up to 16 episodes in one batch; the reference plays one batch."""


def reference_returns(checkpoint: Path, episodes: int) -> list[float]:
    """The undiscounted returns of ``episodes`` episodes of ``checkpoint``'s deterministic policy,
    episode i on env i seeded ``eval.seed + i``, its rewards summed up to its first end. The
    episodes step in one batch on one thread, as ``distrl eval``'s do: the policy's kernels see
    the same shapes (continuous actions round alike) and a JAX env compiles no other shape."""
    assert episodes <= MAX_EPISODES
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _played(checkpoint, episodes)
    finally:
        torch.set_num_threads(threads)


@torch.no_grad()
def _played(checkpoint: Path, episodes: int) -> list[float]:
    loaded = load_policy(checkpoint)
    seed = loaded.cfg.eval.seed
    env = make_vec_env(loaded.cfg.env, [seed + i for i in range(episodes)])
    obs = env.reset()
    returns = torch.zeros(episodes, dtype=torch.float64)
    ended = torch.zeros(episodes, dtype=torch.bool)
    state = torch.zeros(episodes, policy_state_size(loaded.policy))
    while not ended.all():
        if state.shape[1]:
            actions, state = loaded.policy(obs, state)
        else:
            actions = loaded.policy(obs)
        step = env.step(actions)
        returns += torch.where(ended, 0.0, step.reward.double())
        ended |= step.terminated | step.truncated
        obs = step.obs
    env.close()
    return returns.tolist()
