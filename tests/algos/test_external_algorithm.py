"""An algorithm defined outside distrl (``algo.name: module:ATTRIBUTE``) trains, checkpoints,
evaluates and exports with no distrl file edited: here the guide's REINFORCE with a learned
baseline (``examples/your_own/reinforce.py``), in a package made in a temporary directory; then
the same declaring how ``distrl eval`` describes it and writing its own export files."""

from __future__ import annotations

import json
import os
import re
import textwrap
from pathlib import Path

import pytest
import torch

from distrl.config.run import load_config
from distrl.errors import UserError
from tests.helpers import REPO, clean_env, distrl, run_python

PLUGIN = REPO / "examples" / "your_own" / "reinforce.py"
"""REINFORCE with a learned baseline on PPO's collection and loop: the guide's on-policy example."""

DESCRIBED = '''
"""REINFORCE evaluated on how long the pole stays up, exported as TorchScript that says who wrote it."""

import dataclasses

import torch

from myalgos import reinforce


def pole_of(cfg):
    return f"the pole of {cfg.env.id}"


def write_signed_torchscript(policy, observation_space, fmt, out, where):
    example = torch.zeros(1, *observation_space.shape)
    torch.jit.save(torch.jit.trace(policy, example), str(out), _extra_files={"written_by": "myalgos"})


ALGORITHM = dataclasses.replace(
    reinforce.ALGORITHM,
    evaluated_on="myalgos.described:pole_of",
    eval_line="{env} stayed up {return_mean:.0f} steps over {episodes} tries",
    exports={
        "torchscript": "myalgos.described:write_signed_torchscript",
        "signed": "myalgos.described:write_signed_torchscript",  # a format name of its own
    },
)
'''

GROUPED = '''
"""REINFORCE with a Ray worker group of its own: simulators beside the learners."""

import dataclasses

from distrl.algos.registry import WorkerGroup
from myalgos import reinforce

ALGORITHM = dataclasses.replace(
    reinforce.ALGORITHM,
    worker_groups=(
        WorkerGroup(  # any actor classes: the test starts none
            "sim",
            "Simulator workers in all, shared out over the learners.",
            actor="distrl.ray.verifier_workers:VerifierWorker",
            calls="distrl.ray.verifier_workers:RayVerifierWorkers",
            shared_out=True,
            metric_prefix="sim",
        ),
    ),
)
'''

MISTAKES = '''
"""REINFORCE with the mistakes a plug-in can make, each its own Algorithm."""

import dataclasses

from distrl.runners.replay import ReplayRunner
from myalgos import reinforce


class SilentReinforce(reinforce.Reinforce):
    def update(self, batch):
        stats = super().update(batch)
        del stats["skipped_minibatches"]
        return stats


class SilentRunner(reinforce.ReinforceRunner):
    update_rule = SilentReinforce


class ForgetfulReinforce(reinforce.Reinforce):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.adam = self.__dict__.pop("optimizer")  # the runner checkpoints "optimizer"


class ForgetfulRunner(reinforce.ReinforceRunner):
    update_rule = ForgetfulReinforce


class HalfWrittenRunner(ReplayRunner):  # no exploration, train_state, ...
    exploration_metric = "noise"


class UnnamedRunner(ReplayRunner):  # the name its exploration is logged under is not set
    pass


TYPO = dataclasses.replace(reinforce.ALGORITHM, acting="myalgos.reinforce:actor_critc_copies")
ABSTRACT = dataclasses.replace(reinforce.ALGORITHM, runners={"envs": "myalgos.mistakes:HalfWrittenRunner"})
NOT_A_RUNNER = dataclasses.replace(reinforce.ALGORITHM, runners={"envs": "myalgos.reinforce:Reinforce"})
UNNAMED = dataclasses.replace(reinforce.ALGORITHM, runners={"envs": "myalgos.mistakes:UnnamedRunner"})
NO_ACTING = dataclasses.replace(reinforce.ALGORITHM, acting=None)
SILENT = dataclasses.replace(reinforce.ALGORITHM, runners={"envs": "myalgos.mistakes:SilentRunner"})
FORGETFUL = dataclasses.replace(reinforce.ALGORITHM, runners={"envs": "myalgos.mistakes:ForgetfulRunner"})
'''


def plugins(tmp_path: Path) -> dict[str, str]:
    """The ``myalgos`` package in ``tmp_path``, and an environment whose PYTHONPATH finds it (and
    what it found before)."""
    package = tmp_path / "plugins" / "myalgos"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "reinforce.py").write_text(PLUGIN.read_text())
    (package / "described.py").write_text(textwrap.dedent(DESCRIBED))
    (package / "grouped.py").write_text(textwrap.dedent(GROUPED))
    (package / "mistakes.py").write_text(textwrap.dedent(MISTAKES))
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path / "plugins"), env.get("PYTHONPATH")]))
    return env


