import json
import os
import platform
import subprocess
import sys

import pytest

from distrl.allocator import USER_SETTINGS, keep_freed_memory

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's thresholds are glibc's")

PPO_UPDATES = """
import json, resource, sys, torch, gymnasium as gym
from distrl.allocator import keep_freed_memory
from distrl.algos.ppo import PPO
from distrl.algos.ppo_config import PPOConfig
from distrl.config.sections import ModelConfig
from distrl.models.actor_critic import ActorCritic
from distrl.storage.rollout import RolloutBatch
if sys.argv[1] == "keep":
    assert keep_freed_memory()
torch.set_num_threads(1)
cfg = PPOConfig(update_epochs=2)
policy = ActorCritic(4, gym.spaces.Discrete(2), ModelConfig(hidden_sizes=[32, 32], activation="elu"))
ppo = PPO(policy, cfg, num_minibatches=4)
rows = 4096 * 16  # Isaac Lab's CartPole rollout: minibatch activations of 2 MiB
batch = RolloutBatch(torch.randn(rows, 4), torch.randint(0, 2, (rows,)).float(), *torch.randn(4, rows))
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
for _ in range(3):  # warm-up: the heap grows to an update's working set
    ppo.update(batch)
start, rss_warm = faults(), rss_mib()
for _ in range(5):
    ppo.update(batch)
print(json.dumps({"faults_per_update": (faults() - start) / 5, "rss_growth_mib": rss_mib() - rss_warm}))
"""


def _run(mode: str) -> dict[str, float]:
    # glibc's own defaults in both: no user malloc settings, no preloaded allocator.
    env = {k: v for k, v in os.environ.items() if k not in (*USER_SETTINGS, "LD_PRELOAD")}
    command = [sys.executable, "-c", PPO_UPDATES, mode]
    result = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    return json.loads(result.stdout)


@glibc_only
@pytest.mark.slow
def test_ppo_updates_reuse_freed_buffers_without_page_faults_or_growth() -> None:
    # By default glibc unmaps (or trims) an update's large freed buffers, and the next minibatch
    # faults their pages in again: tens of thousands of faults per update.
    default, kept = _run("default"), _run("keep")
    assert default["faults_per_update"] > 2000, default
    assert kept["faults_per_update"] < default["faults_per_update"] / 20, (default, kept)
    # Kept for reuse, not leaked: 5 updates that each held on to a 2 MiB buffer would add 40 MiB.
    assert kept["rss_growth_mib"] < 16, kept


@pytest.mark.parametrize("name", USER_SETTINGS)
def test_a_users_own_malloc_settings_are_left_alone(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, "glibc.malloc.trim_threshold=1" if name == "GLIBC_TUNABLES" else "1")
    assert not keep_freed_memory()
