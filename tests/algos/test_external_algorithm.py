"""An algorithm defined outside distrl (``algo.name: module:ATTRIBUTE``) trains, checkpoints and
evaluates with no distrl file edited: here REINFORCE with a learned baseline, in a package made in
a temporary directory, on PPO's collection and loop."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from distrl.config.run import load_config
from distrl.errors import UserError
from tests.helpers import clean_env, run_python

PLUGIN = '''
"""REINFORCE with a learned baseline: distrl's on-policy loop with an update of its own."""

from typing import ClassVar

import torch

from distrl.algos.flat_gradients import FlatGradients
from distrl.algos.on_policy_config import OnPolicySection
from distrl.algos.registry import ENVS, Algorithm
from distrl.runners.on_policy import OnPolicyRunner


class ReinforceConfig(OnPolicySection):
    """Monte Carlo returns within the rollout (GAE lambda 1), one Adam step per rollout."""

    phases: ClassVar[tuple[str, ...]] = ("returns", "baseline")

    gae_lambda: float = 1.0
    """GAE's lambda: 1 is the return of the rollout."""

    def minibatches_per_epoch(self, global_batch: int) -> int:
        return 1


class Reinforce:
    num_minibatches = 1
    steps_per_update = 1

    def __init__(self, policy, cfg, num_minibatches, gradient_sync, clock, compile_loss):
        self.policy, self.cfg, self.sync, self.clock = policy, cfg, gradient_sync, clock
        self.grads = FlatGradients(list(policy.parameters()), clock)
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.learning_rate)

    def set_learning_rate(self, lr):
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def update(self, batch):
        with self.clock("baseline"):
            log_probs, _, values = self.policy.action_stats(batch.obs, batch.actions, None, None)
            reinforce = -(batch.advantages * log_probs).mean()
            baseline = ((values - batch.returns) ** 2).mean()
        loss = reinforce + baseline
        self.grads.step(loss, self.optimizer, self.sync, len(batch), self.cfg.max_grad_norm)
        stats = {"reinforce_loss": float(reinforce), "baseline_loss": float(baseline)}
        return {**stats, "skipped_minibatches": 0.0}


class ReinforceRunner(OnPolicyRunner):
    algorithm = "reinforce"
    update_rule = Reinforce


ALGORITHM = Algorithm(
    "reinforce",
    ReinforceConfig,
    deployable_policy="distrl.models.policies:ppo_policy",
    runners={ENVS: "myalgos.reinforce:ReinforceRunner"},
)
'''


def test_an_algorithm_from_outside_distrl_trains_checkpoints_and_evaluates(tmp_path: Path) -> None:
    package = tmp_path / "plugins" / "myalgos"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "reinforce.py").write_text(textwrap.dedent(PLUGIN))
    env = {**clean_env(), "PYTHONPATH": str(tmp_path / "plugins")}
    run_dir = tmp_path / "run"
    result = run_python(
        "-m", "distrl", "train", "--env", "CartPole-v1", "--run-dir", str(run_dir),
        "algo.name=myalgos.reinforce:ALGORITHM", "algo.rollout_steps=32", "algo.learning_rate=1e-3",
        "env.num_envs=8", "train.total_steps=4096", "log.tensorboard=false", "log.progress=false", env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["global_step"] == 4096 and rows[-1]["baseline_loss"] > 0
    assert rows[-1]["time/baseline"] > 0  # its own phase, declared by its section
    report = run_python("-m", "distrl", "eval", "--checkpoint", str(run_dir), "--json", env=env)
    assert report.returncode == 0, report.stderr[-3000:]
    assert json.loads(report.stdout)["episodes"] == 10


def test_a_name_that_imports_nothing_is_one_line() -> None:
    for name, message in [
        ("nowhere.at_all:ALGORITHM", "cannot import 'nowhere.at_all'"),
        ("distrl.algos.registry:MISSING", "has no attribute 'MISSING'"),
        ("distrl.algos.registry:ENVS", "expected a distrl.algos.registry.Algorithm"),
    ]:
        try:
            load_config(None, [f"algo.name={name}"])
        except UserError as exc:
            assert message in str(exc) and "\n" not in str(exc)
        else:
            raise AssertionError(f"{name} was accepted")
