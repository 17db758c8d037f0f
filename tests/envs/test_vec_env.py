from pathlib import Path

import pytest
import torch

from distrl.config.sections import EnvConfig
from distrl.envs import make_vec_env
from distrl.errors import UserError
from distrl.seeding import env_seeds
from distrl.sharding import shard_envs
from tests.helpers import REPO, distrl, run_python
from tests.ray_cluster import param_digests


def test_user_env_class_with_kwargs_and_time_limit() -> None:
    cfg = EnvConfig(id="tests.envs.toy:CountingEnv", kwargs={"scale": 2.0}, max_episode_steps=3)
    env = make_vec_env(cfg, [0, 1])
    assert env.reset()[:, 0].tolist() == [0.0, 0.0]
    for _ in range(2):
        result = env.step(torch.zeros(2, dtype=torch.int64))
    assert not result.truncated.any()
    result = env.step(torch.zeros(2, dtype=torch.int64))
    # The time limit truncates (not terminates); obs is already the next episode's first one.
    assert result.truncated.all() and not result.terminated.any()
    assert result.final_obs[:, 0].tolist() == [6.0, 6.0]
    assert result.obs[:, 0].tolist() == [0.0, 0.0]


def test_gymnasium_envs_are_seeded_per_env() -> None:
    env = make_vec_env(EnvConfig(id="CartPole-v1"), [5, 6, 5])
    obs = env.reset()
    assert torch.equal(obs[0], obs[2]) and not torch.equal(obs[0], obs[1])


@pytest.mark.parametrize("env_cfg", [EnvConfig(num_envs=30), EnvConfig(num_envs_per_rank=8)])
def test_env_seeds_are_distinct_across_ranks_and_launches(env_cfg: EnvConfig) -> None:
    shards = [shard_envs(env_cfg, rank, 4) for rank in range(4)]
    seeds = [s for launch in range(3) for shard in shards for s in env_seeds(7, shard, launch)]
    global_envs = shards[0].global_count
    assert len(seeds) == len(set(seeds)) == 3 * global_envs
    assert seeds[:global_envs] == list(range(7, 7 + global_envs))  # global env g gets seed + g


def test_unsupported_spaces_are_user_errors() -> None:
    with pytest.raises(UserError, match="observation space .* is not supported"):
        make_vec_env(EnvConfig(id="Blackjack-v1"), [0])
    with pytest.raises(UserError, match="has no attribute 'Nope'"):
        make_vec_env(EnvConfig(id="tests.envs.toy:Nope"), [0])


def test_env_imports_register_third_party_ids_before_the_env_is_made() -> None:
    """rl-zoo's --gym-packages habit: an id a package registers when imported (ALE/..., MiniGrid)."""
    cfg = EnvConfig(id="DistrlToy/Counting-v0", num_envs=2)
    with pytest.raises(UserError, match="name it in env.imports, e.g. env.imports=\\[ale_py\\]"):
        make_vec_env(cfg, [0, 1])
    env = make_vec_env(cfg.model_copy(update={"imports": ["tests.envs.registers_ids"]}), [0, 1])
    assert env.reset().shape[0] == 2
    env.close()
    with pytest.raises(UserError, match="env.imports: no module 'no_such_env_package' is installed"):
        make_vec_env(cfg.model_copy(update={"imports": ["no_such_env_package"]}), [0])


@pytest.mark.slow
def test_env_imports_through_the_command_line(tmp_path: Path) -> None:
    result = distrl(
        "train", "--env", "DistrlToy/Counting-v0", "--run-dir", str(tmp_path), "--total-steps", "256",
        "env.imports=[tests.envs.registers_ids]", "algo.rollout_steps=16", "train.stop_return=null",
        "log.tensorboard=false", cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_mujoco_warns_once_however_many_envs_are_built() -> None:
    code = (
        "import torch\n"
        "from distrl.config.sections import EnvConfig\n"
        "from distrl.envs.gymnasium_backend import make_gymnasium_vec_env\n"
        "for _ in range(2):\n"
        "    cfg = EnvConfig(id='HalfCheetah-v5', num_envs=3)\n"
        "    make_gymnasium_vec_env(cfg, [1, 2, 3], torch.device('cpu'))\n"
    )
    result = run_python("-c", code)
    assert result.returncode == 0, result.stderr
    assert (result.stdout + result.stderr).count("settotalmass") == 1


@pytest.mark.parametrize(
    "cfg",
    [
        EnvConfig(id="CartPole-v1"),
        EnvConfig(id="tests.envs.toy:CountingEnv", max_episode_steps=7),  # truncations: final_obs
        # An id a package registers: each env process imports it (env.imports) before making it.
        EnvConfig(id="DistrlToy/Counting-v0", imports=["tests.envs.registers_ids"]),
        EnvConfig(id="tests.envs.toy:DictCueEnv", kwargs={"image": True}, obs_keys=["frame", "flags"]),
    ],
    ids=["cartpole", "time-limit", "registered-id", "dict-image"],
)
def test_envs_stepped_in_processes_of_their_own_step_as_in_one(cfg: EnvConfig) -> None:
    """``gymnasium_async``: the same seeds and actions give the same steps as ``gymnasium``."""
    in_one = make_vec_env(cfg, [3, 4, 5])
    in_processes = make_vec_env(cfg.model_copy(update={"backend": "gymnasium_async"}), [3, 4, 5])
    try:
        assert torch.equal(in_one.reset(), in_processes.reset())
        actions = torch.Generator().manual_seed(0)
        for _ in range(100):
            action = torch.randint(0, 2, (3,), generator=actions)
            for a, b in zip(in_one.step(action)[:5], in_processes.step(action)[:5], strict=True):
                assert torch.equal(a, b)
    finally:
        in_one.close()
        in_processes.close()


@pytest.mark.slow
def test_training_on_envs_in_processes_of_their_own_is_training_on_envs_in_one(tmp_path: Path) -> None:
    """The rank (or its collector process) acting for envs that step in processes of their own
    trains the same weights as with the envs in one process."""
    quiet = ["train.stop_return=null", "log.tensorboard=false", "log.progress=false"]
    quiet += ["train.total_steps=1024", "env.num_envs=4"]  # 4 env processes, 16 updates
    digests = []
    for name, extra in [
        ("in-one", []),
        ("in-processes", ["env.backend=gymnasium_async"]),
        ("collector-process", ["env.backend=gymnasium_async", "collect.processes=1"]),
    ]:
        run_dir = tmp_path / name
        config = str(REPO / "configs" / "cartpole_ppo.yaml")
        result = distrl("train", "--config", config, "--run-dir", str(run_dir), *quiet, *extra)
        assert result.returncode == 0, result.stderr[-3000:]
        digests.append(param_digests(run_dir))
    assert digests[1] == digests[0] and digests[2] == digests[0]
