"""Image observations: the Nature CNN reads CHW or HWC uint8 frames, a rollout keeps them as
uint8 (one copy, no float raw copy), and images too small for the encoder, DQN on images and
image normalisation are one line each."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from distrl.collect.base import CollectRequest
from distrl.collect.rollout import ActionNoise, RolloutCollector
from distrl.config.run import load_config
from distrl.config.sections import ModelConfig
from distrl.envs import make_vec_env
from distrl.errors import UserError
from distrl.io import checkpoint as ckpt
from distrl.models.actor_critic import ActorCritic
from distrl.models.encoders import ImpalaCNN, NatureCNN, channels_last
from tests.eval.reference import reference_returns
from tests.helpers import REPO, distrl, train_ranks

CPU = torch.device("cpu")
IMAGES = ["--env", "tests.envs.toy:BrightnessEnv", "--num-envs", "8", "algo.rollout_steps=32",
          "train.stop_return=null", "log.tensorboard=false"]  # fmt: skip
PIXELS = [*IMAGES, "algo.minibatch_size=64"]


@pytest.mark.parametrize(
    ("shape", "channels", "last"),
    [((4, 84, 84), "auto", False), ((84, 84, 4), "auto", True), ((3, 36, 36), "auto", False),
     ((36, 36, 3), "auto", True), ((36, 36, 3), "first", False), ((3, 36, 36), "last", True)],
)  # fmt: skip
def test_the_channel_axis_rule(shape: tuple[int, ...], channels: str, last: bool) -> None:
    assert channels_last(shape, channels) == last


def test_chw_and_hwc_frames_give_the_same_features() -> None:
    """The same weights read a frame and its HWC transpose alike; uint8 is scaled by 1/255."""
    torch.manual_seed(0)
    chw = NatureCNN(gym.spaces.Box(0, 255, (3, 36, 36), np.uint8), ModelConfig())
    hwc = NatureCNN(gym.spaces.Box(0, 255, (36, 36, 3), np.uint8), ModelConfig())
    hwc.load_state_dict(chw.state_dict())
    frames = torch.randint(0, 256, (5, 3, 36, 36), dtype=torch.uint8)
    torch.testing.assert_close(chw(frames), hwc(frames.permute(0, 2, 3, 1)))
    as_floats = NatureCNN(gym.spaces.Box(0.0, 1.0, (3, 36, 36), np.float32), ModelConfig())
    as_floats.load_state_dict(chw.state_dict())
    torch.testing.assert_close(chw(frames), as_floats(frames.float() / 255))


def test_a_rollout_keeps_uint8_frames_once() -> None:
    cfg = load_config(None, ["env.id=tests.envs.toy:BrightnessEnv", "env.num_envs=4", "algo.rollout_steps=8"])
    env = make_vec_env(cfg.env, [0, 1, 2, 3], CPU)
    policy = ActorCritic(env.observation_space, env.action_space, cfg.model)
    collector = RolloutCollector(
        cfg, env, policy, None, None, ActionNoise.for_policy(policy, [1], 4, slice(None), CPU), CPU
    )
    collector.reset()
    segment = collector.collect(CollectRequest(policy_version=0))
    assert segment.obs.dtype == torch.uint8 and segment.obs.shape == (8, 4, 3, 36, 36)
    assert segment.raw_obs.data_ptr() == segment.obs.data_ptr()  # no second copy
    assert collector.storage.obs.nbytes == 8 * 4 * 3 * 36 * 36  # one byte a pixel


@pytest.mark.slow
def test_pixels_train_on_two_ranks(tmp_path: Path) -> None:
    """The pixel config of ``test_pixels_learn_in_either_precision`` trains on 2 ranks."""
    two = train_ranks(2, *PIXELS, "--total-steps", "2048", "--run-dir", str(tmp_path / "two"))
    assert two.returncode == 0, two.stderr
    rows = [json.loads(line) for line in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    assert [row["global_step"] for row in rows] == list(range(256, 2049, 256))  # 8 envs in all x 32
    state = json.loads((ckpt.resolve_checkpoint(tmp_path / "two") / "state.json").read_text())
    assert state["ranks"][0]["param_sha256"] == state["ranks"][1]["param_sha256"]  # gradients shared


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["env.kwargs={size: 24}"],
            "pixels are too small for model.encoder=nature_cnn (at least 36x36; model.encoder=impala_cnn",
        ),
        (["normalize.observations=true"], "normalize.observations=true: image observations are scaled"),
        (["model.encoder=mlp"], "model.encoder=mlp: the observations are images"),
    ],
)
@pytest.mark.slow
def test_bad_image_setups_are_one_line(tmp_path: Path, overrides: list[str], message: str) -> None:
    result = distrl("train", *IMAGES, "--run-dir", str(tmp_path), *overrides, cwd=REPO)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


@pytest.mark.parametrize(("shape", "rows"), [((3, 36, 36), 5), ((84, 84, 4), 2), ((1, 7, 7), 3)])
def test_the_impala_encoder_reads_any_frame_size_into_256_features(shape: tuple[int, ...], rows: int) -> None:
    space = gym.spaces.Box(0, 255, shape, np.uint8)
    encoder = ImpalaCNN(space, ModelConfig(encoder="impala_cnn"))
    frames = torch.randint(0, 256, (rows, *shape), dtype=torch.uint8)
    features = encoder(frames)
    assert features.shape == (rows, 256) and torch.isfinite(features).all()
    features.sum().backward()
    assert all(p.grad is not None for p in encoder.parameters())


@pytest.mark.learning(seeds=5, kept=1)
@pytest.mark.slow
def test_dqn_learns_from_uint8_frames_in_its_replay_buffer(tmp_path: Path, seed: int) -> None:
    """CleanRL's Atari DQN layout (the CNN and one linear layer); chance earns 8 of 16."""
    result = distrl(
        "train", "--seed", str(seed), "--env", "tests.envs.toy:BrightnessEnv", "algo.name=dqn",
        "--num-envs", "4",
        "--total-steps", "6016", "algo.learning_starts=500", "algo.gradient_steps=16",
        "algo.rollout_steps=32", "train.stop_return=null", "log.tensorboard=false",
        "--run-dir", str(tmp_path), cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    evaluated = distrl("eval", "--checkpoint", str(tmp_path), "--episodes", "4", "--json", cwd=REPO)
    assert json.loads(evaluated.stdout)["return_mean"] >= 14


@pytest.mark.parametrize(
    "overrides",
    [["model.encoder=impala_cnn"], ["model.memory=gru", "model.memory_size=32", "algo.bptt_len=8"]],
    ids=["impala", "nature-gru"],
)
@pytest.mark.slow
def test_each_encoder_and_core_trains_on_pixels(tmp_path: Path, overrides: list[str]) -> None:
    result = distrl(
        "train", *PIXELS, "--total-steps", "512", "--run-dir", str(tmp_path), *overrides, cwd=REPO
    )
    assert result.returncode == 0, result.stderr
    # 8 episodes (one batch of 16 steps): enough actions that another policy's would not match by chance.
    evaluated = distrl("eval", "--checkpoint", str(tmp_path), "--episodes", "8", "--json", cwd=REPO)
    assert evaluated.returncode == 0, evaluated.stderr
    # The final checkpoint's policy (its core's state carried step to step), its episodes played
    # again apart from `distrl eval`.
    report = json.loads(evaluated.stdout)
    assert report["global_step"] == 512 and report["returns"] == reference_returns(tmp_path, 8)


def test_an_image_too_small_is_a_user_error() -> None:
    with pytest.raises(UserError, match="too small"):
        NatureCNN(gym.spaces.Box(0, 255, (3, 30, 30), np.uint8), ModelConfig())


def test_mixed_precision_runs_the_encoder_in_bf16_and_the_rest_in_float32() -> None:
    """``train.mixed_precision``: the CNN's convolutions in bfloat16 under autocast, weights,
    features and heads float32; ``auto`` only for image encoders where bf16 is native."""
    from distrl.precision import low_precision, native_bf16

    space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    policy = ActorCritic(space, gym.spaces.Discrete(6), ModelConfig())
    seen = []
    policy.encoder.net[0].register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    frames = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    policy.low_precision = torch.bfloat16
    _, log_probs, values, _ = policy.act(frames, torch.rand(2), policy.initial_state(2))
    assert seen == [torch.bfloat16] and log_probs.dtype == values.dtype == torch.float32
    assert all(p.dtype == torch.float32 for p in policy.parameters())
    policy.low_precision = None
    policy.act(frames, torch.rand(2), policy.initial_state(2))
    assert seen[-1] == torch.float32
    native = native_bf16(CPU)
    assert low_precision("auto", CPU, heavy_model=True) == (torch.bfloat16 if native else None)
    assert low_precision("auto", CPU, heavy_model=False) is None  # feature-vector MLPs stay float32
    assert low_precision("fp32", CPU, heavy_model=True) is None
    assert low_precision("bf16", CPU, heavy_model=True) == torch.bfloat16


@pytest.mark.learning(seeds=5, kept=1)
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.slow
def test_pixels_learn_in_either_precision(tmp_path: Path, precision: str, seed: int) -> None:
    # The brightness task (8 of 16 by chance, 16 reading the pixels) is learnt from uint8 frames:
    # at a learning rate of 1e-3 in 3,072 steps (bf16 is emulated, about 20x slower, on a CPU
    # without bf16 units).
    result = distrl(
        "train", "--seed", str(seed), *PIXELS, "--total-steps", "3072", "algo.learning_rate=1e-3",
        "--run-dir", str(tmp_path),
        f"train.mixed_precision={precision}", cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["episode_return_mean"] >= 13  # 8 by chance, 16 at best
