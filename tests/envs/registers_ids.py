"""A stand-in for a third-party package (ale_py, minigrid) that registers its Gymnasium ids when
imported: ``env.imports: [tests.envs.registers_ids]`` makes ``DistrlToy/Counting-v0`` exist."""

import gymnasium as gym

gym.register("DistrlToy/Counting-v0", entry_point="tests.envs.toy:CountingEnv", max_episode_steps=20)
