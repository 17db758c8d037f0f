"""A user's own batched torch env, written the way Isaac Lab envs reach rsl_rl: rsl_rl's VecEnv
interface (``num_envs``, ``num_actions``, ``get_observations()``, ``step(actions) -> (obs,
rewards, dones, extras)`` with ``extras["time_outs"]``), observations as a dict of groups.

Train it with ``env.backend: torch`` and ``env.id: examples.isaac_style_cartpole:IsaacStyleCartPole``
(from the repository root, so that ``examples`` is importable). Like rsl_rl's policies, the
action is continuous: one number per env, pushing the cart right when positive and left otherwise.
The dynamics are distrl's batched CartPole-v1, so results compare with the built-in backend.
"""

from __future__ import annotations

import torch

from distrl.envs.torch_envs import TorchCartPole


class IsaacStyleCartPole:
    num_actions = 1
    max_episode_length = 500

    def __init__(self, num_envs: int, device: torch.device | str = "cpu", seed: int = 0) -> None:
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.cfg: dict = {}
        self._cartpole = TorchCartPole(num_envs, device=self.device, seed=seed)
        self._obs = self._cartpole.reset()
        self.episode_length_buf = self._cartpole.episode_steps

    def get_observations(self) -> dict[str, torch.Tensor]:
        return {"policy": self._obs}

    def step(
        self, actions: torch.Tensor
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        push_right = (actions[:, 0] > 0).long()
        result = self._cartpole.step(push_right)
        self._obs = result.obs
        self.episode_length_buf = self._cartpole.episode_steps
        dones = result.terminated | result.truncated
        # A time-out that coincides with a real termination is a termination.
        time_outs = result.truncated & ~result.terminated
        return {"policy": result.obs}, result.reward, dones, {"time_outs": time_outs}
