"""Resuming continues the same run: global step, learning-rate schedule, optimiser, normaliser;
and it refuses, in one line naming the changed key, a config that builds another network or
changes what the saved weights mean, leaving the run dir as it was."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import pytest
import torch
import yaml

from distrl.comm import Comm, TorchComm
from distrl.config.run import load_config
from distrl.config.sections import EnvConfig
from distrl.data.collect import collect_dataset
from distrl.entry import build_training
from distrl.io import checkpoint as ckpt
from tests.helpers import CARTPOLE, CARTPOLE_A2C, CARTPOLE_DQN, OFFLINE, PENDULUM_SAC, REPO, distrl

OVERRIDES = [
    "train.total_steps=4096",
    "env.num_envs=4",
    "algo.rollout_steps=64",
    "normalize.observations=true",
    "train.stop_return=null",
    "log.tensorboard=false",
    "checkpoint.interval_steps=1024",
    "checkpoint.keep_last=10",
]


def read_rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_resume_matches_the_uninterrupted_schedule(tmp_path: Path) -> None:
    cfg = load_config(CARTPOLE, OVERRIDES)
    full = build_training(cfg, TorchComm(), torch.device("cpu"), tmp_path / "full")
    full.run()
    midpoint = tmp_path / "full" / "checkpoints" / ckpt.checkpoint_dir_name(2048)
    files = ckpt.load_checkpoint(midpoint)

    resumed = build_training(cfg, TorchComm(), torch.device("cpu"), tmp_path / "resumed", files)
    saved_model = ckpt.tensors_from_bytes(files["model.safetensors"])
    assert (resumed.global_step, resumed.update_index) == (2048, 8)
    obs_rms = resumed.runner.obs_rms
    torch.testing.assert_close(obs_rms.mean, saved_model["obs_rms.mean"], rtol=0, atol=0)
    torch.testing.assert_close(obs_rms.count, saved_model["obs_rms.count"], rtol=0, atol=0)
    adam_state = resumed.runner.algo.optimizer.state_dict()["state"]
    saved_adam = ckpt.tensors_from_bytes(files["optimizer.safetensors"])
    torch.testing.assert_close(adam_state[0]["exp_avg"], saved_adam["policy.0.exp_avg"], rtol=0, atol=0)
    resumed.run()

    full_rows = {r["update"]: r for r in read_rows(tmp_path / "full")}
    resumed_rows = read_rows(tmp_path / "resumed")
    assert [r["update"] for r in resumed_rows] == list(range(9, 17))
    for row in resumed_rows:
        assert row["global_step"] == full_rows[row["update"]]["global_step"]
        assert row["learning_rate"] == full_rows[row["update"]]["learning_rate"]
    # Same number of observations merged into the normaliser as without the interruption.
    assert float(resumed.runner.obs_rms.count) == float(full.runner.obs_rms.count)


@pytest.mark.slow
def test_cli_resume_appends_without_duplicate_updates(tmp_path: Path) -> None:
    common = ["train", "--config", str(CARTPOLE), "--run-dir", str(tmp_path), *OVERRIDES]
    assert distrl(*common, "--total-steps", "2048").returncode == 0
    second = distrl(*common, "--total-steps", "4096", "--resume")
    assert second.returncode == 0, second.stderr
    steps = [r["global_step"] for r in read_rows(tmp_path)]
    assert steps == sorted(set(steps)) and steps[-1] == 4096 and steps[0] == 256
    state = json.loads((ckpt.resolve_checkpoint(tmp_path) / "state.json").read_text())
    assert state["global_step"] == 4096 and state["launch_index"] == 1
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["train"]["total_steps"] == 4096
    assert f"resuming from {tmp_path / 'checkpoints' / ckpt.checkpoint_dir_name(2048)}" in second.stderr


class RefusedChange(NamedTuple):
    config: Path
    tiny: list[str]
    """Overrides for a run of a few seconds."""
    change: str
    """The override a resume adds."""
    says: str
    """What the refusal's line says of it."""
    logged_env: str | None = None
    """The env of the logged data it trains on (offline learners)."""


