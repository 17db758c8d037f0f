"""On-device batched classic-control envs (CartPole-v1, Acrobot-v1, Pendulum-v1) as torch tensors."""

from distrl.envs.torch_envs.acrobot import TorchAcrobot
from distrl.envs.torch_envs.base import TorchVecEnv
from distrl.envs.torch_envs.cartpole import TorchCartPole
from distrl.envs.torch_envs.pendulum import TorchPendulum

__all__ = ["TorchAcrobot", "TorchCartPole", "TorchPendulum", "TorchVecEnv"]
