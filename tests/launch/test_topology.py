import pytest

from distrl.errors import UserError
from distrl.launch.topology import discover_topology, expand_nodelist

TORCHRUN = {
    "RANK": "3",
    "LOCAL_RANK": "1",
    "WORLD_SIZE": "4",
    "LOCAL_WORLD_SIZE": "2",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "5555",
    "GROUP_RANK": "1",
    "TORCHELASTIC_RESTART_COUNT": "2",
    "TORCHELASTIC_USE_AGENT_STORE": "True",
}
SLURM = {
    "SLURM_PROCID": "5",
    "SLURM_LOCALID": "1",
    "SLURM_NTASKS": "8",
    "SLURM_NODEID": "2",
    "SLURM_JOB_NODELIST": "gpu[07-10]",
    "SLURM_JOB_ID": "123456",
}


def test_torchrun_variables() -> None:
    topo = discover_topology(TORCHRUN)
    assert (topo.launcher, topo.rank, topo.local_rank, topo.world_size) == ("torchrun", 3, 1, 4)
    assert (topo.node_rank, topo.master_addr, topo.master_port) == (1, "10.0.0.1", 5555)
    assert topo.restart_count == 2 and topo.agent_hosts_store and not topo.is_main
    assert topo.local_world_size == 2


def test_slurm_variables_give_rank_and_first_node_as_master() -> None:
    topo = discover_topology(SLURM)
    assert (topo.launcher, topo.rank, topo.local_rank, topo.world_size) == ("slurm", 5, 1, 8)
    assert topo.node_rank == 2 and topo.master_addr == "gpu07"
    assert topo.master_port == 20000 + 123456 % 20000
    assert topo.local_world_size == 2  # 8 tasks on 4 nodes


def test_torchrun_wins_over_slurm_when_both_are_set() -> None:
    assert discover_topology({**SLURM, **TORCHRUN}).launcher == "torchrun"


def test_no_launcher_is_a_single_process_without_process_group() -> None:
    topo = discover_topology({})
    assert topo.world_size == 1 and not topo.is_distributed and topo.is_main
    # One SLURM task is also a lone process.
    assert not discover_topology({**SLURM, "SLURM_NTASKS": "1"}).is_distributed


def test_distributed_flag_without_launcher_is_a_clear_error() -> None:
    with pytest.raises(UserError, match="no launcher variables"):
        discover_topology({}, require_launcher=True)


@pytest.mark.parametrize(
    ("nodelist", "hosts"),
    [
        ("node[01-02]", ["node01", "node02"]),
        ("a[1-3,7],b5", ["a1", "a2", "a3", "a7", "b5"]),
        ("solo", ["solo"]),
        ("gpu[009-011]", ["gpu009", "gpu010", "gpu011"]),
    ],
)
def test_expand_nodelist(nodelist: str, hosts: list[str]) -> None:
    assert expand_nodelist(nodelist) == hosts


def test_file_rendezvous_ranks_per_node() -> None:
    env = {
        "DISTRL_RENDEZVOUS_FILE": "/tmp/rdzv",
        "DISTRL_RANK": "5",
        "DISTRL_LOCAL_RANK": "1",
        "DISTRL_WORLD_SIZE": "8",
        "DISTRL_NODE_RANK": "2",
        "DISTRL_NUM_NODES": "4",
    }
    topo = discover_topology(env)
    assert (topo.launcher, topo.rank, topo.world_size, topo.local_world_size) == ("file", 5, 8, 2)


JAX_ENV = {
    "JAX_RANK": "5",
    "JAX_LOCAL_RANK": "1",
    "JAX_WORLD_SIZE": "8",
    "JAX_LOCAL_WORLD_SIZE": "4",
    "JAX_NODE_RANK": "1",
    "JAX_NUM_NODES": "2",
    "JAX_COORDINATOR_ADDR": "10.0.0.7",
    "JAX_COORDINATOR_PORT": "29650",
}


def test_topology_from_jax_variables() -> None:
    topo = discover_topology(JAX_ENV)
    assert (topo.launcher, topo.rank, topo.local_rank, topo.world_size) == ("jax", 5, 1, 8)
    assert (topo.local_world_size, topo.node_rank, topo.num_nodes) == (4, 1, 2)
    assert (topo.master_addr, topo.master_port) == ("10.0.0.7", 29650)
    assert topo.is_distributed and not topo.is_main


def test_topology_from_skrl_variables_is_one_node() -> None:
    skrl = {k: JAX_ENV[k] for k in ("JAX_RANK", "JAX_LOCAL_RANK", "JAX_WORLD_SIZE", "JAX_COORDINATOR_ADDR",
                                    "JAX_COORDINATOR_PORT")}  # fmt: skip
    topo = discover_topology(skrl, require_launcher=True)
    assert (topo.launcher, topo.local_world_size, topo.node_rank, topo.num_nodes) == ("jax", 8, 0, 1)


def test_jax_launcher_wins_over_slurm() -> None:
    assert discover_topology({**SLURM, **JAX_ENV}).launcher == "jax"


def test_malformed_jax_variable_is_a_clear_error() -> None:
    with pytest.raises(UserError, match="JAX_COORDINATOR_PORT='http' is not an integer"):
        discover_topology({**JAX_ENV, "JAX_COORDINATOR_PORT": "http"})


def test_distributed_flag_without_launcher_names_the_jax_launcher() -> None:
    with pytest.raises(UserError, match="python -m distrl.launch.jax"):
        discover_topology({}, require_launcher=True)
