import gymnasium as gym
import numpy as np
import pytest

from distrl.envs.spaces import space_from_json, space_to_json


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.Discrete(3),
        gym.spaces.Box(-2.0, 2.0, (1,), dtype=np.float32),
        gym.spaces.Box(np.array([-np.inf, 0.0]), np.array([np.inf, 1.0]), dtype=np.float64),
    ],
)
def test_spaces_survive_json(space: gym.spaces.Space) -> None:
    assert space_from_json(space_to_json(space)) == space
