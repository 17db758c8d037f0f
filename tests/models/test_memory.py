"""Policies with memory (``model.memory``): acting carries each env's state and resets it after
an episode ends; the update replays chunks of the rollout from the states acting had, so its
first epoch sees probability ratios of 1; the deployable policy carries the state too."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from distrl.comm import TorchComm
from distrl.config.run import load_config
from distrl.runners.base import RunContext
from distrl.runners.on_policy import OnPolicyRunner
from distrl.storage.rollout import RolloutBatch
from tests.helpers import distrl

SHORT_EPISODES = [
    "env.id=distrl.envs.memory_tasks:CartPoleNoVelocity",
    "env.max_episode_steps=7",  # many episode ends inside each chunk
    "env.num_envs=4",
    "algo.rollout_steps=16",
    "algo.bptt_len=8",
    "algo.minibatch_size=16",
]


def collected(memory: str, *overrides: str) -> tuple[OnPolicyRunner, RolloutBatch]:
    """A runner after two rollouts (the second starts from the states the first left) and the
    second one's batch of chunks."""
    cfg = load_config(None, [*SHORT_EPISODES, f"model.memory={memory}", *overrides])
    runner = OnPolicyRunner(RunContext(cfg, TorchComm(), torch.device("cpu")))
    runner.start(fresh=True)
    runner.collect()
    rollout = runner.collect()
    return runner, rollout.batch(cfg.algo.gamma, cfg.algo.gae_lambda, runner.sequence_length)


@pytest.mark.parametrize("memory", ["lstm", "gru"])
def test_the_update_replays_the_states_acting_had_so_the_first_ratio_is_one(memory: str) -> None:
    runner, batch = collected(memory)
    assert batch.sequence_length == 8 and batch.num_chunks == 2 * 4
    assert batch.dones.sum() >= 4  # resets inside the chunks are replayed too
    for chunks in runner.algo.random_minibatches(batch.num_chunks):
        mb = batch.chunks(chunks)
        with torch.no_grad():
            log_probs, _, values = runner.policy.action_stats(mb.obs, mb.actions, mb.start_states(), mb.dones)
        torch.testing.assert_close(log_probs, mb.behaviour_log_probs, rtol=0, atol=1e-6)
        torch.testing.assert_close(values, mb.values, rtol=0, atol=1e-6)
    # Replayed without the resets, the same chunks give other values (the fresh actor's
    # probabilities are near uniform): the check can fail.
    with torch.no_grad():
        _, _, values = runner.policy.action_stats(
            batch.obs, batch.actions, batch.start_states(), torch.zeros_like(batch.dones)
        )
    assert (values - batch.values).abs().max() > 1e-4  # a hundred times the tolerance above


def test_one_step_chunks_replay_from_each_steps_state() -> None:
    runner, batch = collected("gru", "algo.bptt_len=1")
    assert batch.sequence_length == 1 and batch.num_chunks == 16 * 4 and batch.memory_states is not None
    with torch.no_grad():
        log_probs, _, values = runner.policy.action_stats(
            batch.obs, batch.actions, batch.start_states(), batch.dones
        )
    torch.testing.assert_close(values, batch.values, rtol=0, atol=1e-6)
    runner.algo.update(batch)  # one-step chunks train too


def test_the_state_is_zero_after_an_episode_ends_and_carried_otherwise() -> None:
    runner, _ = collected("lstm")
    rollout = runner.collect()
    states, dones = rollout.memory_states, rollout.dones.bool()
    after_end = dones[:-1]
    assert after_end.any() and (~after_end).any()
    assert states[1:][after_end].abs().max() == 0
    assert (states[1:][~after_end].abs().amax(-1) > 0).all()
    assert states[0].abs().amax(-1).gt(0).any()  # the rollout continued the previous one's states
    runner.collection.reset()  # a resumed launch or a rebuilt env worker restarts its envs
    assert runner.collect().memory_states[0].abs().max() == 0


def test_the_deployable_policy_takes_and_gives_the_state() -> None:
    runner, _ = collected("gru")
    deployable = runner.deployable_policy()
    assert deployable.state_size == runner.policy.state_size == 128
    obs = torch.randn(3, 2)
    state = runner.policy.initial_state(3)
    actions, next_state = deployable(obs, state)
    assert actions.shape == (3,) and next_state.shape == state.shape
    assert torch.equal(deployable(obs, state)[0], actions)  # deterministic given the state
    # The state it gives differs from the one it took: the next step sees a history.
    assert not torch.equal(deployable(obs, next_state)[1], next_state)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["algo.rollout_steps=16", "algo.bptt_len=5"],
            "algo.bptt_len=5 does not divide algo.rollout_steps=16; use a divisor of it",
        ),
        (
            ["model.memory=lstm", "train.straggler_threshold=0.5"],
            "train.straggler_threshold=0.5 with model.memory=lstm: a cut rollout would split the "
            "update's chunks; unset one of them",
        ),
        (
            ["model.memory=lstm", "algo.rollout_steps=16", "algo.bptt_len=16", "algo.minibatch_size=8"],
            "algo.minibatch_size=8 gives 8 minibatches per epoch, more than the 4 chunks of "
            "algo.bptt_len=16 steps a rank collects per update",
        ),
    ],
)
def test_memory_settings_that_cannot_work_are_one_line(
    tmp_path: Path, overrides: list[str], message: str
) -> None:
    result = distrl(
        "train", "--env", "distrl.envs.memory_tasks:CartPoleNoVelocity", "--run-dir", str(tmp_path / "run"),
        "env.num_envs=4", "--total-steps", "256", *overrides,
    )  # fmt: skip
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()  # refused, whether by the config or the runner: nothing left
