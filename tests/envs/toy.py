"""A user-style env given as ``tests.envs.toy:CountingEnv``: a counter that never terminates."""

from __future__ import annotations

import os
import time

import gymnasium as gym
import numpy as np


class CountingEnv(gym.Env):
    """Observation = steps taken so far; reward 1 every step; only a time limit ends episodes."""

    def __init__(self, scale: float = 1.0) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.scale = scale
        self.count = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.count = 0
        return self._obs(), {}

    def step(self, action):
        self.count += 1
        return self._obs(), 1.0, False, False, {}

    def _obs(self) -> np.ndarray:
        return np.array([self.count * self.scale, 1.0], dtype=np.float32)


class PacedEnv(CountingEnv):
    """Like CountingEnv, but each step sleeps ``step_s`` first: a run that must last until a
    worker killed mid-run comes back mostly sleeps, leaving the shared cores to other tests."""

    def __init__(self, step_s: float = 0.002) -> None:
        super().__init__()
        self.step_s = step_s

    def step(self, action):
        time.sleep(self.step_s)
        return super().step(action)


class BrokenSensorEnv(CountingEnv):
    """Like CountingEnv, but after ``healthy_steps`` steps every observation is NaN."""

    def __init__(self, healthy_steps: int = 100) -> None:
        super().__init__()
        self.healthy_steps = healthy_steps
        self.total_steps = 0

    def step(self, action):
        self.total_steps += 1
        obs, reward, terminated, truncated, info = super().step(action)
        if self.total_steps > self.healthy_steps:
            obs = np.full_like(obs, np.nan)
        return obs, reward, terminated, truncated, info


class SlowOnRankEnv(CountingEnv):
    """Like CountingEnv, but each step sleeps ``delay_s`` on global rank ``slow_rank`` only: a
    straggler, as on a slower or busier machine."""

    def __init__(self, delay_s: float = 0.002, slow_rank: int = 1) -> None:
        super().__init__()
        self.delay_s = delay_s if os.environ.get("RANK") == str(slow_rank) else 0.0

    def step(self, action):
        time.sleep(self.delay_s)
        return super().step(action)


class CrashingEnv(CountingEnv):
    """Like CountingEnv, but the process stepping it dies at its ``crash_at``-th step, ``crashes``
    times in all (whichever env gets there first creates the next of the marker files
    ``marker``, ``marker.1``, ...): a worker killed mid-rollout, and again when its part is retried
    if ``crash_at`` is within a rollout."""

    def __init__(self, marker: str, crash_at: int = 20, crashes: int = 1) -> None:
        super().__init__()
        self.markers = [marker, *(f"{marker}.{k}" for k in range(1, crashes))]
        self.crash_at = crash_at
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps == self.crash_at:
            for marker in self.markers:
                try:
                    os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                except FileExistsError:
                    continue
                os._exit(1)
        return super().step(action)


class FailingResetEnv(CountingEnv):
    """Like CountingEnv, but its reset raises: a user's env with a bug, found at the first reset."""

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        raise ValueError("a bug in the user's reset")


