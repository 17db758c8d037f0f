"""The DD-PPO loop: every rank collects with its own envs and policy copy, gradients are
averaged across ranks, and after each update all ranks hold identical parameters.

``learn()`` reads as the algorithm: collect -> compute returns -> update -> log -> checkpoint.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import time
from collections import deque
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from distrl.algos.ppo import PPO, minibatches_per_epoch
from distrl.comm import Comm
from distrl.config import RunConfig, config_to_dict
from distrl.envs import make_vec_env
from distrl.envs.sharding import shard_envs
from distrl.errors import UserError
from distrl.evaluate import evaluate
from distrl.io import checkpoint as ckpt
from distrl.io.metrics import MetricsLogger, truncate_metrics
from distrl.launch.preemption import PreemptionFlag
from distrl.models.actor_critic import ActorCritic
from distrl.models.normalizer import RunningMeanStd, batch_moments
from distrl.runners.straggler import StragglerCutoff
from distrl.seeding import env_seeds, seed_torch
from distrl.storage.rollout import RolloutStorage

_STOP_CHECK_SEED_OFFSET = 1_000_000


class Preempted(Exception):
    """Training stopped on SIGTERM/SIGUSR1 after every rank agreed and a checkpoint was written."""

    def __init__(self, signal_name: str, global_step: int) -> None:
        super().__init__(f"preempted by {signal_name} at step {global_step}; checkpoint saved")
        self.global_step = global_step


def uses_obs_normalization(cfg: RunConfig, action_space: gym.spaces.Space) -> bool:
    """Explicit setting wins; by default normalise observations for continuous control only."""
    if cfg.normalize.observations is not None:
        return cfg.normalize.observations
    return isinstance(action_space, gym.spaces.Box)


def advantage_sums(advantages: torch.Tensor) -> list[float]:
    """(count, sum, sum of squares) in float64: summed over ranks, they give the global mean and
    variance in the same collective as the update's other per-rank numbers."""
    adv = advantages.double()
    return [float(adv.numel()), float(adv.sum()), float((adv * adv).sum())]


def normalize_advantages(
    advantages: torch.Tensor, count: float, total: float, total_sq: float
) -> torch.Tensor:
    """Standardise with the mean/std of the whole global rollout (from the summed
    ``advantage_sums``), so N ranks match one batch. One-pass float64 moments lose precision
    only when |mean| / std nears 1e8, far from what GAE advantages do."""
    mean = total / count
    std = math.sqrt(max(total_sq - count * mean * mean, 0.0) / max(count - 1.0, 1.0))
    return ((advantages - mean) / (std + 1e-8)).reshape(-1)


class EpisodeTracker:
    """Undiscounted returns and lengths of finished episodes of this rank's envs."""

    def __init__(self, num_envs: int, window: int) -> None:
        self.running_return = np.zeros(num_envs)
        self.running_length = np.zeros(num_envs, dtype=np.int64)
        self.returns: deque[float] = deque(maxlen=window)
        self.lengths: deque[int] = deque(maxlen=window)
        self.finished = 0

    def step(self, rewards: np.ndarray, dones: np.ndarray) -> None:
        self.running_return += rewards
        self.running_length += 1
        for i in np.flatnonzero(dones):
            self.returns.append(float(self.running_return[i]))
            self.lengths.append(int(self.running_length[i]))
            self.running_return[i] = 0.0
            self.running_length[i] = 0
            self.finished += 1


