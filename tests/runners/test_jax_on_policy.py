"""PPO with the JAX learner (``ml_framework: jax``) through the shared loop: it solves CartPole,
trains on 2 processes under distrl's JAX launcher, resumes, and its checkpoints evaluate and
export with the torch tools."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from distrl.comm.jax_comm import JaxComm
from distrl.config.run import load_config
from distrl.entry import build_training
from distrl.io import checkpoint as ckpt
from tests.helpers import CARTPOLE, distrl

pytest.importorskip("jax", reason="the jax extra is installed by make test")
QUIET = ["log.tensorboard=false", "log.progress=false"]


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.learning(seeds=10, kept=1)
@pytest.mark.slow
def test_jax_ppo_solves_cartpole_and_its_checkpoint_evaluates_and_exports(tmp_path: Path, seed: int) -> None:
    run = tmp_path / "run"
    result = distrl(
        "train", "--config", str(CARTPOLE), "--seed", str(seed), "--run-dir", str(run),
        "--ml-framework", "jax", *QUIET,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert _rows(run)[-1]["stop_check_return"] >= 495  # stopped by the stop rule, not the budget
    evaluated = distrl("eval", "--checkpoint", str(run), "--episodes", "10", "--json")
    assert evaluated.returncode == 0, evaluated.stderr
    assert json.loads(evaluated.stdout)["return_mean"] >= 475
    out = tmp_path / "policy.pt"
    assert (
        distrl("export", "--checkpoint", str(run), "--format", "torchscript", "--out", str(out)).returncode
        == 0
    )
    policy = torch.jit.load(str(out))
    assert policy(torch.zeros(3, 4)).shape == (3,)


@pytest.mark.slow
def test_resume_restores_parameters_optimiser_and_keys(tmp_path: Path) -> None:
    cfg = load_config(
        CARTPOLE,
        ["ml_framework=jax", "train.total_steps=2048", "train.stop_return=null",
         "checkpoint.interval_steps=1024", "checkpoint.keep_last=5", *QUIET],
    )  # fmt: skip
    full = build_training(cfg, JaxComm(), torch.device("cpu"), tmp_path / "full")
    full.run()
    files = ckpt.load_checkpoint(tmp_path / "full" / "checkpoints" / ckpt.checkpoint_dir_name(1024))
    resumed = build_training(cfg, JaxComm(), torch.device("cpu"), tmp_path / "resumed", files)
    assert (resumed.global_step, resumed.update_index) == (1024, 2)
    state = resumed.runner.train_state()
    saved_model = ckpt.tensors_from_bytes(files["model.safetensors"])
    saved_optim = ckpt.tensors_from_bytes(files["optimizer.safetensors"])
    for name, tensor in state.model_tensors().items():
        torch.testing.assert_close(tensor, saved_model[name], rtol=0, atol=0)
    for name, tensor in state.optimizer_state()[0].items():
        torch.testing.assert_close(tensor, saved_optim[name], rtol=0, atol=0)
    saved_key = json.loads(files["state.json"])["ranks"][0]["runner"]["jax_key"]
    assert resumed.runner.rank_state()["jax_key"] == saved_key
    resumed.run()
    assert [r["update"] for r in _rows(tmp_path / "resumed")] == [3, 4]


@pytest.mark.parametrize(
    ("override", "key"),
    [("normalize.rewards=true", "normalize.rewards"), ("data.path=/nowhere", "trains ppo online")],
)
@pytest.mark.slow
def test_what_the_jax_learner_does_not_do_is_one_line(tmp_path: Path, override: str, key: str) -> None:
    result = distrl(
        "train",
        "--config",
        str(CARTPOLE),
        "--run-dir",
        str(tmp_path / "r"),
        "--ml-framework",
        "jax",
        override,
    )
    assert result.returncode == 2
    assert key in result.stderr and len(result.stderr.strip().splitlines()) == 1