class BrightnessEnv(gym.Env):
    """A tiny image task: each step shows a uint8 image, bright or dark (a seeded coin), and pays
    1 for action 1 on a bright image and for action 0 on a dark one; 16 steps an episode. A
    policy must read the pixels to beat 8 per episode. ``channels_last``: HWC instead of CHW."""

    def __init__(self, channels: int = 3, channels_last: bool = False, size: int = 36) -> None:
        shape = (size, size, channels) if channels_last else (channels, size, size)
        self.observation_space = gym.spaces.Box(0, 255, shape, np.uint8)
        self.action_space = gym.spaces.Discrete(2)
        self.steps = 0
        self.bright = False

    def _obs(self) -> np.ndarray:
        self.bright = bool(self.np_random.integers(2))
        low, high = (160, 256) if self.bright else (0, 96)
        return self.np_random.integers(low, high, self.observation_space.shape, dtype=np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return self._obs(), {}

    def step(self, action):
        reward = float(int(action) == int(self.bright))
        self.steps += 1
        return self._obs(), reward, False, self.steps >= 16, {}


class DialsEnv(gym.Env):
    """MultiDiscrete actions: two dials (3 and 2 positions); each step shows the target setting
    (one-hot, 5 features) and pays 1 for each dial set to it; 16 steps an episode. Chance earns
    about 13 per episode, reading the targets 32."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0.0, 1.0, (5,), np.float32)
        self.action_space = gym.spaces.MultiDiscrete([3, 2])
        self.steps = 0
        self.target = np.zeros(2, dtype=np.int64)

    def _obs(self) -> np.ndarray:
        self.target = np.array([self.np_random.integers(3), self.np_random.integers(2)])
        obs = np.zeros(5, dtype=np.float32)
        obs[self.target[0]] = obs[3 + self.target[1]] = 1.0
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return self._obs(), {}

    def step(self, action):
        reward = float((np.asarray(action) == self.target).sum())
        self.steps += 1
        return self._obs(), reward, False, self.steps >= 16, {}


class DictCueEnv(gym.Env):
    """Dict observations: copy a cue (0 or 1) as the action; 16 steps an episode, chance earns 8,
    reading the cue 16. Beside the cue, distractors: a float vector, two random bits, and a
    mission text distrl cannot encode (left out with ``env.obs_keys``). ``image``: the cue is
    shown only as a 36x36 uint8 frame's brightness (``frame`` replaces ``cue``)."""

    def __init__(self, image: bool = False) -> None:
        cue = gym.spaces.Box(0, 255, (3, 36, 36), np.uint8) if image else gym.spaces.Discrete(2)
        self.observation_space = gym.spaces.Dict(
            {
                "frame" if image else "cue": cue,
                "noise": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
                "flags": gym.spaces.MultiBinary(2),
                "mission": gym.spaces.Text(8),
            }
        )
        self.action_space = gym.spaces.Discrete(2)
        self.image = image
        self.steps = 0
        self.cue = 0

    def _obs(self) -> dict:
        self.cue = int(self.np_random.integers(2))
        low, high = (160, 256) if self.cue else (0, 96)
        shown = self.np_random.integers(low, high, (3, 36, 36), dtype=np.uint8) if self.image else self.cue
        return {
            "frame" if self.image else "cue": shown,
            "noise": self.np_random.uniform(-1, 1, 2).astype(np.float32),
            "flags": self.np_random.integers(0, 2, 2, dtype=np.int8),
            "mission": "copy",
        }

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return self._obs(), {}

    def step(self, action):
        reward = float(int(action) == self.cue)
        self.steps += 1
        return self._obs(), reward, False, self.steps >= 16, {}


class DriftingObservationEnv(CountingEnv):
    """Like CountingEnv, but from its ``bad_step``-th step its observations break the declared
    space as ``fault`` says: ``shape`` (one value too many), ``dtype`` (text), ``key`` (a Dict
    observation missing a key its space declares) or ``nan``."""

    def __init__(self, fault: str = "shape", bad_step: int = 40) -> None:
        super().__init__()
        self.fault, self.bad_step, self.steps = fault, bad_step, 0
        if fault == "key":
            box = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
            self.observation_space = gym.spaces.Dict({"count": box, "bias": box})

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = super().reset(seed=seed, options=options)
        return self._shaped(obs), info

    def step(self, action):
        self.steps += 1
        obs, reward, terminated, truncated, info = super().step(action)
        if self.steps >= self.bad_step:
            obs = {
                "shape": np.append(obs, 0.0),
                "dtype": np.array(["a", "b"]),
                "key": {"count": obs},
                "nan": np.full_like(obs, np.nan),
            }[self.fault]
            return obs, reward, terminated, truncated, info
        return self._shaped(obs), reward, terminated, truncated, info

    def _shaped(self, obs: np.ndarray):
        return {"count": obs, "bias": obs} if self.fault == "key" else obs