@pytest.mark.slow
def test_an_algorithm_from_outside_distrl_trains_checkpoints_and_evaluates(tmp_path: Path) -> None:
    env = plugins(tmp_path)
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
    report = distrl("eval", "--checkpoint", str(run_dir), "--json", env=env)
    assert report.returncode == 0, report.stderr[-3000:]
    assert json.loads(report.stdout)["episodes"] == 10


def register_by_entry_point(tmp_path: Path) -> None:
    """Install ``myalgos``'s metadata as pip would: a ``.dist-info`` beside the package naming the
    guide's REINFORCE under distrl's entry-point group, found on the path like any installed one."""
    info = tmp_path / "plugins" / "myalgos-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: myalgos\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[distrl.algorithms]\nreinforce = myalgos.reinforce:ALGORITHM\n")


def test_an_installed_package_registers_its_algorithm_by_name(tmp_path: Path, monkeypatch) -> None:
    env = plugins(tmp_path)
    register_by_entry_point(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / "plugins"))
    cfg = load_config(None, ["env.id=CartPole-v1", "algo.name=reinforce", "algo.rollout_steps=32"])
    assert (
        cfg.algorithm.name == "reinforce"
        and cfg.algorithm.runners["envs"] == "myalgos.reinforce:ReinforceRunner"
    )
    with pytest.raises(UserError, match=r"algo.name 'reinfoce': expected one of ppo, .*, td3, reinforce, or"):
        load_config(None, ["algo.name=reinfoce"])
    run_dir = tmp_path / "run"
    result = run_python(
        "-m", "distrl", "train", "--env", "CartPole-v1", "--run-dir", str(run_dir), "algo.name=reinforce",
        "algo.rollout_steps=32", "env.num_envs=4", "train.total_steps=256", "log.tensorboard=false",
        "log.progress=false", env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    report = distrl("eval", "--checkpoint", str(run_dir), "--json", "--episodes", "2", env=env)
    assert report.returncode == 0 and json.loads(report.stdout)["episodes"] == 2, report.stderr[-3000:]


@pytest.mark.slow
def test_an_outside_algorithm_describes_its_evaluation_and_writes_its_own_exports(tmp_path: Path) -> None:
    env = plugins(tmp_path)
    run_dir, final = tmp_path / "run", tmp_path / "final.pt"
    result = run_python(
        "-m", "distrl", "train", "--env", "CartPole-v1", "--run-dir", str(run_dir),
        "algo.name=myalgos.described:ALGORITHM", "algo.rollout_steps=32", "env.num_envs=8",
        "train.total_steps=256", "log.tensorboard=false", "log.progress=false", f"output.path={final}",
        env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    said = distrl("eval", "--checkpoint", str(run_dir), "--episodes", "2", env=env)
    assert said.returncode == 0, said.stderr[-3000:]
    line = r"the pole of CartPole-v1 stayed up \d+ steps over 2 tries\n"  # its eval_line
    assert re.fullmatch(line, said.stdout), said.stdout
    exported = tmp_path / "exported.pt"
    signed = tmp_path / "exported.signed"
    for fmt, out in (("torchscript", exported), ("signed", signed)):
        written = distrl("export", "--checkpoint", str(run_dir), "--format", fmt, "--out", str(out), env=env)
        assert written.returncode == 0, written.stderr[-3000:]
    for file in (final, exported, signed):  # output.path and distrl export both write with its function
        extra = {"written_by": ""}
        torch.jit.load(str(file), _extra_files=extra)
        assert extra["written_by"] == b"myalgos", file
    refused = distrl(
        "export", "--checkpoint", str(run_dir), "--format", "onnx", "--out",
        str(tmp_path / "p.onnx"), env=env,
    )  # fmt: skip
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "the reinforce policy of" in refused.stderr
    assert refused.stderr.strip().endswith("is written with --format torchscript or signed"), refused.stderr
    assert not (tmp_path / "p.onnx").exists()


def test_an_outside_algorithm_declares_a_worker_group_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its group has its config keys, is started and shared out as it declares (the checks run
    before Ray starts), and a key of a group it lacks is one line."""
    from distrl.ray.driver import check_workers
    from distrl.ray.groups import run_groups

    monkeypatch.syspath_prepend(str(tmp_path / "plugins"))
    plugins(tmp_path)
    name = "algo.name=myalgos.grouped:ALGORITHM"
    cfg = load_config(None, [name, "workers.sim=2", "workers.cpus_per_sim=0.5", "workers.env=2"])
    assert type(cfg.workers).group_names() == ["env", "eval", "data", "sim"]
    assert (cfg.workers.sim, cfg.workers.cpus_per_sim, cfg.workers.env) == (2, 0.5, 2)
    assert run_groups(cfg)["sim"].failures_metric == "sim_worker_failures"
    with pytest.raises(UserError, match=r"^workers.sim=1 is fewer than the 2 learners \(workers.policy\)"):
        check_workers(load_config(None, [name, "workers.policy=2", "workers.sim=1"]))
    with pytest.raises(
        UserError, match=r"^workers.prompt: algo.name=myalgos.grouped:ALGORITHM has no prompt "
    ):
        load_config(None, [name, "workers.prompt=1"])


def test_a_name_that_imports_nothing_is_one_line() -> None:
    for name, message in [
        ("nowhere.at_all:ALGORITHM", "no module 'nowhere' in the current directory"),
        ("distrl.algos.registry:MISSING", "has no attribute 'MISSING'"),
        ("distrl.algos.registry:ENVS", "expected a distrl.algos.registry.Algorithm"),
    ]:
        try:
            load_config(None, [f"algo.name={name}"])
        except UserError as exc:
            assert message in str(exc) and "\n" not in str(exc)
        else:
            raise AssertionError(f"{name} was accepted")


def test_a_plug_ins_mistakes_are_found_when_it_is_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before anything trains or starts: a reference with a typo, a runner missing what runners
    define, and collecting in other processes without ``acting``, each one line."""
    from distrl.collect.processes import check_collector_processes
    from distrl.ray.driver import check_workers

    monkeypatch.syspath_prepend(str(tmp_path / "plugins"))
    plugins(tmp_path)
    with pytest.raises(UserError, match=(
        r"^algo.name 'myalgos.mistakes:TYPO': Algorithm.acting 'myalgos.reinforce:actor_critc_copies': "
        r"module 'myalgos.reinforce' \(.*reinforce.py\) has no attribute 'actor_critc_copies'$"
    )):  # fmt: skip
        load_config(None, ["algo.name=myalgos.mistakes:TYPO"])
    with pytest.raises(UserError, match=(
        r"^algo.name 'myalgos.mistakes:ABSTRACT': Algorithm.runners\['envs'\] "
        r"'myalgos.mistakes:HalfWrittenRunner': HalfWrittenRunner does not define deployable_policy, "
        r"exploration, train_state \(abstract in its bases\)$"
    )):  # fmt: skip
        load_config(None, ["algo.name=myalgos.mistakes:ABSTRACT"])
    with pytest.raises(
        UserError, match=r"'myalgos.reinforce:Reinforce': expected a subclass of distrl.runners"
    ):
        load_config(None, ["algo.name=myalgos.mistakes:NOT_A_RUNNER"])
    unset = r"UnnamedRunner does not set exploration_metric \(declared in its bases\)$"
    with pytest.raises(UserError, match=unset):
        load_config(None, ["algo.name=myalgos.mistakes:UNNAMED"])
    no_acting = ["algo.name=myalgos.mistakes:NO_ACTING"]
    refused = r"algo.name=myalgos.mistakes:NO_ACTING declares no Algorithm.acting"
    with pytest.raises(
        UserError, match=rf"^collect.processes=1: {refused}, .* that collector processes load"
    ):
        check_collector_processes(load_config(None, [*no_acting, "collect.processes=1"]))
    with pytest.raises(UserError, match=rf"^workers.env=2: {refused}, .* that env workers load"):
        check_workers(load_config(None, [*no_acting, "workers.env=2"]))
    check_collector_processes(load_config(None, no_acting))  # in the learner's own process it needs none


@pytest.mark.parametrize(
    ("name", "line"),
    [
        (
            "SILENT",
            "SilentReinforce.update returned no 'skipped_minibatches': return the count of steps skipped "
            "for a non-finite gradient (0.0 for none) beside its statistics (reinforce_loss, baseline_loss)",
        ),
        (
            "FORGETFUL",
            "ForgetfulReinforce lacks optimizer, which the runner reads of its update rule "
            "(distrl.algos.ppo.OnPolicyUpdate: docs/algorithms/your-own.md)",
        ),
    ],
    ids=["no-skipped-count", "no-optimizer"],
)
@pytest.mark.slow
def test_an_update_rule_missing_what_the_runner_reads_is_one_line(
    tmp_path: Path, name: str, line: str
) -> None:
    env = plugins(tmp_path)
    result = run_python(
        "-m", "distrl", "train", "--env", "CartPole-v1", "--run-dir", str(tmp_path / "run"),
        f"algo.name=myalgos.mistakes:{name}", "algo.rollout_steps=8", "env.num_envs=2",
        "train.total_steps=64", "log.tensorboard=false", "log.progress=false", env=env,
    )  # fmt: skip
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"distrl: error: {line}"), result.stderr
