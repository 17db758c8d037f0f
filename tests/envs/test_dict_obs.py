"""Dict observations packed into one tensor (``distrl.envs.dict_obs``): the layout follows
``env.obs_keys``, uint8 when every key fits a byte; keys distrl cannot encode are one line that
says how to leave them out; a policy reads each key (images through a CNN, indices one-hot),
normalises feature-vector keys only, and trains, evaluates, exports and resumes from the packed
tensor; MiniGrid's shipped config solves its room."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from distrl.config.sections import ModelConfig
from distrl.envs.dict_obs import PackedDict
from distrl.envs.spaces import space_from_json, space_to_json
from distrl.eval.policy import load_policy
from distrl.models.encoders import DictEncoder
from tests.helpers import REPO, distrl

CUE = ["--env", "tests.envs.toy:DictCueEnv", "--num-envs", "8", "algo.rollout_steps=32",
       "algo.minibatch_size=64", "train.stop_return=null", "log.tensorboard=false"]  # fmt: skip
KEYS = "env.obs_keys=[cue,noise,flags]"
MINIGRID = REPO / "configs" / "minigrid_empty_ppo.yaml"


def test_keys_are_laid_out_in_order_in_one_byte_when_they_fit() -> None:
    frame = gym.spaces.Box(0, 255, (2, 3, 3), np.uint8)
    small = PackedDict(
        {"direction": gym.spaces.Discrete(4, start=1), "frame": frame, "bits": gym.spaces.MultiBinary(3)}
    )
    assert small.dtype == np.uint8 and small.shape == (1 + 18 + 3,)
    assert small.slices == {"direction": slice(0, 1), "frame": slice(1, 19), "bits": slice(19, 22)}
    rows = {
        "bits": np.ones((2, 3), np.int8),
        "frame": np.full((2, 2, 3, 3), 7, np.uint8),
        "direction": np.array([4, 1]),
    }
    packed = small.pack(rows)
    assert packed.dtype == np.uint8 and packed[:, 0].tolist() == [4, 1] and (packed[:, 1:19] == 7).all()
    assert small.pack({k: v[0] for k, v in rows.items()}, batched=False).tolist() == packed[0].tolist()
    with_floats = PackedDict({"frame": frame, "speed": gym.spaces.Box(-1, 1, (2,), np.float32)})
    assert with_floats.dtype == np.float32 and with_floats.vector_mask().tolist() == [False] * 18 + [True] * 2
    # The order survives a checkpoint's JSON (its objects are written with sorted keys).
    again = space_from_json(json.loads(json.dumps(space_to_json(small), sort_keys=True)))
    assert list(again.entries) == ["direction", "frame", "bits"] and again == small
    assert again.entries["direction"].start == 1
    reordered = PackedDict(
        {"frame": frame, "direction": gym.spaces.Discrete(4, start=1), "bits": gym.spaces.MultiBinary(3)}
    )
    assert reordered != small  # another order is another layout
    # A feature-vector key of bytes is packed as float32 all the same: normalisation may touch it.
    assert PackedDict({"frame": frame, "counts": gym.spaces.Box(0, 9, (2,), np.uint8)}).dtype == np.float32


def test_the_encoder_reads_each_key() -> None:
    space = PackedDict(
        {"frame": gym.spaces.Box(0, 255, (3, 36, 36), np.uint8), "direction": gym.spaces.Discrete(3, start=1)}
    )
    encoder = DictEncoder(space, ModelConfig())
    assert list(encoder.images) == ["frame"] and encoder.features == 512 + 3
    obs = torch.from_numpy(
        space.pack({"frame": np.zeros((2, 3, 36, 36), np.uint8), "direction": np.array([1, 3])})
    )
    features = encoder(obs)
    assert features[:, 512:].tolist() == [[1, 0, 0], [0, 0, 1]]  # one-hot of the index minus start
    flat = DictEncoder(space, ModelConfig(encoder="mlp"))  # symbolic grids: values as they are
    assert not flat.images and flat.features == 3 * 36 * 36 + 3


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([], "observation key 'mission' is a Text space, which distrl cannot encode (Box, Discrete or "
         "MultiBinary keys only); leave it out with env.obs_keys=[cue, flags, noise]"),
        (["env.obs_keys=[cue,colour]"], "env.obs_keys: 'colour' not in env 'tests.envs.toy:DictCueEnv'"),
        (["--env", "CartPole-v1", "env.obs_keys=[cue]"], "env 'CartPole-v1''s observations are"),
    ],
)  # fmt: skip
def test_keys_that_cannot_be_packed_are_one_line(tmp_path: Path, overrides: list[str], message: str) -> None:
    result = distrl("train", *CUE, "--run-dir", str(tmp_path), *overrides, cwd=REPO)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.learning(seeds=5, kept=1)
@pytest.mark.slow
def test_a_dict_policy_trains_evaluates_exports_and_normalises_vectors_only(
    tmp_path: Path, seed: int
) -> None:
    run = tmp_path / "run"
    result = distrl(
        "train",
        *CUE,
        KEYS,
        "normalize.observations=true",
        "--seed",
        str(seed),
        "--total-steps",
        "4096",
        "--run-dir",
        str(run),
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    evaluated = distrl("eval", "--checkpoint", str(run), "--episodes", "4", "--json", cwd=REPO)
    assert evaluated.returncode == 0, evaluated.stderr
    assert json.loads(evaluated.stdout)["return_mean"] >= 14  # it reads the cue: chance is 8
    loaded = load_policy(run)
    obs_rms = loaded.policy.obs_rms
    packed = torch.tensor([[1.0, 0.5, -0.5, 1.0, 0.0]])  # cue, noise (2), flags (2)
    normalized = obs_rms.normalize(packed, 10.0)
    assert normalized[0, [0, 3, 4]].tolist() == [1.0, 1.0, 0.0]  # the index and the bits as they are
    assert not torch.equal(normalized[0, 1:3], packed[0, 1:3])  # the float vector normalised
    out = tmp_path / "policy.pt"
    exported = distrl("export", "--checkpoint", str(run), "--format", "torchscript", "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    assert torch.equal(torch.jit.load(str(out))(packed), loaded.policy(packed))
    resumed = distrl(
        "train",
        *CUE,
        KEYS,
        "normalize.observations=true",
        "--total-steps",
        "6144",
        "--run-dir",
        str(run),
        "--resume",
        cwd=REPO,
    )
    assert resumed.returncode == 0, resumed.stderr


@pytest.mark.learning(seeds=5, kept=1)
@pytest.mark.slow
def test_images_in_a_dict_go_through_the_cnn(tmp_path: Path, seed: int) -> None:
    result = distrl(
        "train", *CUE, "--seed", str(seed), "env.kwargs={image: true}", "env.obs_keys=[frame,noise,flags]",
        "--total-steps", "8192", "--run-dir", str(tmp_path), cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    evaluated = distrl("eval", "--checkpoint", str(tmp_path), "--episodes", "4", "--json", cwd=REPO)
    assert json.loads(evaluated.stdout)["return_mean"] >= 14


@pytest.mark.learning(seeds=5)  # make test: the Dict paths above; MiniGrid's ids: test_vec_env
@pytest.mark.slow
def test_the_shipped_minigrid_config_solves_the_empty_room(tmp_path: Path, seed: int) -> None:
    pytest.importorskip("minigrid", reason="the minigrid extra is installed by make test")
    result = distrl(
        "train", "--config", str(MINIGRID), "--seed", str(seed), "--run-dir", str(tmp_path),
        "log.tensorboard=false",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    evaluated = distrl("eval", "--checkpoint", str(tmp_path), "--json")
    assert json.loads(evaluated.stdout)["return_mean"] >= 0.9  # the shortest path earns 0.955
