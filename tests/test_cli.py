"""Bad input: one clear line on stderr, exit code 2, no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium
import pytest

from tests.eval.reference import reference_returns
from tests.helpers import CARTPOLE, GRPO_REVERSE, distrl


def assert_user_error(result, *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert lines[0].startswith("distrl: error: ")
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.fixture(scope="module")
def typo_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cfg") / "typo.yaml"
    path.write_text("algo:\n  learning_rte: 0.001\n")
    return path


CASES = {
    "unknown env id": (["--env", "NoSuchEnv-v0"], ["env.id 'NoSuchEnv-v0'", "doesn't exist"]),
    "unknown env class": (["--env", "no_such_module:Env"], ["no module 'no_such_module' in the current"]),
    "missing config": (["--config", "missing.yaml"], ["config file not found: missing.yaml"]),
    "wrong type": (["env.num_envs=many"], ["env.num_envs", "valid integer", "'many'"]),
    "zero count": (["--total-steps", "0"], ["train.total_steps", "greater than 0"]),
    "no launcher": (["--distributed"], ["--distributed", "no launcher variables"]),
    "bad device": (["--device", "tpu:9"], ["--device"]),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.slow
def test_train_bad_input(case: str, tmp_path: Path) -> None:
    args, fragments = CASES[case]
    assert_user_error(distrl("train", "--run-dir", str(tmp_path / "run"), *args), *fragments)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_unknown_config_key_suggests_the_right_one(typo_config: Path, tmp_path: Path) -> None:
    result = distrl("train", "--config", str(typo_config), "--run-dir", str(tmp_path))
    assert_user_error(result, "unknown config key algo.learning_rte", "did you mean algo.learning_rate?")


def test_every_config_problem_is_a_line_of_its_own(tmp_path: Path) -> None:
    result = distrl(
        "train", "--run-dir", str(tmp_path / "run"), "algo.learning_rate=-1", "train.total_steps=0",
        "env.num_envs=many",
    )  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("distrl: error: config: ") for line in lines), lines
    assert [line.split(": ")[3] for line in lines] == [
        "env.num_envs",
        "algo.learning_rate",
        "train.total_steps",
    ]
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_resume_without_checkpoint(tmp_path: Path) -> None:
    result = distrl("train", "--config", str(CARTPOLE), "--run-dir", str(tmp_path), "--resume")
    assert_user_error(result, "--resume: no checkpoint in")


def test_eval_without_checkpoint(tmp_path: Path) -> None:
    assert_user_error(distrl("eval", "--checkpoint", str(tmp_path)), "no checkpoint found")


@pytest.mark.slow
def test_train_eval_and_refuse_to_clobber(tmp_path: Path) -> None:
    """A short run writes the run dir; a second launch into it must say --resume/--overwrite."""
    run = tmp_path / "run"
    args = [
        "train",
        "--config",
        str(CARTPOLE),
        "--run-dir",
        str(run),
        "--total-steps",
        "2048",
        "train.stop_return=null",
    ]
    first = distrl(*args)
    assert first.returncode == 0, first.stderr
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["global_step"] for row in rows] == [512, 1024, 1536, 2048]  # 32 envs x 16 steps
    assert {"global_step", "episode_return_mean", "sps", "time_s"} <= set(rows[-1])
    assert (run / "config.yaml").is_file() and list((run / "tensorboard").iterdir())

    evaluation = distrl("eval", "--checkpoint", str(run), "--episodes", "3", "--json")
    report = json.loads(evaluation.stdout)
    assert report["episodes"] == 3 and len(report["returns"]) == 3
    assert report["return_mean"] == pytest.approx(sum(report["returns"]) / 3)
    assert report["returns"] == reference_returns(run, 3)  # played again apart from `distrl eval`

    saved = sorted((run / "checkpoints").iterdir())
    assert_user_error(distrl(*args), "already holds a run", "--resume", "--overwrite")
    assert sorted((run / "checkpoints").iterdir()) == saved  # nothing lost


def test_help_is_in_users_words_with_examples() -> None:
    for args in (["--help"], *([name, "--help"] for name in ("train", "config", "eval", "export"))):
        result = distrl(*args)
        assert result.returncode == 0, result.stderr
        assert "examples:" in result.stdout and "distrl " in result.stdout.split("examples:")[1]
        assert "``" not in result.stdout  # no reStructuredText from docstrings


def test_config_prints_the_resolved_config_and_each_ranks_sizes() -> None:
    result = distrl("config", str(CARTPOLE), "--ranks", "3", "algo.learning_rate=1e-3")
    assert result.returncode == 0, result.stderr
    import yaml

    resolved = yaml.safe_load(result.stdout)  # the sizes are YAML comments
    assert resolved["algo"]["learning_rate"] == 1e-3 and resolved["algo"]["update_epochs"] == 4
    sizes = [line for line in result.stdout.splitlines() if line.startswith("#   ")]
    # 32 envs over 3 ranks: 11, 11 and 10, each stepping 16 steps per update; 512 samples in all.
    assert "#   envs 32 ranks 0-1: 11, rank 2: 10" in [
        " ".join(line.split()).replace("# ", "#   ") for line in sizes
    ]
    assert any("samples per update" in line and "ranks 0-1: 176, rank 2: 160" in line for line in sizes)


def test_config_prints_each_ranks_learner_memory_by_sharding() -> None:
    """GRPO's sequence model counted on the meta device: the count is the built model's, and a
    rank holds half of each state on 2 sharded ranks, plus the whole weights while generating
    (with its KL reference, in bfloat16 under bf16 mixed precision), half the reference and,
    held over micro-batches, whole gradients."""
    import torch

    from distrl.config.run import load_config
    from distrl.models.sequence_policy import sequence_model, sequence_tokenizer

    cfg = load_config(GRPO_REVERSE)
    built = sum(p.numel() for p in sequence_model(cfg, sequence_tokenizer(cfg)).parameters())
    bf16 = (
        "train.mixed_precision=bf16", "train.gradient_accumulation_steps=2",
        "train.hold_unsharded_gradients=true", "algo.kl_coef=0.1",
    )  # fmt: skip
    shown = {
        "none": learner_memory(GRPO_REVERSE, built, "train.sharding=none"),
        "fsdp": learner_memory(GRPO_REVERSE, built, "train.sharding=fsdp"),
        "fsdp-bf16": learner_memory(GRPO_REVERSE, built, "train.sharding=fsdp", *bf16),
    }
    whole = built * torch.finfo(torch.float32).bits / 8 / 2**20
    assert shown["none"] == pytest.approx(
        {"weights": whole, "gradients": whole, "optimizer state (Adam)": 2 * whole}, abs=1e-3
    )
    halves = {"weights": whole / 2, "gradients": whole / 2, "optimizer state (Adam)": whole}
    assert shown["fsdp"] == pytest.approx(
        {**halves, "whole weights while generating or acting (gathered)": whole}, abs=1e-3
    )
    assert shown["fsdp-bf16"] == pytest.approx(
        {**halves, "frozen copies (targets, reference)": whole / 2,
         "whole gradients held over micro-batches": whole,
         "whole weights while generating or acting (gathered)": 2 * whole / 2}, abs=1e-3,
    )  # fmt: skip


def learner_memory(config: Path, parameters: int, *overrides: str) -> dict[str, float]:
    """``distrl config --ranks 2``'s memory lines, MiB by what they hold; its header must count
    ``parameters``."""
    done = distrl("config", str(config), "--ranks", "2", *overrides)
    assert done.returncode == 0, done.stderr
    header = next(line for line in done.stdout.splitlines() if "memory of each rank's learner" in line)
    assert f"{parameters:,} parameters" in header
    lines = done.stdout.split(header)[1].strip().splitlines()
    return {line[1:].rsplit(" ", 2)[0].strip(): float(line.split()[-2]) for line in lines}


ONE_RANK_NOTE = (
    "distrl: train.sharding=fsdp on one rank: there is nothing to shard over, so the learner holds its "
    "whole weights (as train.sharding=none); sharding applies from 2 ranks"
)


def test_config_refuses_and_notes_sharding_as_training_does(tmp_path: Path) -> None:
    """``distrl config`` shows no memory for a layout training refuses, and says what one rank ignores."""
    refused = distrl("config", str(CARTPOLE), "--ranks", "2", "train.sharding=hsdp")
    assert_user_error(refused, "train.sharding=hsdp replicates across nodes", "2 rank(s), 2 per node")
    spread = distrl("config", str(CARTPOLE), "--ranks", "4", "train.sharding=hsdp", "cluster.num_nodes=2")
    assert spread.returncode == 0 and not spread.stderr, spread.stderr
    for done in (
        distrl("config", str(CARTPOLE), "--ranks", "1", "train.sharding=fsdp"),
        distrl("train", "--config", str(CARTPOLE), "--run-dir", str(tmp_path / "run"), "train.sharding=fsdp",
               "train.total_steps=256", "log.progress=false", "log.tensorboard=false"),
    ):  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stderr.splitlines()[0] == ONE_RANK_NOTE, done.stderr


def test_config_prints_the_memory_of_an_actor_critic_learner() -> None:
    import torch

    from distrl.config.run import load_config
    from distrl.models.policies import ppo_actor_critic

    cfg = load_config(CARTPOLE)
    env = gymnasium.make(cfg.env.id)
    policy = ppo_actor_critic(cfg, env.observation_space, env.action_space, torch.device("cpu"))
    built = sum(p.numel() for p in policy.parameters())
    shown = learner_memory(CARTPOLE, built, "train.sharding=fsdp")
    assert shown["weights"] == pytest.approx(built * 4 / 2 / 2**20, abs=1e-3)
