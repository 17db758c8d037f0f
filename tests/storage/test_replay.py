"""n-step returns from the replay buffer, checked by hand on a tiny 1-env history."""

import torch

from distrl.storage.replay import ReplayBuffer


def fill(buffer: ReplayBuffer, rewards: list[float], ends: list[tuple[bool, bool]], start: int = 0) -> None:
    """Step t has obs [t], reward rewards[t], next obs [t + 1]; ends[t] = (terminated, truncated)."""
    for t, (reward, (terminated, truncated)) in enumerate(zip(rewards, ends, strict=True), start):
        buffer.add(
            torch.tensor([[float(t)]]),
            torch.tensor([t % 2]),
            torch.tensor([reward]),
            torch.tensor([[t + 1.0]]),
            torch.tensor([terminated]),
            torch.tensor([terminated or truncated]),
        )


def test_n_step_returns_stop_where_episodes_end() -> None:
    buffer = ReplayBuffer(capacity=8, num_envs=1, obs_shape=1, device=torch.device("cpu"))
    # Episode 1: steps 0-2, terminated at 2; episode 2: steps 3-4, truncated at 4; then 5.
    fill(buffer, [1.0, 2.0, 4.0, 8.0, 16.0, 32.0], [(0, 0), (0, 0), (1, 0), (0, 0), (0, 1), (0, 0)])
    batch = buffer.sample(64, n_step=3, gamma=0.5, generator=torch.Generator().manual_seed(0))
    expected = {
        # first obs: (return, steps, bootstrap obs, terminated)
        0.0: (1 + 0.5 * 2 + 0.25 * 4, 3, 3.0, True),
        1.0: (2 + 0.5 * 4, 2, 3.0, True),
        2.0: (4.0, 1, 3.0, True),
        3.0: (8 + 0.5 * 16, 2, 5.0, False),  # truncated: bootstrap from the final observation
    }
    seen = set()
    for i in range(len(batch)):
        first = float(batch.obs[i, 0])
        assert first in expected  # steps 4 and 5 lack 2 later rows: not sampled yet
        ret, steps, next_obs, terminated = expected[first]
        assert float(batch.returns[i]) == ret and int(batch.steps[i]) == steps
        assert float(batch.next_obs[i, 0]) == next_obs and bool(batch.terminated[i]) == terminated
        assert int(batch.actions[i]) == int(first) % 2
        seen.add(first)
    assert seen == set(expected)


def test_ring_buffer_keeps_the_newest_rows() -> None:
    buffer = ReplayBuffer(capacity=4, num_envs=1, obs_shape=1, device=torch.device("cpu"))
    fill(buffer, [1.0] * 10, [(0, 0)] * 10)
    batch = buffer.sample(100, n_step=1, gamma=0.9, generator=torch.Generator().manual_seed(1))
    assert set(batch.obs[:, 0].tolist()) == {6.0, 7.0, 8.0, 9.0}


def test_a_cut_episode_ends_its_n_step_returns_at_the_cut() -> None:
    buffer = ReplayBuffer(capacity=8, num_envs=1, obs_shape=1, device=torch.device("cpu"))
    fill(buffer, [1.0, 2.0], [(0, 0), (0, 0)])
    buffer.cut(torch.tensor([True]))  # the env was rebuilt: its episode ends after step 1
    fill(buffer, [4.0, 8.0, 16.0], [(0, 0), (0, 0), (0, 0)], start=2)
    batch = buffer.sample(64, n_step=3, gamma=0.5, generator=torch.Generator().manual_seed(0))
    returns = {
        float(batch.obs[i, 0]): (float(batch.returns[i]), int(batch.steps[i])) for i in range(len(batch))
    }
    assert returns[0.0] == (1 + 0.5 * 2, 2)  # stops at the cut, not running into the next episode
    assert returns[1.0] == (2.0, 1)
    assert returns[2.0] == (4 + 0.5 * 8 + 0.25 * 16, 3)  # the fresh episode runs on
    cut = [i for i in range(len(batch)) if float(batch.obs[i, 0]) == 1.0]
    assert not batch.terminated[cut].any()  # bootstraps from its own next observation


def test_frames_are_stored_as_the_env_gives_them() -> None:
    buffer = ReplayBuffer(
        capacity=4, num_envs=2, obs_shape=(3, 36, 36), device=torch.device("cpu"), obs_dtype=torch.uint8
    )
    frames = torch.randint(0, 256, (2, 3, 36, 36), dtype=torch.uint8)
    buffer.add(
        frames,
        torch.tensor([0, 1]),
        torch.ones(2),
        frames,
        torch.zeros(2, dtype=torch.bool),
        torch.zeros(2, dtype=torch.bool),
    )
    assert buffer.obs.dtype == buffer.next_obs.dtype == torch.uint8
    assert buffer.obs.nbytes == 4 * 2 * 3 * 36 * 36  # one byte a pixel
    batch = buffer.sample(8, n_step=1, gamma=0.9)
    assert batch.obs.dtype == torch.uint8 and any(torch.equal(row, frames[0]) for row in batch.obs)