class OnPolicyRunner:
    def __init__(
        self,
        cfg: RunConfig,
        comm: Comm,
        device: torch.device,
        run_dir: Path,
        checkpoint: ckpt.CheckpointFiles | None = None,
    ) -> None:
        """A fresh run, or one resumed from ``checkpoint`` (its files, the same on every rank)."""
        self.cfg = cfg
        self.comm = comm
        self.device = device
        self.run_dir = run_dir
        self.envs = shard_envs(cfg.env, comm.rank, comm.world_size)
        self.num_envs = self.envs.count
        self.steps_per_update = cfg.algo.rollout_steps * self.envs.global_count
        self.global_step = 0
        self.update_index = 0
        self.launch_index = (
            0 if checkpoint is None else json.loads(checkpoint["state.json"])["launch_index"] + 1
        )
        """How many times this run was (re)started; shifts env seeds on resume, so fresh episodes
        after a resume get seeds no earlier launch used."""

        seed_torch(cfg.train.seed, comm.rank)
        self.env = make_vec_env(cfg.env, self._env_seeds())
        obs_dim = self.env.observation_space.shape[0]
        self.policy = ActorCritic(obs_dim, self.env.action_space, cfg.model).to(device)
        comm.broadcast_parameters_(self.policy)
        self.obs_rms = (
            RunningMeanStd((obs_dim,)).to(device)
            if uses_obs_normalization(cfg, self.env.action_space)
            else None
        )
        self.return_rms = RunningMeanStd(()).to(device) if cfg.normalize.rewards else None
        self.algo = PPO(
            self.policy,
            cfg.algo,
            num_minibatches=self._minibatches_per_epoch(),
            gradient_sync=comm.sum_gradients_,
        )
        continuous = self.policy.continuous
        self.storage = RolloutStorage(
            cfg.algo.rollout_steps,
            self.num_envs,
            obs_dim,
            self.env.action_space.shape if continuous else (),
            torch.float32 if continuous else torch.int64,
            device,
        )
        self.raw_obs = np.zeros((cfg.algo.rollout_steps, self.num_envs, obs_dim))
        self.discounted_return = np.zeros(self.num_envs)
        self.raw_returns = np.zeros((cfg.algo.rollout_steps, self.num_envs))
        self.episodes = EpisodeTracker(self.num_envs, cfg.train.return_window)
        self.stragglers = StragglerCutoff(
            comm,
            cfg.train.straggler_threshold,
            cfg.algo.rollout_steps,
            min_steps=math.ceil(self.algo.num_minibatches / self.num_envs),
        )
        self.checkpoint_writer: ckpt.BackgroundWriter | None = None
        """Rank 0's checkpoint writer, open while ``learn()`` runs."""
        self._last_checkpoint = (0, time.monotonic())
        """(global step, monotonic time) of the last checkpoint."""
        self.preemption = PreemptionFlag()
        self.nonfinite_obs_steps = 0
        self.bad_updates_in_a_row = 0
        if checkpoint is not None:
            self._restore(checkpoint)

    # ----------------------------------------------------------------------------- the loop
    def learn(self) -> dict[str, Any]:
        """Train until ``total_steps`` (or ``stop_return``); return the last metrics row.

        Raises ``Preempted`` after saving a checkpoint when any rank got SIGTERM or SIGUSR1.
        """
        logger = self._make_logger()
        if self.comm.is_main:
            self.checkpoint_writer = ckpt.BackgroundWriter(
                self.run_dir / "checkpoints", self.cfg.checkpoint.keep_last
            )
        self.preemption.install()
        obs = self.env.reset()
        if self.global_step == 0:
            self._update_obs_stats(obs)
        start_time, start_step = time.perf_counter(), self.global_step
        self._last_checkpoint = (self.global_step, time.monotonic())
        row: dict[str, Any] = {}
        try:
            while self.global_step < self.cfg.train.total_steps:
                iteration_start = time.perf_counter()
                sync_before = self.comm.grad_sync_time_s
                self._anneal_learning_rate()

                obs, last_values = self.collect(obs)
                collect_s = time.perf_counter() - iteration_start
                losses, collected = self.update(last_values)

                self.update_index += 1
                self.global_step += collected
                iteration_s = time.perf_counter() - iteration_start
                row, agreed = self._metrics_row(
                    losses,
                    sps=(self.global_step - start_step) / (time.perf_counter() - start_time),
                    collect_share=collect_s / iteration_s,
                    grad_sync_share=(self.comm.grad_sync_time_s - sync_before) / iteration_s,
                    rollout_fraction=collected / self.steps_per_update,
                    time_s=time.perf_counter() - start_time,
                )
                solved = self._reached_stop_return(row)
                logger.log(row)
                self._count_bad_updates(row)
                if agreed["preempted"]:
                    self.save_checkpoint()
                    raise Preempted(
                        self.preemption.signal_name or "a signal on another rank", self.global_step
                    )
                if solved:
                    break
                # A skipped update changed nothing worth saving: keep the last good checkpoint newest.
                healthy = not self.bad_updates_in_a_row
                if agreed["checkpoint_due"] and healthy and self.global_step < self.cfg.train.total_steps:
                    self.save_checkpoint()
            self.save_checkpoint()
        finally:
            if self.checkpoint_writer is not None:
                self.checkpoint_writer.close()
            logger.close()
            self.env.close()
        return row

    def update(self, last_values: torch.Tensor) -> tuple[dict[str, float], int]:
        """Merge the rollout into the normalisers, then GAE, advantage normalisation and the PPO
        epochs; return the loss statistics and the env steps collected by all ranks. A rollout
        that saw a non-finite observation on any rank is skipped by all ranks and touches
        neither the normalisers nor the weights."""
        steps = self.storage.step  # fewer than rollout_steps when a straggler was cut short
        batch = self.storage.batch(last_values, self.cfg.algo.gamma, self.cfg.algo.gae_lambda)
        # One sum carries what the update needs from every rank: a non-finite observation
        # anywhere, the samples collected, and the advantages' global moments.
        local = [self.nonfinite_obs_steps, steps * self.num_envs, *advantage_sums(batch.advantages)]
        nonfinite_obs, collected, *adv_sums = self.comm.sum_scalars(local)
        self.stragglers.forget()  # every rank is past collecting: it reached the sum above
        self.nonfinite_obs_steps = 0
        if nonfinite_obs:
            skipped = float(self.cfg.algo.update_epochs * self.algo.num_minibatches)
            return {"skipped_minibatches": skipped}, int(collected)
        self._update_obs_stats(self.raw_obs[:steps].reshape(-1, self.raw_obs.shape[-1]))
        self._update_return_stats(steps)
        if self.cfg.algo.normalize_advantages:
            batch.advantages = normalize_advantages(batch.advantages, *adv_sums)
        return self.algo.update(batch), int(collected)

    def _count_bad_updates(self, row: dict[str, Any]) -> None:
        """Stop once ``train.max_bad_updates`` updates in a row had non-finite numbers."""
        self.bad_updates_in_a_row = self.bad_updates_in_a_row + 1 if row["skipped_minibatches"] else 0
        limit = self.cfg.train.max_bad_updates
        if self.bad_updates_in_a_row >= limit:
            raise UserError(
                f"training stopped at step {self.global_step}: {limit} updates in a row had a non-finite "
                f"loss, gradient or observation and were skipped (set train.max_bad_updates to allow "
                f"more); the last good checkpoint in {self.run_dir / 'checkpoints'} is kept"
            )

    # ----------------------------------------------------------------------------- collect
    def collect(self, obs: np.ndarray) -> tuple[np.ndarray, torch.Tensor]:
        """Fill the rollout buffer from this rank's envs (all ``rollout_steps`` unless the
        straggler cut-off stops it early); return the next obs and its values."""
        cfg = self.cfg
        gamma = cfg.algo.gamma
        self.stragglers.begin(self.update_index)
        for t in range(cfg.algo.rollout_steps):
            if self.stragglers.should_stop(t):
                break
            obs = self._finite(obs)
            self.raw_obs[t] = obs
            obs_t = self._normalize_obs(obs)
            actions, log_probs, values = self.policy.act(obs_t)
            result = self.env.step(self._to_env_actions(actions))
            dones = np.logical_or(result.terminated, result.truncated)
            self.episodes.step(result.reward, dones)

            rewards = self._scale_rewards(result.reward, dones, t)
            # A truncated episode did not end in the MDP: bootstrap from its final observation.
            truncated_only = np.logical_and(result.truncated, ~result.terminated)
            if truncated_only.any():
                with torch.no_grad():
                    final_obs = self._normalize_obs(self._finite(result.final_obs))
                    final_values = self.policy.value(final_obs).cpu().numpy()
                rewards = rewards + gamma * final_values * truncated_only
            self.storage.add(
                obs_t,
                actions,
                log_probs,
                values,
                torch.as_tensor(rewards, dtype=torch.float32, device=self.device),
                torch.as_tensor(dones, dtype=torch.float32, device=self.device),
            )
            obs = result.obs
        self.stragglers.finish()
        with torch.no_grad():
            last_values = self.policy.value(self._normalize_obs(obs))
        return obs, last_values

    def _finite(self, obs: np.ndarray) -> np.ndarray:
        """Count and zero non-finite observations so they never reach the normaliser."""
        if np.isfinite(obs).all():
            return obs
        self.nonfinite_obs_steps += 1
        return np.nan_to_num(obs, nan=0.0, posinf=0.0, neginf=0.0)

    def _to_env_actions(self, actions: torch.Tensor) -> np.ndarray:
        actions_np = actions.cpu().numpy()
        space = self.env.action_space
        if isinstance(space, gym.spaces.Box):
            # Sample stays unclipped in the buffer (its log-prob is exact); the env gets it clipped.
            return np.clip(actions_np, space.low, space.high)
        return actions_np

    # ----------------------------------------------------------------------------- normalisers
    def _normalize_obs(self, obs: np.ndarray) -> torch.Tensor:
        obs_t = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
        if self.obs_rms is None:
            return obs_t
        return self.obs_rms.normalize(obs_t, self.cfg.normalize.clip)

    def _update_obs_stats(self, raw_obs: np.ndarray) -> None:
        """Merge this update's observations from all ranks into the shared statistics."""
        if self.obs_rms is not None:
            self.obs_rms.update_from_moments(
                *self.comm.merge_moments(*batch_moments(torch.as_tensor(raw_obs)))
            )

    def _scale_rewards(self, rewards: np.ndarray, dones: np.ndarray, t: int) -> np.ndarray:
        if self.return_rms is None:
            return rewards
        self.discounted_return = self.discounted_return * self.cfg.algo.gamma + rewards
        self.raw_returns[t] = self.discounted_return
        self.discounted_return[dones] = 0.0
        scaled = self.return_rms.scale(torch.as_tensor(rewards), self.cfg.normalize.clip)
        return scaled.numpy()

    def _update_return_stats(self, steps: int) -> None:
        if self.return_rms is not None:
            moments = batch_moments(torch.as_tensor(self.raw_returns[:steps].reshape(-1)))
            self.return_rms.update_from_moments(*self.comm.merge_moments(*moments))

    def _minibatches_per_epoch(self) -> int:
        """The size rule (README, "Adding ranks"): the global minibatch stays ``minibatch_size``
        however many ranks there are, so each rank's share of a minibatch shrinks as ranks grow."""
        rollout = self.cfg.algo.rollout_steps
        count = minibatches_per_epoch(self.cfg.algo, rollout * self.envs.global_count)
        smallest_rank_batch = rollout * self.envs.min_count
        if count > smallest_rank_batch:
            raise UserError(
                f"algo.minibatch_size={self.cfg.algo.minibatch_size} gives {count} minibatches per epoch, "
                f"more than the {smallest_rank_batch} samples a rank collects per update; raise it to at "
                f"least {self.comm.world_size}"
            )
        return count

    def _anneal_learning_rate(self) -> None:
        lr = self.cfg.algo.learning_rate
        if self.cfg.algo.anneal_lr:
            # By global step, so the schedule survives a resume on a different number of ranks.
            lr *= max(1.0 - self.global_step / self.cfg.train.total_steps, 0.0)
        self.algo.set_learning_rate(lr)

    # ----------------------------------------------------------------------------- logging
    def _metrics_row(
        self, losses: dict[str, float], **timing: float
    ) -> tuple[dict[str, Any], dict[str, bool]]:
        """One row per update, reduced over all ranks in a single collective that also carries
        the stop flags every rank must agree on: a preemption signal on any rank, and rank 0's
        verdict that a checkpoint is due (its clock alone decides time-based intervals)."""
        ep = self.episodes
        loss_keys = sorted(losses)
        local = [
            float(self.preemption.raised),
            float(self.comm.is_main and self._checkpoint_due()),
            sum(ep.returns),
            len(ep.returns),
            sum(ep.lengths),
            ep.finished,
            *(losses[k] for k in loss_keys),
        ]
        total = self.comm.sum_scalars(local)
        agreed = {"preempted": total[0] > 0, "checkpoint_due": total[1] > 0}
        window_sum, window_count, length_sum, finished = total[2:6]
        row: dict[str, Any] = {
            "global_step": self.global_step,
            "update": self.update_index,
            "episode_return_mean": window_sum / window_count if window_count else math.nan,
            "episode_length_mean": length_sum / window_count if window_count else math.nan,
            "episodes": int(finished),
            "learning_rate": self.algo.optimizer.param_groups[0]["lr"],
            **{k: v / self.comm.world_size for k, v in zip(loss_keys, total[6:], strict=True)},
            **timing,
        }
        row["recent_episodes"] = int(window_count)
        return row, agreed

    def _checkpoint_due(self) -> bool:
        step, when = self._last_checkpoint
        minutes = self.cfg.checkpoint.interval_minutes
        return self.global_step - step >= self.cfg.checkpoint.interval_steps or (
            minutes is not None and time.monotonic() - when >= 60 * minutes
        )

    def _reached_stop_return(self, row: dict[str, Any]) -> bool:
        """Evaluate the (identical) policy deterministically, the episodes split over the ranks,
        and stop every rank on the mean over all of them. A check that reaches the target is
        confirmed on ``stop_confirm_episodes`` more episodes before training stops."""
        target = self.cfg.train.stop_return
        if target is None or self.update_index % self.cfg.train.stop_check_every:
            return False
        # Seeds kept apart from eval.seed's so the final `distrl eval` is not the stop test.
        seed = self.cfg.eval.seed + _STOP_CHECK_SEED_OFFSET
        episodes = self.cfg.eval.episodes
        total = self._evaluate_split(episodes, seed)
        row["stop_check_return"] = total / episodes
        confirm = self.cfg.train.stop_confirm_episodes
        if row["stop_check_return"] >= target and confirm:
            total += self._evaluate_split(confirm, seed + episodes)
            row["stop_check_return"] = total / (episodes + confirm)
        return row["stop_check_return"] >= target

    def _evaluate_split(self, episodes: int, seed: int) -> float:
        """Sum of the returns of ``episodes`` deterministic episodes (episode i seeded ``seed + i``),
        each rank running its share; every rank gets the same sum."""
        rank, world_size = self.comm.rank, self.comm.world_size
        first, end = rank * episodes // world_size, (rank + 1) * episodes // world_size
        returns = evaluate(self.cfg, self.policy, self.obs_rms, end - first, seed + first)
        return self.comm.sum_scalars([sum(returns)])[0]

    def _make_logger(self) -> MetricsLogger:
        main = self.comm.is_main
        if main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            truncate_metrics(self.run_dir, self.global_step)
        return MetricsLogger(
            self.run_dir,
            enabled=main,
            tensorboard=self.cfg.log.tensorboard,
            total_steps=self.cfg.train.total_steps,
            progress=self.cfg.log.progress,
        )

    def _env_seeds(self) -> list[int]:
        return env_seeds(self.cfg.train.seed, self.envs, start_index=self.launch_index)

    # ----------------------------------------------------------------------------- checkpoints
    def save_checkpoint(self) -> None:
        """Collective: every rank contributes its RNG state and parameter digest; rank 0 writes."""
        rng = base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode()
        digest = self.parameter_digest()
        per_rank = [
            json.loads(b)
            for b in self.comm.all_gather_bytes(
                json.dumps({"torch_rng": rng, "param_sha256": digest}).encode()
            )
        ]
        digests = {r["param_sha256"] for r in per_rank}
        if len(digests) != 1:
            raise RuntimeError(f"ranks hold different parameters at step {self.global_step}: {digests}")
        if self.checkpoint_writer is not None:
            self.checkpoint_writer.submit(self.global_step, self.state_files(per_rank))
        self._last_checkpoint = (self.global_step, time.monotonic())

    def parameter_digest(self) -> str:
        sha = hashlib.sha256()
        for name, tensor in self.policy.state_dict().items():
            sha.update(name.encode())
            sha.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        return sha.hexdigest()

    def state_files(self, per_rank: list[dict[str, str]]) -> ckpt.CheckpointFiles:
        model = {f"policy.{k}": v for k, v in self.policy.state_dict().items()}
        for prefix, rms in (("obs_rms", self.obs_rms), ("return_rms", self.return_rms)):
            if rms is not None:
                model.update({f"{prefix}.{k}": v for k, v in rms.state_dict().items()})
        optim_state = self.algo.optimizer.state_dict()
        optim_tensors = {
            f"{idx}.{key}": torch.as_tensor(value)
            for idx, state in optim_state["state"].items()
            for key, value in state.items()
        }
        state = {
            "global_step": self.global_step,
            "update_index": self.update_index,
            "launch_index": self.launch_index,
            "world_size": self.comm.world_size,
            "config": config_to_dict(self.cfg),
            "optimizer_param_groups": optim_state["param_groups"],
            "ranks": per_rank,
        }
        return {
            "model.safetensors": ckpt.tensors_to_bytes(model),
            "optimizer.safetensors": ckpt.tensors_to_bytes(optim_tensors),
            "state.json": ckpt.json_to_bytes(state),
        }

    def _restore(self, files: ckpt.CheckpointFiles) -> None:
        """Load a checkpoint's state on every rank (the files came from rank 0)."""
        state = json.loads(files["state.json"])
        model = ckpt.tensors_from_bytes(files["model.safetensors"])
        self.policy.load_state_dict(ckpt.strip_prefix(model, "policy."))
        for prefix, rms in (("obs_rms", self.obs_rms), ("return_rms", self.return_rms)):
            if rms is not None:
                rms.load_state_dict(ckpt.strip_prefix(model, f"{prefix}."))
        optim_tensors = ckpt.tensors_from_bytes(files["optimizer.safetensors"])
        optim_state: dict[int, dict[str, torch.Tensor]] = {}
        for key, value in optim_tensors.items():
            idx, name = key.split(".", 1)
            optim_state.setdefault(int(idx), {})[name] = value
        self.algo.optimizer.load_state_dict(
            {"state": optim_state, "param_groups": state["optimizer_param_groups"]}
        )
        self.global_step = state["global_step"]
        self.update_index = state["update_index"]
        ranks = state["ranks"]
        if self.comm.rank < len(ranks):
            rng = base64.b64decode(ranks[self.comm.rank]["torch_rng"])
            torch.set_rng_state(torch.frombuffer(bytearray(rng), dtype=torch.uint8))
