"""``distrl evaluate-offline`` end to end: collect CartPole with a random logger, train a small
offline DQN on it, then estimate its greedy policy's value from the same log; bad input is one
line and exit code 2 (each bad input checked in-process, one through the command line)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from distrl.config import EnvConfig
from distrl.data.collect import collect_dataset
from distrl.errors import UserError
from distrl.ope.dqn import evaluate_checkpoint_offline, print_report
from distrl.ope.estimators import ESTIMATORS, Bootstrap
from tests.helpers import CARTPOLE, distrl
from tests.runners.test_offline import OFFLINE, collect
from tests.test_cli import assert_user_error

QUIET = ["train.stop_return=null", "log.tensorboard=false"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``data/``: 2000 random CartPole transitions; ``dqn/``: a few hundred gradient steps of offline DQN on
    them; ``ppo/``: a PPO run; ``acrobot/``: a log of another env; ``empty/``: no Parquet."""
    root = tmp_path_factory.mktemp("cpe")
    collect(root / "data", 2000, 1000)
    trained = distrl(
        "train", "--config", str(OFFLINE), "--data", str(root / "data"), "--run-dir", str(root / "dqn"),
        "model.hidden_sizes=[64,64]", "algo.batch_size=64", "--total-steps", str(300 * 64), *QUIET,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    ppo = distrl("train", "--config", str(CARTPOLE), "--run-dir", str(root / "ppo"),
                 "--total-steps", "256", "env.num_envs=2", "algo.rollout_steps=128", *QUIET)  # fmt: skip
    assert ppo.returncode == 0, ppo.stderr
    collect_dataset(EnvConfig(id="Acrobot-v1", num_envs=1), "random", 20, root / "acrobot", 20, seed=1)
    (root / "empty").mkdir()
    return root


def test_estimates_a_trained_dqn_from_the_log(workdir: Path) -> None:
    result = distrl("evaluate-offline", "--checkpoint", "dqn", "--data", "data", "--json", cwd=workdir)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["cpe/rows"] == 2000 and report["cpe/rows_without_propensity"] == 0
    for name in ESTIMATORS:
        estimate, low, high = (report[f"cpe/{name}{part}"] for part in ("", "_ci_low", "_ci_high"))
        assert all(math.isfinite(x) for x in (estimate, low, high, report[f"cpe/{name}_normalized"]))
        assert low <= estimate <= high, name
    # CartPole pays 1 a step, so the logger's value per row is 1: IPS's normalised score is IPS.
    assert report["cpe/ips_normalized"] == pytest.approx(report["cpe/ips"])


def test_prints_a_table_without_json(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(workdir)
    report = evaluate_checkpoint_offline(Path("dqn"), Path("data"), Bootstrap(resamples=20))
    print_report(report, confidence=0.95)
    table = capsys.readouterr().out
    assert "95% CI" in table and all(name.upper() in table for name in ESTIMATORS)


BAD_INPUT = {
    "no checkpoint": ("nothing", "data", "no checkpoint found at nothing"),
    "no parquet": ("dqn", "empty", "--data empty: no .parquet files there"),
    "not dqn": ("ppo", "data", "holds a ppo policy"),
    # Acrobot: 6 observation features and 3 actions, CartPole 4 and 2.
    "other env": ("dqn", "acrobot", "--data acrobot: 6 observation features and 3 actions"),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_is_a_user_error(workdir: Path, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    checkpoint, data, message = BAD_INPUT[case]
    monkeypatch.chdir(workdir)
    with pytest.raises(UserError, match=re.escape(message)):
        evaluate_checkpoint_offline(Path(checkpoint), Path(data), Bootstrap())


def test_bad_input_on_the_command_line_is_one_line(workdir: Path) -> None:
    result = distrl("evaluate-offline", "--checkpoint", "ppo", "--data", "data", cwd=workdir)
    assert_user_error(result, "holds a ppo policy", "needs a Q-network (algo.name=dqn)")
