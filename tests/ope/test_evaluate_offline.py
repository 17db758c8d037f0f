"""``distrl evaluate-offline`` end to end: collect CartPole with a random logger, train a small
offline DQN on it, then estimate its greedy policy's value from the same log, as strict JSON or
a table, on all of it or on its first episodes; bad input is one line and exit code 2 (each bad
input checked in-process, one through the command line)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from distrl.cli import main
from distrl.config.sections import EnvConfig
from distrl.data.collect import collect_dataset
from distrl.data.logged import LoggedDataset
from distrl.errors import UserError
from distrl.ope.dqn import read_logged_steps
from distrl.ope.estimators import ESTIMATORS, Bootstrap
from distrl.ope.report import evaluate_checkpoint_offline, print_report
from tests.helpers import CARTPOLE, OFFLINE, collect, distrl
from tests.test_cli import assert_user_error

QUIET = ["train.stop_return=null", "log.tensorboard=false"]


def strict_json(text: str) -> dict:
    """``text`` parsed as JSON proper: NaN, Infinity and -Infinity are not JSON."""

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``data/``: 2000 random CartPole transitions (8 envs, episodes interleaved) in 2 files of 4
    row groups; ``unpaid/``: the same with every reward 0; ``dqn/``: a few hundred gradient steps
    of offline DQN on them; ``ppo/``: a PPO run; ``acrobot/``: a log of another env; ``empty/``:
    no Parquet."""
    root = tmp_path_factory.mktemp("cpe")
    collect(root / "data", 2000, 1000)
    (root / "unpaid").mkdir()
    for file in sorted((root / "data").glob("*.parquet")):
        table = pq.read_table(file)
        reward = table.schema.get_field_index("reward")
        zeros = pa.array(np.zeros(len(table)), table.field(reward).type)
        unpaid = table.set_column(reward, table.field(reward), zeros)
        pq.write_table(unpaid, root / "unpaid" / file.name, row_group_size=250)
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


@pytest.mark.slow
def test_estimates_a_trained_dqn_from_the_log(workdir: Path) -> None:
    result = distrl("evaluate-offline", "--checkpoint", "dqn", "--data", "data", "--json", cwd=workdir)
    assert result.returncode == 0, result.stderr
    report = strict_json(result.stdout)
    assert report["cpe/rows"] == 2000 and report["cpe/rows_without_propensity"] == 0
    for name in ESTIMATORS:
        estimate, low, high = (report[f"cpe/{name}{part}"] for part in ("", "_ci_low", "_ci_high"))
        assert all(math.isfinite(x) for x in (estimate, low, high, report[f"cpe/{name}_normalized"]))
        assert low <= estimate <= high, name
    # CartPole pays 1 a step, so the logger's value per row is 1: IPS's normalised score is IPS,
    # and DM's reward model predicts that 1 for any action.
    assert report["cpe/ips_normalized"] == pytest.approx(report["cpe/ips"])
    assert report["cpe/dm"] == pytest.approx(1.0, abs=0.01)


def test_a_logger_that_earned_nothing_gives_null_in_json_and_n_a_in_the_table(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Normalised by a logged value of 0: not a number, which JSON cannot hold."""
    monkeypatch.chdir(workdir)
    args = ["evaluate-offline", "--checkpoint", "dqn", "--data", "unpaid", "--bootstrap", "20"]
    assert main([*args, "--max-rows", "600", "--json"]) == 0
    report = strict_json(capsys.readouterr().out)
    assert 500 < report["cpe/rows"] <= 600
    assert all(report[f"cpe/{name}_normalized"] is None for name in ESTIMATORS)
    assert report["cpe/ips"] == 0.0 and report["cpe/dm"] == pytest.approx(0.0, abs=1e-3)
    print_report(evaluate_checkpoint_offline(Path("dqn"), Path("unpaid"), Bootstrap(resamples=20)), 0.95)
    table = capsys.readouterr().out
    assert "95% CI" in table and all(name.upper() in table for name in ESTIMATORS)
    assert "n/a" in table and "nan" not in table


def test_max_rows_keeps_the_first_whole_episodes_and_reads_no_further(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset = LoggedDataset(workdir / "data")
    everything = read_logged_steps(dataset)
    units_read = []
    read = dataset.read
    monkeypatch.setattr(dataset, "read", lambda unit: units_read.append(unit) or read(unit))
    first = read_logged_steps(dataset, max_rows=600)
    # Groups of 250 rows: past 600 rows, on until a group without a row of the kept episodes.
    assert len(units_read) < len(dataset.row_groups) == 8
    ids, first_row, lengths = np.unique(everything.mdp_id, return_index=True, return_counts=True)
    in_order = np.argsort(first_row)
    rows_so_far = np.cumsum(lengths[in_order])
    whole = set(ids[in_order[rows_so_far <= 600]])  # the first episodes, at their full length
    assert set(first.mdp_id) == whole and len(first.mdp_id) == rows_so_far[len(whole) - 1]
    assert rows_so_far[len(whole)] > 600  # the next one would not fit
    with pytest.raises(UserError, match="max rows 1: fewer than the first episode's"):
        read_logged_steps(dataset, max_rows=1)


BAD_INPUT = {
    "no checkpoint": ("nothing", "data", "no checkpoint found at nothing"),
    "no parquet": ("dqn", "empty", "--data empty: no .parquet files there"),
    "not dqn": ("ppo", "data", "holds a DeterministicActor (ppo)"),
    # Acrobot: 6 observation features and 3 actions, CartPole 4 and 2.
    "other env": ("dqn", "acrobot", "--data acrobot: 6 observation features and 3 actions"),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_is_a_user_error(workdir: Path, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    checkpoint, data, message = BAD_INPUT[case]
    monkeypatch.chdir(workdir)
    with pytest.raises(UserError, match=re.escape(message)):
        evaluate_checkpoint_offline(Path(checkpoint), Path(data), Bootstrap())


@pytest.mark.slow
def test_bad_input_on_the_command_line_is_one_line(workdir: Path) -> None:
    result = distrl("evaluate-offline", "--checkpoint", "ppo", "--data", "data", cwd=workdir)
    assert_user_error(result, "(ppo)", "needs a discrete-action Q-network")
