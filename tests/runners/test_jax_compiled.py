"""PPO on gymnax envs with the JAX learner: rollout and update compiled into one call. It takes
the same steps as the host-stepped JAX runner on the same envs, solves CartPole, and runs on 2
processes under distrl's JAX launcher."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("gymnax", reason="the jax extra is installed by make test")

from distrl.comm.jax_comm import JaxComm  # noqa: E402
from distrl.config.run import load_config  # noqa: E402
from distrl.eval.episodes import evaluate  # noqa: E402
from distrl.eval.policy import load_policy
from distrl.runners.base import RunContext  # noqa: E402
from distrl.runners.jax_compiled import JaxCompiledRunner  # noqa: E402
from distrl.runners.jax_on_policy import JaxOnPolicyRunner  # noqa: E402
from tests.helpers import CARTPOLE, distrl, jax_launch  # noqa: E402

QUIET = ["log.tensorboard=false", "log.progress=false"]
GYMNAX = ["ml_framework=jax", "env.backend=gymnax", *QUIET]


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_the_compiled_iteration_takes_the_host_runners_steps() -> None:
    """Same seeds, same key chains: the compiled rollout and update equal the host-stepped ones
    (time limits included: a 20-step limit truncates during the rollouts)."""
    cfg = load_config(CARTPOLE, [*GYMNAX, "env.num_envs=8", "env.max_episode_steps=20"])
    runners = [
        cls(RunContext(cfg, JaxComm(), torch.device("cpu"))) for cls in (JaxOnPolicyRunner, JaxCompiledRunner)
    ]
    results = []
    for runner in runners:
        runner.start(fresh=True)
        results.append([runner.iteration(i * 512) for i in range(3)])
    host, compiled = (r.train_state().model_tensors() for r in runners)
    for name, tensor in host.items():
        torch.testing.assert_close(compiled[name], tensor, rtol=1e-4, atol=1e-5)
    for host_result, compiled_result in zip(*results, strict=True):
        # Episodes ended so far (the host runner's recent-episode window differs by design).
        assert compiled_result.episodes.finished == host_result.episodes.finished > 0
        assert compiled_result.averaged["approx_kl"] == pytest.approx(
            host_result.averaged["approx_kl"], rel=1e-3
        )


@pytest.mark.learning(seeds=3)
@pytest.mark.slow
def test_compiled_ppo_solves_gymnax_cartpole_and_plays_gymnasiums(tmp_path: Path, seed: int) -> None:
    run = tmp_path / "run"
    result = distrl("train", "--config", str(CARTPOLE), "--seed", str(seed), "--run-dir", str(run), *GYMNAX)
    assert result.returncode == 0, result.stderr[-3000:]
    assert _rows(run)[-1]["stop_check_return"] >= 495
    # The dynamics are Gymnasium's: the policy plays Gymnasium's CartPole-v1 as well.
    loaded = load_policy(run)
    gymnasium_cfg = loaded.cfg.model_copy(
        update={"env": loaded.cfg.env.model_copy(update={"backend": "gymnasium"})}
    )
    assert sum(evaluate(gymnasium_cfg, loaded.policy, 10, seed=0)) / 10 >= 475


@pytest.mark.slow
def test_two_processes_run_the_compiled_path_through_the_launcher(tmp_path: Path) -> None:
    run = tmp_path / "run"
    result = jax_launch(
        2, "-m", "distrl.train", "--config", str(CARTPOLE), "--run-dir", str(run), "--distributed",
        "--total-steps", "4096", "env.num_envs=64", "train.stop_return=null", *GYMNAX,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows = _rows(run)
    assert [r["global_step"] for r in rows] == list(range(1024, 4097, 1024))  # 64 envs in all x 16 steps
    assert {r["ranks"] for r in rows} == {2} and rows[-1]["episodes"] > 0
    # CartPole pays 1 a step: each ended episode's return is its length.
    assert all(r["episode_return_mean"] == r["episode_length_mean"] for r in rows)
