"""A synthetic recommendation task for parametric DQN, with a known best policy.

Each row is one user (a state of ``FEATURES`` numbers) shown one item out of a candidate set of
its own size (``MIN_CANDIDATES`` to ``MAX_CANDIDATES`` items, each ``FEATURES`` numbers); the
reward is the user-item affinity u . v plus noise, and the row is terminal (one decision per
user, as in most recommendation logs). The logger picks uniformly among the candidates, so each
row's propensity is 1 / K. The best achievable mean reward (always the item of highest affinity)
and the logger's are known exactly, which is what ``policy_rewards`` reports beside the policy's.

``python -m distrl.data.recommendation --out DIR [--rows N] [--rows-per-file R] [--seed S]``
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from distrl.data.collect import DatasetWriter
from distrl.data.schema import PARAMETRIC_SCHEMA

FEATURES = 4
MIN_CANDIDATES, MAX_CANDIDATES = 2, 8
REWARD_NOISE = 0.1


@dataclass
class Users:
    """Fresh rows of the task: users, their padded candidate items and the true affinities."""

    users: np.ndarray
    """[rows, FEATURES]"""
    items: np.ndarray
    """[rows, MAX_CANDIDATES, FEATURES], zero past each row's candidates"""
    mask: np.ndarray
    """[rows, MAX_CANDIDATES]: real candidates"""

    @property
    def affinity(self) -> np.ndarray:
        """[rows, MAX_CANDIDATES] expected reward of every candidate (-inf past the real ones)."""
        return np.where(self.mask, np.einsum("rf,rkf->rk", self.users, self.items), -np.inf)


def draw_users(rows: int, rng: np.random.Generator) -> Users:
    counts = rng.integers(MIN_CANDIDATES, MAX_CANDIDATES + 1, size=rows)
    mask = np.arange(MAX_CANDIDATES) < counts[:, None]
    items = rng.standard_normal((rows, MAX_CANDIDATES, FEATURES)).astype(np.float32) * mask[..., None]
    return Users(rng.standard_normal((rows, FEATURES)).astype(np.float32), items, mask)


def write_dataset(out: Path, rows: int, rows_per_file: int, seed: int) -> int:
    """Log ``rows`` uniformly random recommendations; return the files written."""
    rng = np.random.default_rng(seed)
    task = draw_users(rows, rng)
    counts = task.mask.sum(axis=1)
    actions = (rng.random(rows) * counts).astype(np.int64)
    rewards = task.affinity[np.arange(rows), actions] + REWARD_NOISE * rng.standard_normal(rows)
    out.mkdir(parents=True, exist_ok=True)
    writer = DatasetWriter(out, rows_per_file, PARAMETRIC_SCHEMA)
    for row in range(rows):
        candidates = task.items[row, : counts[row]]
        writer.add(
            mdp_id=str(row),
            sequence_number=0,
            state_features=task.users[row].tolist(),
            action=int(actions[row]),
            action_probability=1.0 / counts[row],
            reward=float(rewards[row]),
            next_state_features=[0.0] * FEATURES,
            terminal=True,
            action_features=candidates[actions[row]].tolist(),
            possible_actions_features=candidates.tolist(),
            possible_next_actions_features=[],
        )
    writer.close(limit=rows)
    return writer.files


@torch.no_grad()
def policy_rewards(policy: nn.Module, rows: int, seed: int) -> dict[str, float]:
    """Mean expected reward on ``rows`` fresh users of ``policy`` (a parametric greedy policy:
    states, candidates and mask in, candidate index out), of the best choice and of the logger."""
    task = draw_users(rows, np.random.default_rng(seed))
    choice = policy(torch.as_tensor(task.users), torch.as_tensor(task.items), torch.as_tensor(task.mask))
    affinity = task.affinity
    real = np.where(task.mask, affinity, 0.0)
    return {
        "policy": float(affinity[np.arange(rows), choice.numpy()].mean()),
        "best": float(affinity.max(axis=1).mean()),
        "logger": float((real.sum(axis=1) / task.mask.sum(axis=1)).mean()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write the synthetic recommendation dataset")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--rows-per-file", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.rows < 1 or args.rows_per_file < 1:
        parser.error("--rows and --rows-per-file must be at least 1")
    if args.out.exists() and any(args.out.iterdir()):
        parser.error(f"--out {args.out}: not empty")
    files = write_dataset(args.out, args.rows, args.rows_per_file, args.seed)
    print(f"distrl: wrote {args.rows} recommendation rows in {files} file(s) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