QUIET = ["train.stop_return=null", "log.tensorboard=false", "log.progress=false"]
TINY_PPO = ["train.total_steps=256", "env.num_envs=2", "algo.rollout_steps=128"]
TINY_LOGGED = [
    "train.total_steps=64",
    "algo.batch_size=32",
    "algo.gradient_steps=2",
    "data.shuffle_buffer=64",
]
TINY_GRPO = [
    "algo.num_prompts_per_step=2",
    "algo.num_generations_per_prompt=2",
    "algo.max_new_tokens=4",
    "model.transformer={layers: 1, width: 16, heads: 2, context: 16}",
    "task.max_length=3",
    "train.total_steps=4",
    "eval.episodes=2",
]
NARROWER = "model.hidden_sizes=[32]"
REFUSED_CHANGES = {
    "ppo": RefusedChange(CARTPOLE, TINY_PPO, NARROWER, "policy.actor.0.weight of shape [64, 4], this "
                         "config builds [32, 4] (changed: model.hidden_sizes [64, 64] -> [32]"),
    "appo": RefusedChange(CARTPOLE, ["algo.name=appo", *TINY_PPO], NARROWER,
                          "model.hidden_sizes [64, 64] -> [32]"),
    "jax_ppo": RefusedChange(CARTPOLE, ["ml_framework=jax", *TINY_PPO], NARROWER,
                             "model.hidden_sizes [64, 64] -> [32]"),
    "a2c": RefusedChange(CARTPOLE_A2C, ["train.total_steps=40"], "normalize.observations=true",
                         "lacks obs_rms.mean, which this config builds (changed: normalize.observations "
                         "None -> True"),
    "dqn": RefusedChange(CARTPOLE_DQN, ["train.total_steps=256", "algo.learning_starts=64",
                                        "algo.gradient_steps=2"], NARROWER,
                         "model.hidden_sizes [256, 256] -> [32]"),
    "offline_dqn": RefusedChange(OFFLINE, TINY_LOGGED, NARROWER, "model.hidden_sizes [256, 256] -> [32]",
                                 "CartPole-v1"),
    "sac": RefusedChange(PENDULUM_SAC, ["train.total_steps=64", "algo.learning_starts=60",
                                        "algo.batch_size=16"], NARROWER,
                         "model.hidden_sizes [256, 256] -> [32]"),
    "iql": RefusedChange(REPO / "configs" / "pendulum_iql.yaml", TINY_LOGGED, NARROWER,
                         "model.hidden_sizes [256, 256] -> [32]", "Pendulum-v1"),
    "grpo": RefusedChange(REPO / "configs" / "grpo_reverse.yaml", TINY_GRPO, "algo.kl_coef=0.1",
                          "lacks reference.token_embedding.weight, which this config builds (changed: "
                          "algo.kl_coef 0.0 -> 0.1"),
    # A key that changes what the weights compute, not their shapes: refused by its name.
    "ppo_activation": RefusedChange(CARTPOLE, TINY_PPO, "model.activation=relu",
                                    "was trained with model.activation='tanh' but this config has 'relu'"),
}  # fmt: skip


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """200 random transitions of each env the logged cases train on, in ``<root>/<env id>``."""
    root = tmp_path_factory.mktemp("logged")
    for env_id in ("CartPole-v1", "Pendulum-v1"):
        collect_dataset(EnvConfig(id=env_id, num_envs=1), "random", 200, root / env_id, 200, seed=0)
    return root


@pytest.mark.parametrize("case", list(REFUSED_CHANGES))
@pytest.mark.slow
def test_resume_refuses_another_network_in_one_line_and_keeps_the_run(
    logged: Path, tmp_path: Path, case: str
) -> None:
    """A tiny run, then a resume with a change (and a new budget, which alone may change): exit
    code 2, one line naming the checkpoint and the change, and not a byte of the run dir touched."""
    refused = REFUSED_CHANGES[case]
    overrides = [*refused.tiny, *QUIET]
    if refused.logged_env is not None:
        overrides.append(f"data.path={logged / refused.logged_env}")
    cfg = load_config(refused.config, overrides)
    build_training(cfg, _comm(cfg.ml_framework), torch.device("cpu"), tmp_path).run()
    before = _files(tmp_path)
    resumed = distrl(
        "train", "--config", str(refused.config), "--run-dir", str(tmp_path), "--resume", *overrides,
        refused.change, "--total-steps", "100000",
    )  # fmt: skip
    assert resumed.returncode == 2, resumed.stderr
    assert len(resumed.stderr.strip().splitlines()) == 1, resumed.stderr
    assert f"checkpoint {ckpt.resolve_checkpoint(tmp_path)} " in resumed.stderr
    assert refused.says in resumed.stderr, resumed.stderr
    assert _files(tmp_path) == before  # checkpoints, config.yaml and metrics as they were


def _comm(ml_framework: str) -> Comm:
    if ml_framework == "jax":
        pytest.importorskip("jax", reason="the jax extra is installed by make test")
        from distrl.comm.jax_comm import JaxComm

        return JaxComm()
    return TorchComm()


def _files(run_dir: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in sorted(run_dir.rglob("*")) if path.is_file()}
