"""``env.backend: torch``: PPO solves CartPole-v1 on distrl's batched torch env, on 1 and 2 ranks,
and its checkpoint evaluates on the same backend; an env it does not implement is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import CARTPOLE, distrl, train_ranks
from tests.ray_cluster import param_digests

TRAIN = ["--config", str(CARTPOLE), "env.backend=torch", "--total-steps", "300000", "log.tensorboard=false"]


@pytest.mark.slow
@pytest.mark.learning(seeds=3)
@pytest.mark.parametrize("ranks", [1, 2])
def test_ppo_solves_cartpole_on_the_torch_backend(tmp_path: Path, ranks: int, seed: int) -> None:
    args = [*TRAIN, "--run-dir", str(tmp_path), "--seed", str(seed)]
    result = distrl("train", *args) if ranks == 1 else train_ranks(2, *args)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(distrl("eval", "--checkpoint", str(tmp_path), "--json").stdout)
    assert report["return_mean"] >= 475


def test_an_env_the_torch_backend_lacks_is_one_line(tmp_path: Path) -> None:
    result = distrl("train", *TRAIN, "--env", "MountainCar-v0", "--run-dir", str(tmp_path))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert (
        "env.backend=torch implements CartPole-v1, Acrobot-v1, Pendulum-v1 or a user's module:Class, "
        "not 'MountainCar-v0'" in result.stderr
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "env_id",
    ["CartPole-v1", "examples.isaac_style_cartpole:IsaacStyleCartPole"],
    ids=["cartpole", "rsl-rl-style"],
)
def test_two_ranks_train_on_the_torch_backend_to_identical_weights(tmp_path: Path, env_id: str) -> None:
    """The path the learning claims above take (``make learn``), in 4 updates: the global batch
    shared by 2 ranks, every update logged once, both ranks' weights equal to the bit."""
    result = train_ranks(
        2, "--config", str(CARTPOLE), "env.backend=torch", f"env.id={env_id}", "--total-steps", "2048",
        "train.stop_return=null", "log.tensorboard=false", "--run-dir", str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [row["global_step"] for row in rows] == [512, 1024, 1536, 2048]
    assert rows[-1]["episodes"] > 0
    digests = param_digests(tmp_path)
    assert len(digests) == 2 and digests[0] == digests[1]
