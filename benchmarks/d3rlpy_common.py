"""What both d3rlpy contender scripts (``d3rlpy_iql.py``, ``d3rlpy_offline_dqn.py``) share, run in
d3rlpy's own venv: a distrl Parquet dataset as d3rlpy episodes, and the same greedy evaluation
(episodes, seeds) as ``distrl eval``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import d3rlpy
import gymnasium as gym
import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq


def load_episodes(data_dir: Path, discrete: bool) -> d3rlpy.dataset.MDPDataset:
    """Every row as a d3rlpy transition. d3rlpy takes a transition's next observation from the
    following row, so the rows (which ``distrl collect`` interleaves across its envs) are sorted
    into episodes by ``mdp_id`` and ``sequence_number``; an episode cut short (by the time limit,
    or by the end of collection) ends in a timeout, not a terminal."""
    columns = ["mdp_id", "sequence_number", "state_features", "action", "reward", "terminal"]
    files = [str(path) for path in sorted(data_dir.glob("*.parquet"))]
    table = (
        pq.ParquetDataset(files)
        .read(columns=[*columns, "possible_actions"] if discrete else columns)
        .sort_by([("mdp_id", "ascending"), ("sequence_number", "ascending")])
    )
    rows = len(table)
    episode = table["mdp_id"].to_numpy()
    last_of_episode = np.append(episode[1:] != episode[:-1], True)
    terminals = table["terminal"].to_numpy().astype(np.float32)
    if discrete:
        actions = table["action"].to_numpy()
        num_actions = len(table["possible_actions"][0])
        space = {"action_space": d3rlpy.ActionSpace.DISCRETE, "action_size": num_actions}
    else:
        actions = pc.list_flatten(table["action"]).to_numpy().reshape(rows, -1)
        space = {"action_space": d3rlpy.ActionSpace.CONTINUOUS}
    return d3rlpy.dataset.MDPDataset(
        observations=pc.list_flatten(table["state_features"]).to_numpy().reshape(rows, -1),
        actions=actions,
        rewards=table["reward"].to_numpy().astype(np.float32),
        terminals=terminals,
        timeouts=(last_of_episode & (terminals == 0)).astype(np.float32),
        **space,
    )


def greedy_return(algo: Any, env_id: str, episodes: int, first_seed: int) -> float:
    """Mean undiscounted return of ``algo.predict``'s actions, episode i seeded ``first_seed`` + i."""
    env = gym.make(env_id)
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=first_seed + i)
        total, done = 0.0, False
        while not done:
            action = algo.predict(np.asarray(obs, np.float32)[None])[0]
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return float(np.mean(returns))
