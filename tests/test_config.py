import pickle
from pathlib import Path

import pytest

from distrl.config.run import changed_keys, config_from_dict, load_config
from distrl.errors import UserError

CONFIGS = sorted(Path(__file__).parents[1].joinpath("configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_validate(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    load_config(path)
    assert "warning" not in capsys.readouterr().err  # they use the current keys


def test_overrides_are_typed_and_dotted(tmp_path: Path) -> None:
    cfg = load_config(None, ["algo.learning_rate=1e-3", "env.num_envs=3", "model.hidden_sizes=[8,8]"])
    assert cfg.algo.learning_rate == 1e-3 and cfg.env.num_envs == 3
    assert cfg.model.hidden_sizes == [8, 8]


def test_changed_keys_are_dotted_in_the_order_of_the_new_config() -> None:
    ppo = load_config(None, ["train.total_steps=5"])
    a2c = load_config(None, ["algo.name=a2c", "model.hidden_sizes=[8]", "algo.rms_prop_eps=1e-3"])
    changes = changed_keys(ppo, a2c)
    assert list(changes)[:2] == ["model.hidden_sizes", "algo.name"]
    assert changes["model.hidden_sizes"] == ([64, 64], [8]) and changes["algo.rms_prop_eps"] == (None, 1e-3)
    assert changes["train.total_steps"][0] == 5 and changes["algo.clip_coef"] == (0.2, None)  # PPO's own
    keys = list(changes)
    assert keys.index("train.total_steps") < keys.index("algo.clip_coef")  # after the new config's
    assert changed_keys(ppo, ppo) == {}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algo.learning_rte=1"], r"unknown config key algo.learning_rte; did you mean algo.learning_rate\?"),
        (["bogus.x=1"], "unknown config key bogus"),
        (["env.num_envs=abc"], "env.num_envs: Input should be a valid integer"),
        (["env.num_envs=0"], "env.num_envs: Input should be greater than 0"),
        (["algo.anneal_lr=maybe"], "algo.anneal_lr: Input should be a valid boolean"),
        (["noequals"], "expected dotted.key=value"),
        # Compilation where it would be silently ignored: the whole config names the keys.
        (
            ["algo.name=dqn", "train.compile=true"],
            r"^config: train.compile=true is not supported by algo.name=dqn",
        ),
        (["ml_framework=jax", "train.compile=true"], r"^config: train.compile=true is for torch learners"),
        # A worker group of another algorithm's, and one group sized under both of its names.
        (
            ["workers.cpus_per_verifier=0.5"],
            r"^workers.cpus_per_verifier: algo.name=ppo has no verifier workers \(algo.name=grpo has\); "
            r"its worker groups beside the learners: env, eval, data$",
        ),
        (
            ["algo.name=grpo", "workers.data=1", "workers.prompt=2"],
            r"^config: workers.data and workers.prompt both size the prompt workers of algo.name=grpo: "
            r"give workers.prompt only$",
        ),
    ],
)
def test_bad_config_is_one_line_naming_the_key(overrides: list[str], message: str) -> None:
    with pytest.raises(UserError, match=message) as info:
        load_config(None, overrides)
    assert "\n" not in str(info.value)


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    with pytest.raises(UserError, match="top level must be a mapping"):
        load_config(bad)


def test_algo_name_picks_the_algorithm_section_and_checks_its_keys() -> None:
    assert load_config(None).algo.name == "ppo"  # unnamed sections are PPO's
    dqn = load_config(None, ["algo.name=dqn", "algo.batch_size=32"])
    assert (dqn.algo.name, dqn.algo.batch_size) == ("dqn", 32)
    with pytest.raises(
        UserError, match=r"unknown config key algo.batch_sise; did you mean algo.batch_size\?"
    ):
        load_config(None, ["algo.name=dqn", "algo.batch_sise=32"])
    with pytest.raises(UserError, match="unknown config key algo.clip_coef"):
        load_config(None, ["algo.name=dqn", "algo.clip_coef=0.1"])  # a PPO key under DQN
    with pytest.raises(
        UserError, match="algo.name 'td4': expected one of ppo, dqn, a2c, appo, sac, iql, grpo, td3"
    ):
        load_config(None, ["algo.name=td4"])


