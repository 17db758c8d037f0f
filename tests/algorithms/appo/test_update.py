"""APPO: with no lag its batch is PPO's with GAE(1); samples acted by other weights are weighted
by the clipped ratio of the target network to them; the target network follows its cadence and
is restored on resume; it learns CartPole from samples one update old."""

from __future__ import annotations

import json
import math
from pathlib import Path

import gymnasium as gym
import pytest
import torch

from distrl.algorithms.appo.config import APPOConfig
from distrl.algorithms.appo.update import APPO
from distrl.algorithms.appo.vtrace import vtrace
from distrl.comm import TorchComm
from distrl.config.run import load_config
from distrl.config.sections import ModelConfig
from distrl.entry import build_training
from distrl.io import checkpoint as ckpt
from distrl.models.actor_critic import ActorCritic
from distrl.storage.rollout import RolloutSegment, compute_gae
from tests.helpers import CARTPOLE, distrl

STEPS, ENVS = 6, 3
CFG = APPOConfig(name="appo", num_minibatches=2, update_epochs=1, gamma=0.9)


def policy_and_rollout(seed: int = 0) -> tuple[ActorCritic, RolloutSegment]:
    """A small policy and a rollout it acted (its log-probabilities and values), an episode
    ending in the middle of each env's steps."""
    torch.manual_seed(seed)
    policy = ActorCritic(4, gym.spaces.Discrete(2), ModelConfig(hidden_sizes=[16]))
    obs = torch.randn(STEPS, ENVS, 4)
    actions = torch.randint(0, 2, (STEPS, ENVS))
    with torch.no_grad():
        log_probs, _, values = policy.action_stats(obs.flatten(0, 1), actions.flatten())
    dones = torch.zeros(STEPS, ENVS)
    dones[STEPS // 2] = 1.0
    empty = torch.zeros(STEPS, ENVS, 0)
    rollout = RolloutSegment(
        obs=obs, actions=actions, behaviour_log_probs=log_probs.view(STEPS, ENVS),
        values=values.view(STEPS, ENVS), rewards=torch.randn(STEPS, ENVS), dones=dones,
        env_rewards=torch.zeros(STEPS, ENVS), episode_ends=dones.bool(), raw_obs=obs, raw_returns=empty,
        memory_states=empty, last_values=torch.randn(ENVS), restarted=torch.zeros(ENVS, dtype=torch.bool),
        nonfinite_final_obs=False, policy_version=0,
    )  # fmt: skip
    return policy, rollout


def test_without_lag_the_batch_is_ppos_with_gae_1() -> None:
    policy, rollout = policy_and_rollout()
    batch = APPO(policy, CFG, CFG.num_minibatches).training_batch(rollout)
    advantages, returns = compute_gae(
        rollout.rewards, rollout.values, rollout.dones, rollout.last_values, CFG.gamma, 1.0
    )
    torch.testing.assert_close(batch.advantages, advantages.flatten(), rtol=0, atol=1e-6)
    torch.testing.assert_close(batch.returns, returns.flatten(), rtol=0, atol=1e-6)
    torch.testing.assert_close(
        batch.behaviour_log_probs, rollout.behaviour_log_probs.flatten(), rtol=0, atol=1e-6
    )


def test_a_recurrent_policy_replays_each_envs_segment_from_its_acting_state() -> None:
    """Acted step by step with an LSTM (episodes ending mid-segment), the segment replayed whole
    gives back the acting values: with no lag the batch is PPO's GAE(1) batch, in chunks."""
    torch.manual_seed(0)
    model = ModelConfig(hidden_sizes=[16], memory="lstm", memory_size=8)
    policy = ActorCritic(4, gym.spaces.Discrete(2), model)
    obs, noise = torch.randn(STEPS, ENVS, 4), torch.rand(STEPS, ENVS)
    dones = torch.zeros(STEPS, ENVS)
    dones[1, 0] = dones[3, 1] = 1.0
    state = torch.randn(ENVS, policy.state_size)  # carried over from an earlier segment
    acted: dict[str, list[torch.Tensor]] = {"actions": [], "log_probs": [], "values": [], "states": []}
    for t in range(STEPS):
        acted["states"].append(state)
        actions, log_probs, values, state = policy.act(obs[t], noise[t], state)
        state = state * (1.0 - dones[t]).unsqueeze(-1)  # the next episode starts from zeros
        for key, value in zip(("actions", "log_probs", "values"), (actions, log_probs, values), strict=True):
            acted[key].append(value)
    _, rollout = policy_and_rollout()
    rollout = RolloutSegment(**{
        **vars(rollout), "obs": obs, "raw_obs": obs, "dones": dones, "episode_ends": dones.bool(),
        "actions": torch.stack(acted["actions"]), "behaviour_log_probs": torch.stack(acted["log_probs"]),
        "values": torch.stack(acted["values"]), "memory_states": torch.stack(acted["states"]),
    })  # fmt: skip
    batch = APPO(policy, CFG, CFG.num_minibatches).training_batch(rollout, sequence_length=STEPS // 2)
    advantages, returns = compute_gae(
        rollout.rewards, rollout.values, rollout.dones, rollout.last_values, CFG.gamma, 1.0
    )
    expected = rollout.training_batch(advantages, returns, STEPS // 2)
    assert batch.sequence_length == STEPS // 2 and batch.num_chunks == 2 * ENVS
    for name in ("advantages", "returns", "behaviour_log_probs", "values", "memory_states", "dones"):
        torch.testing.assert_close(getattr(batch, name), getattr(expected, name), rtol=0, atol=1e-5)


def test_samples_of_other_weights_get_rllibs_ratio_and_v_trace_advantages() -> None:
    policy, rollout = policy_and_rollout()
    algo = APPO(policy, CFG, CFG.num_minibatches)
    target_log_probs = rollout.behaviour_log_probs  # the target network is the policy here
    shift = torch.linspace(-2.0, 2.0, STEPS * ENVS).view(STEPS, ENVS)  # target / mu from e^-2 to e^2
    behaviour = target_log_probs - shift
    batch = algo.training_batch(RolloutSegment(**{**vars(rollout), "behaviour_log_probs": behaviour}))
    _, expected = vtrace(
        rollout.rewards, rollout.values, rollout.dones, rollout.last_values, shift, CFG.gamma
    )
    torch.testing.assert_close(batch.advantages, expected.flatten(), rtol=1e-5, atol=1e-6)
    # PPO's ratio against the batch's old log-probabilities is RLlib's: clip(mu / target, 0, 2) * pi / mu,
    # for any new log-probabilities pi.
    new = torch.randn(STEPS * ENVS, generator=torch.Generator().manual_seed(3))
    rllib = (behaviour - target_log_probs).exp().clamp(0.0, CFG.max_importance_ratio).flatten() * (
        new - behaviour.flatten()
    ).exp()
    torch.testing.assert_close((new - batch.behaviour_log_probs).exp(), rllib, rtol=1e-5, atol=0)
    clipped = (behaviour - target_log_probs).exp() > CFG.max_importance_ratio
    assert clipped.any() and (~clipped).any()  # both sides of RLlib's clip are checked


@pytest.mark.parametrize("every", [1, 3])
def test_the_target_network_is_copied_every_so_many_updates(every: int) -> None:
    policy, rollout = policy_and_rollout()
    algo = APPO(policy, CFG.model_copy(update={"target_update_every": every}), CFG.num_minibatches)
    for update in range(1, 4):
        algo.update(algo.training_batch(rollout))
        same = all(
            torch.equal(a, b) for a, b in zip(policy.parameters(), algo.target.parameters(), strict=True)
        )
        assert same == (update % every == 0), update
    assert not any(p.requires_grad for p in algo.target.parameters())


@pytest.mark.learning(seeds=10, kept=1)
@pytest.mark.slow
def test_it_learns_cartpole_one_update_behind(tmp_path: Path, seed: int) -> None:
    run = ["train", "--config", str(CARTPOLE), "--seed", str(seed), "algo.name=appo", "collect.processes=1",
           "collect.lag=1",
           "log.tensorboard=false", "log.progress=false"]  # fmt: skip
    result = distrl(*run, "--run-dir", str(tmp_path / "solved"))
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "solved" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["stop_check_return"] >= 495 and rows[-1]["sample_age"] == 1
    report = json.loads(distrl("eval", "--checkpoint", str(tmp_path / "solved"), "--json").stdout)
    assert report["return_mean"] >= 475
    saved = ckpt.tensors_from_bytes(
        ckpt.load_checkpoint(ckpt.resolve_checkpoint(tmp_path / "solved"))["model.safetensors"]
    )
    assert {"policy.actor.0.weight", "target_policy.actor.0.weight"} <= saved.keys()


@pytest.mark.slow
def test_a_resumed_run_has_the_saved_target_network_and_its_cadence(tmp_path: Path) -> None:
    cfg = load_config(CARTPOLE, [
        "algo.name=appo", "algo.target_update_every=3", "env.num_envs=4", "algo.rollout_steps=32",
        "train.total_steps=640", "train.stop_return=null", "log.tensorboard=false",
        "checkpoint.interval_steps=256", "checkpoint.keep_last=5",
    ])  # fmt: skip
    build_training(cfg, TorchComm(), torch.device("cpu"), tmp_path).run()
    files = ckpt.load_checkpoint(tmp_path / "checkpoints" / ckpt.checkpoint_dir_name(512))  # after 4 updates
    resumed = build_training(cfg, TorchComm(), torch.device("cpu"), tmp_path / "resumed", files)
    algo = resumed.runner.algo
    saved = ckpt.tensors_from_bytes(files["model.safetensors"])
    for name, tensor in algo.target.state_dict().items():
        torch.testing.assert_close(tensor, saved[f"target_policy.{name}"], rtol=0, atol=0)
    # Copied at update 3, not 4: the target is not the policy, and the next copy comes after update 6.
    assert algo.updates_done == 4
    assert not torch.equal(saved["target_policy.actor.0.weight"], saved["policy.actor.0.weight"])


def test_between_copies_the_ratios_are_the_target_networks() -> None:
    policy, rollout = policy_and_rollout()
    algo = APPO(policy, CFG.model_copy(update={"target_update_every": 3}), CFG.num_minibatches)
    algo.update(algo.training_batch(rollout))  # the policy moved; the target network did not
    batch = algo.training_batch(rollout)
    obs, actions = rollout.obs.flatten(0, 1), rollout.actions.flatten()
    with torch.no_grad():
        target = algo.target.action_stats(obs, actions)[0]
        current = policy.action_stats(obs, actions)
    assert not torch.allclose(target, current[0], atol=1e-4)
    mu = rollout.behaviour_log_probs.flatten()
    torch.testing.assert_close(batch.behaviour_log_probs, torch.maximum(target, mu - math.log(2.0)))
    torch.testing.assert_close(batch.values, current[2])  # values are always the policy's
