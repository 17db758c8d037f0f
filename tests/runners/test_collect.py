"""Rollout collection and what the update takes from it: truncated episodes bootstrap from their
final observation; advantages are standardised over the global rollout."""

import math

import pytest
import torch

from distrl.comm import TorchComm
from distrl.config.run import load_config
from distrl.entry import build_training
from distrl.runners.base import IterationResult, RunContext
from distrl.runners.on_policy import OnPolicyRunner, advantage_sums, normalize_advantages
from tests.helpers import REPO


@pytest.mark.parametrize("memory", ["none", "gru"])
def test_truncation_bootstraps_with_the_value_of_the_final_observation(memory: str) -> None:
    """With memory, the final observation is valued with the state the episode had after its
    last step (not the reset state the next episode starts from)."""
    cfg = load_config(
        None,
        [
            "env.id=tests.envs.toy:CountingEnv",
            "env.max_episode_steps=3",
            "env.num_envs=2",
            "algo.rollout_steps=6",
            "algo.gamma=0.5",
            "normalize.observations=false",
            f"model.memory={memory}",
        ],
    )
    runner = OnPolicyRunner(RunContext(cfg, TorchComm(), torch.device("cpu")))
    runner.start(fresh=True)
    rollout = runner.collect()
    policy = runner.policy
    final_obs = torch.tensor([[3.0, 1.0]])
    bootstraps = []
    with torch.no_grad():
        for t in (2, 5):  # steps 2 and 5 end an episode by truncation
            _, episode_state = policy.remember(rollout.obs[t, :1], rollout.memory_states[t, :1])
            bootstraps.append(1.0 + 0.5 * float(policy.value(final_obs, episode_state)))
            if memory != "none":
                reset_value = 1.0 + 0.5 * float(policy.value(final_obs, policy.initial_state(1)))
                assert abs(bootstraps[-1] - reset_value) > 1e-4  # the two states give other values
    # Reward 1 plus gamma * V(final obs).
    expected = torch.tensor([1.0, 1.0, bootstraps[0], 1.0, 1.0, bootstraps[1]])
    for env_index in range(2):
        torch.testing.assert_close(rollout.rewards[:, env_index], expected)
        assert rollout.dones[:, env_index].tolist() == [0, 0, 1, 0, 0, 1]
    runner.episodes.stats()
    assert list(runner.episodes.returns) == [3.0, 3.0, 3.0, 3.0]


REPLAY = ["algo.gradient_steps=2", "algo.batch_size=16"]


@pytest.mark.parametrize(
    ("config", "overrides", "updates"),
    [
        ("cartpole_ppo.yaml", ["algo.minibatch_size=32"], 3),
        # The first iteration collects 32 steps, short of learning_starts: no update.
        ("cartpole_dqn.yaml", ["algo.rollout_steps=8", "algo.learning_starts=64", *REPLAY], 2),
        ("pendulum_sac.yaml", ["algo.rollout_steps=8", "algo.learning_starts=0", *REPLAY], 3),
        ("pendulum_td3.yaml", ["algo.rollout_steps=8", "algo.learning_starts=0", *REPLAY], 3),
    ],
    ids=["ppo", "dqn", "sac", "td3"],
)
def test_a_segment_collected_after_n_updates_carries_version_n(
    config: str, overrides: list[str], updates: int, tmp_path
) -> None:
    """A rank's own envs act with the live weights: their segments carry the learner's update
    count (tests/ray/test_env_workers.py: env workers' carry the version they were sent)."""
    cfg = load_config(REPO / "configs" / config, ["env.num_envs=4", "log.tensorboard=false", *overrides])
    runner = build_training(cfg, TorchComm(), torch.device("cpu"), tmp_path).runner
    runner.start(fresh=True)
    step = 0
    for _ in range(3):
        step += runner.iteration(step).env_steps
    segment = runner.collect() if config == "cartpole_ppo.yaml" else runner.collect(runner.exploration(step))
    assert runner.policy_version == segment.policy_version == updates
    runner.close()


def test_advantages_normalised_from_summed_moments_match_the_two_pass_statistics() -> None:
    adv = torch.randn(1000, generator=torch.Generator().manual_seed(0)) * 30 + 50
    normalized = normalize_advantages(adv, *advantage_sums(adv))
    expected = (adv.double() - adv.double().mean()) / adv.double().std()
    torch.testing.assert_close(normalized.double(), expected, rtol=0, atol=1e-5)


def test_every_normaliser_path_runs_on_the_machines_device(tmp_path) -> None:
    """Observation and reward normalisation on cuda when the machine has it, else the CPU: the
    statistics live on the rank's device while Gymnasium's rewards come back as CPU tensors."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cfg = load_config(
        REPO / "configs" / "pendulum_ppo.yaml",
        ["env.num_envs=2", "algo.rollout_steps=64", "train.total_steps=512", "log.tensorboard=false"],
    )
    assert cfg.normalize.observations and cfg.normalize.rewards
    loop = build_training(cfg, TorchComm(), device, tmp_path)
    row = loop.run()
    runner = loop.runner
    assert row["global_step"] == 512 and math.isfinite(row["value_loss"])
    # The first reset's 2 observations count too; returns count only the 512 steps.
    for rms, count in ((runner.obs_rms, 514), (runner.return_rms, 512)):
        assert rms.mean.device.type == device.type and float(rms.count) == count


@pytest.mark.parametrize("config", ["cartpole_ppo.yaml", "pendulum_ppo.yaml", "cartpole_dqn.yaml"])
@pytest.mark.slow
def test_a_torch_env_rollout_never_goes_through_numpy(
    config: str, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``env.backend: torch`` collection, storage, normalisers and the update stay in
    tensors on the rank's device: any conversion to numpy during an iteration fails the run
    (checkpoints, written between iterations, may go through numpy)."""
    overrides = [
        "env.backend=torch", "env.num_envs=4", "train.total_steps=1024", "train.stop_return=null",
        "log.tensorboard=false", "checkpoint.interval_steps=100000",
    ]  # fmt: skip
    if config == "cartpole_dqn.yaml":
        overrides.append("algo.learning_starts=0")  # so the update runs too
    cfg = load_config(REPO / "configs" / config, overrides)
    loop = build_training(cfg, TorchComm(), torch.device("cpu"), tmp_path)
    iteration = loop.runner.iteration
    iterations = []

    def no_numpy(self: torch.Tensor, *args: object, **kwargs: object) -> None:
        raise AssertionError("a rollout tensor went through numpy")

    def iteration_without_numpy(global_step: int) -> IterationResult:
        with monkeypatch.context() as patch:
            patch.setattr(torch.Tensor, "numpy", no_numpy)
            patch.setattr(torch.Tensor, "__array__", no_numpy)
            iterations.append(global_step)
            return iteration(global_step)

    monkeypatch.setattr(loop.runner, "iteration", iteration_without_numpy)
    assert loop.run()["global_step"] >= 1024 and iterations
