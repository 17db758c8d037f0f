"""Reading Minari datasets written with minari's own DataCollector: every transition exactly once
per epoch over the ranks, as minari stores it; ``distrl train --data`` trains on one; what DQN
cannot use (continuous actions) is one line, and IQL learns from those."""

from __future__ import annotations

import shutil
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import h5py
import minari
import numpy as np
import pytest

from distrl.data.logged import ShuffledStream
from distrl.data.minari_dataset import ROWS_PER_UNIT, MinariLoggedDataset
from distrl.data.reader import open_dataset
from distrl.errors import UserError
from distrl.io import checkpoint as ckpt
from tests.helpers import REPO, distrl


def write_minari_dataset(root: Path, env: gym.Env, dataset_id: str, episodes: int) -> Path:
    """``episodes`` random-action episodes recorded by minari's DataCollector into a dataset under
    ``root`` (minari's datasets root); returns the dataset's directory."""
    with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings():
        patch.setenv("MINARI_DATASETS_PATH", str(root))
        warnings.simplefilter("ignore", UserWarning)  # minari asks for author, description, ...
        collector = minari.DataCollector(env)
        collector.action_space.seed(0)
        for episode in range(episodes):
            collector.reset(seed=episode)
            done = False
            while not done:
                _, _, terminated, truncated, _ = collector.step(collector.action_space.sample())
                done = terminated or truncated
        collector.create_dataset(dataset_id, algorithm_name="random", ref_min_score=0.0)
        collector.close()
    return root / dataset_id


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """30 random episodes, cut at 30 steps so that some end truncated rather than terminated."""
    env = gym.make("CartPole-v1", max_episode_steps=30)
    return write_minari_dataset(tmp_path_factory.mktemp("minari"), env, "cartpole/random-v0", 30)


def transition_ids(
    obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_obs: np.ndarray, terminal: np.ndarray
) -> list[tuple]:
    """Transitions told apart by all they hold (all distinct in a random CartPole log)."""
    return [
        (tuple(o.tolist()), int(a), float(r), tuple(n.tolist()), bool(t))
        for o, a, r, n, t in zip(obs, actions, rewards, next_obs, terminal, strict=True)
    ]


def minari_transitions(path: Path) -> list[tuple]:
    """Every transition of the dataset as minari itself hands out its episodes; a truncated
    episode's last one is not terminal."""
    ids = []
    episodes = list(minari.MinariDataset(path / "data").iterate_episodes())
    assert any(e.truncations[-1] for e in episodes) and any(e.terminations[-1] for e in episodes)
    for episode in episodes:
        obs = episode.observations
        ids += transition_ids(obs[:-1], episode.actions, episode.rewards, obs[1:], episode.terminations)
    return ids


@pytest.mark.parametrize(
    ("world_size", "rows_per_unit", "unit"),
    [(2, ROWS_PER_UNIT, "episode"), (3, ROWS_PER_UNIT, "episode"), (2, 150, "group"), (3, 150, "group")],
)
def test_every_transition_exactly_once_per_epoch_over_all_ranks(
    cartpole: Path, world_size: int, rows_per_unit: int, unit: str
) -> None:
    data = MinariLoggedDataset(cartpole, rows_per_unit=rows_per_unit)
    assert (data.obs_dim, data.num_actions) == (4, 2)
    assert all((u.count == 1) == (unit == "episode") for u in data.units(world_size))
    expected = minari_transitions(cartpole)
    assert len(expected) == len(set(expected)) == sum(u.rows for u in data.units(world_size))
    for epoch in range(2):
        seen = []
        for rank in range(world_size):
            stream = ShuffledStream(data, data.shard(rank, world_size), buffer_rows=100, seed=rank)
            for b in stream.batches(64, epoch):
                assert np.isnan(b.propensity).all() and b.next_action_mask.all()
                seen += transition_ids(b.obs, b.actions, b.rewards, b.next_obs, b.terminal)
        assert sorted(seen) == sorted(expected)  # each transition once, on exactly one rank


def test_a_non_finite_reward_is_reported_with_episode_and_step(cartpole: Path, tmp_path: Path) -> None:
    bad = shutil.copytree(cartpole, tmp_path / "bad")
    with h5py.File(bad / "data" / "main_data.hdf5", "r+") as file:
        file["episode_3/rewards"][2] = np.nan
    data = MinariLoggedDataset(bad)
    data.read(data.episodes[2])
    with pytest.raises(UserError) as info:
        data.read(data.episodes[3])
    assert str(info.value).startswith(f"{bad}: episode 3: step 2: reward: not a finite number")
    skipping = MinariLoggedDataset(bad, on_bad_row="skip")
    assert (
        len(skipping.read(skipping.episodes[3])) == data.episodes[3].rows - 1 and skipping.skipped_rows == 1
    )


@pytest.mark.slow
def test_distrl_train_on_a_minari_dataset_writes_a_checkpoint(cartpole: Path, tmp_path: Path) -> None:
    assert isinstance(open_dataset(cartpole / "data"), MinariLoggedDataset)  # its data/ works too
    result = distrl(
        "train", "--config", str(REPO / "configs" / "cartpole_offline_dqn.yaml"), "--data", str(cartpole),
        "--run-dir", str(tmp_path / "run"), "--total-steps", "2000", "train.stop_return=null",
        "log.tensorboard=false", "algo.gradient_steps=4",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert ckpt.resolve_checkpoint(tmp_path / "run").is_dir()


@pytest.mark.slow
def test_continuous_actions_train_iql_and_are_one_line_for_dqn(tmp_path: Path) -> None:
    pendulum = write_minari_dataset(
        tmp_path, gym.make("Pendulum-v1", max_episode_steps=10), "pendulum/random-v0", 3
    )
    result = distrl("train", "--config", str(REPO / "configs" / "cartpole_offline_dqn.yaml"),
                    "--data", str(pendulum), "--run-dir", str(tmp_path / "run"))  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"distrl: error: --data {pendulum}: its actions are continuous (Box(-2.0, 2.0, (1,), float32)); "
        "dqn needs discrete actions: algo.name=iql learns from continuous ones"
    ]
    data = MinariLoggedDataset(pendulum)
    assert data.action_bounds == ([-2.0], [2.0]) and data.read(data.episodes[0]).actions.shape == (10, 1)
    result = distrl(
        "train", "--config", str(REPO / "configs" / "pendulum_iql.yaml"), "--data", str(pendulum),
        "--run-dir", str(tmp_path / "iql"), "--total-steps", "60", "train.stop_return=null",
        "log.tensorboard=false", "algo.gradient_steps=2", "algo.batch_size=16",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert ckpt.resolve_checkpoint(tmp_path / "iql").is_dir()


def test_without_minari_installed_a_minari_dataset_says_which_extra(
    cartpole: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "minari", None)  # import minari now fails as if not installed
    monkeypatch.delitem(sys.modules, "distrl.data.minari_dataset")
    with pytest.raises(UserError) as info:
        open_dataset(cartpole)
    assert str(info.value) == (
        f"--data {cartpole} is a Minari dataset: install the minari extra (pip install 'distrl[minari]')"
    )
