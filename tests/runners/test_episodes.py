"""Episode returns and lengths from whole rollouts: episodes spanning rollouts are joined, and an
env reset between rollouts (an env worker rebuilt after a failure) starts a new one."""

import torch

from distrl.runners.episodes import EpisodeTracker


def _rollout(rewards: list[list[float]], dones: list[list[bool]]) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor(rewards), torch.tensor(dones)


def test_episodes_span_rollouts_unless_their_env_was_restarted() -> None:
    tracker = EpisodeTracker(num_envs=2, window=10, device=torch.device("cpu"))
    fresh, kept = torch.tensor([True, True]), torch.tensor([False, False])
    # Two steps each, no episode ends: both envs carry 2.0 of return into the next rollout.
    tracker.add_rollout(*_rollout([[1.0, 1.0], [1.0, 1.0]], [[False, False], [False, False]]), fresh)
    # Env 1 was reset before this rollout (its 2.0 is lost with the cut episode); both end now.
    tracker.add_rollout(*_rollout([[1.0, 5.0]], [[True, True]]), torch.tensor([False, True]))
    assert list(tracker.returns) == [3.0, 5.0] and list(tracker.lengths) == [3, 1]
    tracker.add_rollout(*_rollout([[2.0, 2.0]], [[True, False]]), kept)
    stats = tracker.stats()
    assert (stats.return_sum, stats.count, stats.finished) == (10.0, 3, 3)
