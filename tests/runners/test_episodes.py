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


def test_an_episode_that_lost_steps_to_a_dropped_segment_is_not_counted() -> None:
    """Collecting ahead with drop_oldest: the envs were not reset, their running episodes lost
    the dropped segment's steps, so the ends that close them would report part of an episode."""
    tracker = EpisodeTracker(num_envs=2, window=10, device=torch.device("cpu"))
    tracker.add_rollout(*_rollout([[1.0, 1.0]], [[False, False]]), torch.tensor([True, True]))
    # A segment of env 0's process was dropped: its episode (2 steps so far) is cut.
    tracker.add_rollout(*_rollout([[1.0, 1.0]], [[True, True]]), torch.tensor([True, False]), cut=True)
    assert list(tracker.returns) == [2.0]  # env 1's whole episode; env 0's end closes a cut one
    # Env 0's next episode is whole again; a reset (not cut) env's next end counts as ever.
    tracker.add_rollout(
        *_rollout([[3.0, 4.0], [3.0, 4.0]], [[False, False], [True, True]]), torch.tensor([False, True])
    )
    assert list(tracker.returns) == [2.0, 6.0, 8.0]
    assert tracker.stats().finished == 3
