"""What PPO acts with, built from a config and the env's spaces, or read back from a checkpoint
as its deployable form (raw observations in, env actions out, deterministic): its actor-critic
and normalisers (DQN's Q-network: ``algorithms.dqn.networks``). Runners, env workers,
evaluation and export all build them here, through the algorithm registry."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import gymnasium as gym
import torch
from torch import nn

from distrl.envs import make_vec_env
from distrl.envs.dict_obs import PackedDict
from distrl.errors import UserError
from distrl.io import checkpoint as ckpt
from distrl.learner_memory import LearnerParameters
from distrl.models.actor_critic import ActorCritic, DeterministicActor, deployable_actor
from distrl.models.encoders import has_images, is_image
from distrl.models.normalizer import RunningMeanStd
from distrl.moved import moved_name
from distrl.precision import low_precision

if TYPE_CHECKING:
    from distrl.config.run import RunConfig
    from distrl.io.train_state import SavedState


def uses_obs_normalization(
    cfg: RunConfig, observation_space: gym.spaces.Space, action_space: gym.spaces.Space
) -> bool:
    """Explicit setting wins; by default normalise feature vectors for continuous control only.
    Images are never normalised: the encoder scales them. Of a Dict, only feature-vector keys."""
    if isinstance(observation_space, PackedDict) and not observation_space.vector_mask().any():
        if cfg.normalize.observations:
            raise UserError(
                "normalize.observations=true: the observations' keys hold no feature vectors (images, "
                "indices and bits are not normalised); unset it",
                code="model-normalize-no-features",
            )
        return False
    if is_image(observation_space):
        if cfg.normalize.observations:
            raise UserError(
                "normalize.observations=true: image observations are scaled by 1/255 in the encoder, "
                "not normalised; unset it",
                code="model-normalize-images",
            )
        return False
    if cfg.normalize.observations is not None:
        return cfg.normalize.observations
    return isinstance(action_space, gym.spaces.Box)


def ppo_normalizers(
    cfg: RunConfig, observation_space: gym.spaces.Space, action_space: gym.spaces.Space, device: torch.device
) -> tuple[RunningMeanStd | None, RunningMeanStd | None]:
    """The observation statistics and the reward scale the config asks for, on ``device`` (None:
    not used)."""
    normalize = uses_obs_normalization(cfg, observation_space, action_space)
    obs_rms = _obs_normalizer(observation_space).to(device) if normalize else None
    return obs_rms, RunningMeanStd(()).to(device) if cfg.normalize.rewards else None


def _obs_normalizer(observation_space: gym.spaces.Box) -> RunningMeanStd:
    """Statistics of the observations; of a packed Dict, normalising its feature-vector keys only."""
    if isinstance(observation_space, PackedDict):
        return RunningMeanStd(observation_space.shape, only=torch.from_numpy(observation_space.vector_mask()))
    return RunningMeanStd(observation_space.shape)


def ppo_actor_critic(
    cfg: RunConfig, observation_space: gym.spaces.Space, action_space: gym.spaces.Space, device: torch.device
) -> ActorCritic:
    """PPO's actor-critic on ``device`` (a learner's or an env worker's), its encoder in the
    precision ``train.mixed_precision`` gives there."""
    policy = ActorCritic(observation_space, action_space, cfg.model).to(device)
    policy.low_precision = low_precision(cfg.train.mixed_precision, device, has_images(observation_space))
    return policy


def actor_critic_parameters(cfg: RunConfig) -> LearnerParameters:
    """The parameters of the config's actor-critic (one env built for its spaces, the network on
    the meta device), gathered in float32 when sharded (mixed precision is an autocast of its
    encoder)."""
    env = make_vec_env(cfg.env, [0])
    observation_space, action_space = env.observation_space, env.action_space
    env.close()
    policy = ppo_actor_critic(cfg, observation_space, action_space, torch.device("meta"))
    return LearnerParameters(sum(p.numel() for p in policy.parameters()))


def acting_modules(
    policy: nn.Module, obs_rms: RunningMeanStd | None, return_rms: RunningMeanStd | None
) -> dict[str, nn.Module]:
    """The modules a PPO collector acts with, by their checkpoint names (those in use)."""
    named = {"policy": policy, "obs_rms": obs_rms, "return_rms": return_rms}
    return {name: module for name, module in named.items() if module is not None}


def deterministic_actor(
    cfg: RunConfig,
    observation_space: gym.spaces.Space,
    action_space: gym.spaces.Space,
    model_tensors: dict[str, torch.Tensor],
) -> DeterministicActor:
    """The deployable policy held by checkpoint-named tensors (``policy.*``, and ``obs_rms.*``
    when observations were normalised), whichever learner wrote them."""
    policy = ActorCritic(observation_space, action_space, cfg.model)
    policy.load_state_dict(ckpt.strip_prefix(model_tensors, "policy."))
    obs_rms = None
    if rms_tensors := ckpt.strip_prefix(model_tensors, "obs_rms."):
        obs_rms = _obs_normalizer(observation_space)
        obs_rms.load_state_dict(rms_tensors)
    return deployable_actor(policy, obs_rms, cfg.normalize.clip, action_space)


def ppo_policy(cfg: RunConfig, saved: SavedState) -> nn.Module:
    """PPO's deployable policy from a checkpoint (the torch learner's or the JAX learner's: the
    tensors carry the same names)."""
    return deterministic_actor(cfg, saved.observation_space, saved.action_space, saved.tensors)


def __getattr__(name: str) -> Any:
    """Names that moved to an algorithm's package (DQN's), for one release (``distrl.moved``)."""
    return moved_name(__name__, name)
