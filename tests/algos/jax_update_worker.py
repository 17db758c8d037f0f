"""One JAX PPO update on a fixed global batch of 8 steps x 6 envs: alone, on all of it (the test
calls ``write_update`` in its own process); under ``python -m distrl.launch.jax``, each process on
its share of the envs. Writes this process's parameters before and after to
``OUT/rank<r>_before.safetensors`` and ``OUT/rank<r>.safetensors``, and the update's mean gradient
norm (that of the global gradient) to ``OUT/rank<r>_grad_norm.txt``."""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np

from distrl.algos.ppo_jax import Rollout
from distrl.comm.jax_comm import JaxComm
from distrl.config.run import load_config
from distrl.io import checkpoint as ckpt
from distrl.launch.jax_group import connect_jax
from distrl.launch.topology import discover_topology
from distrl.runners.jax_on_policy import JaxPPOLearner

STEPS, ENVS, OBS_DIM = 8, 6, 4


def global_batch() -> tuple[Rollout, np.ndarray]:
    rng = np.random.default_rng(0)
    f32 = np.float32
    rollout = Rollout(
        obs=rng.normal(size=(STEPS, ENVS, OBS_DIM)).astype(f32),
        actions=rng.integers(0, 2, (STEPS, ENVS)).astype(np.int32),
        log_probs=np.log(rng.uniform(0.3, 0.7, (STEPS, ENVS))).astype(f32),
        values=rng.normal(size=(STEPS, ENVS)).astype(f32),
        rewards=rng.normal(1.0, 0.5, (STEPS, ENVS)).astype(f32),
        dones=(rng.random((STEPS, ENVS)) < 0.15).astype(f32),
    )
    return rollout, rng.normal(size=ENVS).astype(f32)


def write_update(comm: JaxComm, out: Path) -> None:
    """Take the update on this rank's share of the batch and write what the module docstring says."""
    # One minibatch per epoch: every rank's part of it is its whole share, whatever its order.
    cfg = load_config(None, ["algo.update_epochs=3", "algo.num_minibatches=1", "algo.learning_rate=0.01"])
    space = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    learner = JaxPPOLearner(cfg, comm, space, gym.spaces.Discrete(2), num_minibatches=1)
    before = learner.train_state().model_tensors()
    (out / f"rank{comm.rank}_before.safetensors").write_bytes(ckpt.tensors_to_bytes(before))
    rollout, last_values = global_batch()
    share = ENVS // comm.world_size
    mine = slice(comm.rank * share, (comm.rank + 1) * share)
    stats = learner.update(Rollout(*(x[:, mine] for x in rollout)), last_values[mine], 0.01, skip=False)
    (out / f"rank{comm.rank}_grad_norm.txt").write_text(repr(float(stats.grad_norm)))
    tensors = learner.train_state().model_tensors()
    (out / f"rank{comm.rank}.safetensors").write_bytes(ckpt.tensors_to_bytes(tensors))


if __name__ == "__main__":
    launched = connect_jax(discover_topology(), timeout_s=60)
    write_update(launched, Path(sys.argv[1]))
    launched.close()