def test_a_pair_of_alternatives_takes_one() -> None:
    with pytest.raises(UserError, match="algo.minibatch_size and algo.num_minibatches exclude each other"):
        load_config(None, ["algo.minibatch_size=64", "algo.num_minibatches=4"])
    cfg = load_config(None, ["algo.minibatch_size=null", "algo.num_minibatches=4"])
    assert (cfg.algo.minibatch_size, cfg.algo.num_minibatches) == (None, 4)


def test_transport_keys_moved_to_comm_are_still_read_with_a_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    cfg = load_config(None, ["train.timeout_s=42", "train.sync_spin_ms=0"])
    assert (cfg.comm.timeout_s, cfg.comm.sync_spin_ms) == (42.0, 0.0)
    err = capsys.readouterr().err
    assert "train.timeout_s is deprecated; it is now comm.timeout_s" in err
    assert "train.sync_spin_ms is deprecated; it is now comm.sync_spin_ms" in err
    assert load_config(None, ["comm.cpu_sum=gloo"]).comm.cpu_sum == "gloo"
    with pytest.raises(UserError, match="comm.cpu_sum: Input should be 'auto', 'gloo' or 'socket'"):
        load_config(None, ["comm.cpu_sum=mpi"])


def test_worker_counts_per_node_give_the_totals() -> None:
    cfg = load_config(None, ["cluster.num_nodes=3", "workers.policy_per_node=2", "workers.env_per_node=4"])
    assert (cfg.workers.policy, cfg.workers.env) == (6, 12)
    with pytest.raises(UserError, match="workers.env and workers.env_per_node exclude each other"):
        load_config(None, ["workers.env=2", "workers.env_per_node=4"])


@pytest.mark.parametrize(
    ("override", "key", "owner"),
    [
        ("task.name=sort", "task", "grpo"),
        ("model.transformer.width=8", "model.transformer", "grpo"),
        ("eval.cpe_every=3", "eval.cpe_every", "dqn"),
    ],
)
def test_a_section_another_algorithm_brings_is_one_line_naming_it(
    override: str, key: str, owner: str
) -> None:
    with pytest.raises(UserError) as caught:
        load_config(None, [override])
    assert str(caught.value) == (
        f"{key}: only a run of algo.name={owner} reads it; remove it from this one (algo.name=ppo)"
    )


def test_algorithms_bring_their_own_sections() -> None:
    grpo = load_config(None, ["algo.name=grpo", "task.name=sort", "model.transformer.width=32"])
    assert (grpo.task.name, grpo.model.transformer.width) == ("sort", 32)
    dqn = load_config(None, ["algo.name=dqn", "eval.cpe_every=3"])
    assert dqn.eval.cpe_every == 3
    ppo = load_config(None, [])
    assert (
        not hasattr(ppo, "task")
        and not hasattr(ppo.model, "transformer")
        and not hasattr(ppo.eval, "cpe_every")
    )


def test_a_config_saved_before_algorithms_brought_sections_still_loads() -> None:
    """Older distrl wrote every section for every run: another algorithm's, at its defaults."""
    from distrl.algorithms.dqn.config import DQNEvalConfig
    from distrl.algos.grpo_config import TaskConfig, TransformerConfig
    from distrl.config.run import config_from_dict

    saved = load_config(None, []).model_dump(mode="json")
    saved["task"] = TaskConfig().model_dump(mode="json")
    saved["model"]["transformer"] = TransformerConfig().model_dump(mode="json")
    saved["eval"] = DQNEvalConfig().model_dump(mode="json")
    assert config_from_dict(saved) == load_config(None, [])
    saved["task"]["name"] = "sort"  # not a default: the user set it, and it would be ignored
    with pytest.raises(UserError, match="^task: only a run of algo.name=grpo reads it"):
        config_from_dict(saved)


def test_a_run_config_is_pickled_as_its_values() -> None:
    """Ray sends configs to its actors by pickle; a run's class is built for its algorithm."""
    import pickle

    grpo = load_config(None, ["algo.name=grpo", "task.name=add"])
    assert pickle.loads(pickle.dumps(grpo)) == grpo


SECTION_PLUGIN = '''
from typing import ClassVar

from distrl.algos.ppo_config import PPOConfig
from distrl.algos.registry import ALGORITHMS, Algorithm
from distrl.config.base import Section


class CuriositySection(Section):
    """An intrinsic reward."""

    scale: float = 0.1
    """Weight of the intrinsic reward."""


class CuriousPPOConfig(PPOConfig):
    sections: ClassVar[dict[str, type[Section]]] = {"curiosity": CuriositySection}
    name: str = "curious"


ALGORITHM = Algorithm("curious", CuriousPPOConfig, deployable_policy=ALGORITHMS["ppo"].deployable_policy)
'''


def test_an_algorithm_from_outside_brings_a_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "curious_for_distrl.py").write_text(SECTION_PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = load_config(None, ["algo.name=curious_for_distrl:ALGORITHM", "curiosity.scale=0.5"])
    assert cfg.curiosity.scale == 0.5
    with pytest.raises(
        UserError, match=r"unknown config key curiosity.scael; did you mean curiosity.scale\?"
    ):
        load_config(None, ["algo.name=curious_for_distrl:ALGORITHM", "curiosity.scael=0.5"])
    with pytest.raises(UserError, match="unknown config key curiosity"):
        load_config(None, ["curiosity.scale=0.5"])
    grpo = load_config(None, ["algo.name=grpo", "cluster.num_nodes=2", "workers.verifier_per_node=3"])
    assert grpo.workers.verifier == 6


def test_an_algorithms_worker_groups_have_keys_of_their_own(capsys: pytest.CaptureFixture[str]) -> None:
    """GRPO's verifier and prompt workers take the env and data workers' place in ``workers:``:
    its own keys, written out whole and read back the same (a checkpoint's config, a Ray learner's
    pickled one)."""
    cfg = load_config(
        None, ["algo.name=grpo", "workers.verifier=4", "workers.cpus_per_verifier=0.5", "workers.prompt=2"]
    )
    assert type(cfg.workers).group_names() == ["verifier", "eval", "prompt", "generation"]
    assert (cfg.workers.verifier, cfg.workers.cpus_per_verifier, cfg.workers.prompt) == (4, 0.5, 2)
    written = cfg.model_dump(mode="json")
    assert {"verifier", "cpus_per_prompt", "eval"} <= written["workers"].keys()
    assert not {"env", "data", "cpus_per_env"} & written["workers"].keys()
    assert config_from_dict(written) == cfg == pickle.loads(pickle.dumps(cfg))
    assert capsys.readouterr().err == ""
    assert load_config(None).workers.group_names() == ["env", "eval", "data"]  # PPO's: the generic ones


def test_a_replaced_groups_generic_keys_are_read_with_one_warning_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A GRPO config written before its verifiers had keys of their own (``workers.env``) trains
    the same, and says once which keys to use now."""
    old = load_config(None, ["algo.name=grpo", "workers.env=4", "workers.cpus_per_env=0.5", "workers.data=2"])
    new = load_config(
        None, ["algo.name=grpo", "workers.verifier=4", "workers.cpus_per_verifier=0.5", "workers.prompt=2"]
    )
    assert old == new
    assert capsys.readouterr().err.splitlines() == [
        "distrl: warning: config: workers.env, workers.cpus_per_env for algo.name=grpo are its verifier "
        "workers: use workers.verifier, workers.cpus_per_verifier",
        "distrl: warning: config: workers.data for algo.name=grpo is its prompt workers: use workers.prompt",
    ]
    load_config(None, ["algo.name=grpo", "workers.env=2"])
    assert capsys.readouterr().err.splitlines() == [
        "distrl: warning: config: workers.env for algo.name=grpo is its verifier workers: "
        "use workers.verifier"
    ]
