"""Two real network hosts: Linux network namespaces joined by a veth pair, one launcher in each.

Each way in is run as a user would type it on two machines: torchrun with a static master,
torchrun's c10d rendezvous, srun's variables (no torchrun), the shared-file rendezvous and
distrl's JAX launcher (``--ml-framework jax``, on cluster hosts only: see its test), and a Ray
cluster of a head and a worker node (``--launcher ray``). Two
name set-ups are used: "cluster" hosts have their own hostnames (node01, node02) that resolve to
their veth addresses through per-namespace /etc/hosts; "bare" hosts keep the machine's hostname,
which resolves to 127.0.0.1 there, so gloo would bind to loopback and be refused by the peer
unless distrl picks the veth interface by itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from distrl.io import checkpoint as ckpt
from tests.helpers import CARTPOLE, OFFLINE, clean_env, collect

ADDRESSES = ("10.123.0.1", "10.123.0.2")
HOSTNAMES = ("node01", "node02")
TRAIN = ["--config", str(CARTPOLE), "--total-steps", "4096", "train.stop_return=null"]


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


@dataclass
class Hosts:
    namespaces: list[str]
    links: list[str]

    def start(self, index: int, cmd: list[str], cluster_names: bool, env: dict[str, str] | None = None):
        """Run ``cmd`` on host ``index``; with ``cluster_names`` it runs under that host's name."""
        prefix = ["ip", "netns", "exec", self.namespaces[index]]
        if cluster_names:
            prefix += ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', HOSTNAMES[index]]
        env = {k: v for k, v in (env or clean_env()).items() if not k.endswith("SOCKET_IFNAME")}
        # A session of its own, so a test can kill the launcher with all its workers.
        return subprocess.Popen(
            [*prefix, *cmd], env=env, stderr=subprocess.PIPE, text=True, start_new_session=True
        )


def kill_all(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()


@contextlib.contextmanager
def two_hosts(tag: str) -> Iterator[Hosts]:
    """Two hosts named by ``tag`` (namespaces distrl<tag>h0/h1, veth pair dv<tag>a/b), removed at
    the end; skips the test where they cannot be made."""
    namespaces, links = [f"distrl{tag}h0", f"distrl{tag}h1"], [f"dv{tag}a", f"dv{tag}b"]
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        print("iproute2's ip or util-linux's unshare is missing: skipping")
        pytest.skip("the multi-host tests need `ip` (iproute2) and `unshare` (util-linux)")
    created = _ip("netns", "add", namespaces[0])
    if created.returncode != 0:
        print(f"network namespaces unavailable ({created.stderr.strip()}): skipping")
        pytest.skip(f"cannot create network namespaces: {created.stderr.strip()}")
    try:
        steps = [
            ("netns", "add", namespaces[1]),
            ("link", "add", links[0], "type", "veth", "peer", "name", links[1]),
        ]
        for ns, link, address in zip(namespaces, links, ADDRESSES, strict=True):
            steps += [
                ("link", "set", link, "netns", ns),
                ("-n", ns, "addr", "add", f"{address}/24", "dev", link),
                ("-n", ns, "link", "set", link, "up"),
                ("-n", ns, "link", "set", "lo", "up"),
            ]
        for step in steps:
            result = _ip(*step)
            assert result.returncode == 0, f"ip {' '.join(step)}: {result.stderr}"
        # `ip netns exec` mounts /etc/netns/NS/hosts over /etc/hosts: the machine's own entries
        # (its hostname -> 127.0.0.1) plus the two cluster names.
        names = "".join(f"{a} {h}\n" for a, h in zip(ADDRESSES, HOSTNAMES, strict=True))
        for ns in namespaces:
            Path(f"/etc/netns/{ns}").mkdir(parents=True, exist_ok=True)
            Path(f"/etc/netns/{ns}/hosts").write_text(Path("/etc/hosts").read_text() + names)
        yield Hosts(namespaces, links)
    finally:
        for ns in namespaces:
            _ip("netns", "del", ns)
            shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    """Two hosts of the test's own: it may cut one off or kill its processes."""
    with two_hosts(str(os.getpid() % 100000)) as made:
        yield made


def wait_ok(procs: list[subprocess.Popen], timeout: float = 240) -> None:
    """Every host's launcher exits 0 within ``timeout``; a failure shows every host's stderr (one
    host's launcher may wait on the other's, which then holds the cause)."""
    deadline = time.monotonic() + timeout
    stderr: dict[int, str] = {}
    for index, proc in enumerate(procs):
        try:
            stderr[index] = proc.communicate(timeout=max(deadline - time.monotonic(), 1.0))[1]
        except subprocess.TimeoutExpired:
            break
    for index, proc in enumerate(procs):
        if index not in stderr:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            stderr[index] = proc.communicate()[1]
    report = "\n".join(f"host{i} exit {p.returncode}: {stderr[i][-2000:]}" for i, p in enumerate(procs))
    assert all(proc.returncode == 0 for proc in procs), report


def assert_trained_and_saved_on_host0(tmp_path: Path, steps: int = 4096) -> None:
    state = json.loads((ckpt.resolve_checkpoint(tmp_path / "host0") / "state.json").read_text())
    assert state["world_size"] == 2 and state["global_step"] == steps
    assert state["ranks"][0]["param_sha256"] == state["ranks"][1]["param_sha256"]
    assert not (tmp_path / "host1").exists()  # the checkpoint is on the rank-0 host only


def torchrun(run_dir: Path, *rendezvous: str) -> list[str]:
    return [
        sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1", *rendezvous,
        "-m", "distrl.train", *TRAIN, "--run-dir", str(run_dir), "--distributed",
    ]  # fmt: skip


@pytest.mark.slow
def test_torchrun_static_master_across_bare_hosts(hosts: Hosts, tmp_path: Path) -> None:
    static = [f"--master_addr={ADDRESSES[0]}", "--master_port=29500"]
    procs = [
        hosts.start(i, torchrun(tmp_path / f"host{i}", f"--node_rank={i}", *static), cluster_names=False)
        for i in range(2)
    ]
    wait_ok(procs)
    assert_trained_and_saved_on_host0(tmp_path)


@pytest.mark.slow
def test_hsdp_shards_within_each_host_and_replicates_across(hosts: Hosts, tmp_path: Path) -> None:
    """2 hosts of 2 ranks with ``train.sharding=hsdp``: the mesh is the launcher's (hosts x ranks
    per host); the run dir is shared, as sharded checkpoints need, and every rank writes there."""
    static = [f"--master_addr={ADDRESSES[0]}", "--master_port=29500"]
    run_dir = tmp_path / "shared-run"
    procs = []
    for i in range(2):
        cmd = [
            sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=2",
            f"--node_rank={i}", *static, "-m", "distrl.train", "--config", str(CARTPOLE),
            "--total-steps", "1024", "train.stop_return=null", "train.sharding=hsdp",
            "--run-dir", str(run_dir), "--distributed",
        ]  # fmt: skip
        procs.append(hosts.start(i, cmd, cluster_names=False))
    wait_ok(procs)
    checkpoint = ckpt.resolve_checkpoint(run_dir)
    state = json.loads((checkpoint / "state.json").read_text())
    assert state["world_size"] == 4 and state["global_step"] == 1024 and state["sharded"]
    assert list((checkpoint / "model").glob("shard-*.safetensors"))
    assert not (checkpoint / "model.safetensors").exists()


def c10d(index: int, cluster_names: bool) -> list[str]:
    """The c10d flags on host ``index``. Where hostnames resolve to 127.0.0.1, torchrun needs each
    agent's own address and the store's host marked (its own requirement, documented in
    docs/launchers/multi-node.md)."""
    common = ["--rdzv_backend=c10d", "--rdzv_id=distrl-test"]
    if cluster_names:
        return [*common, f"--rdzv_endpoint={HOSTNAMES[0]}:29400"]
    is_host = "true" if index == 0 else "false"
    return [*common, f"--rdzv_endpoint={ADDRESSES[0]}:29400", f"--local_addr={ADDRESSES[index]}",
            f"--rdzv_conf=is_host={is_host}"]  # fmt: skip


@pytest.mark.parametrize("cluster_names", [True, False], ids=["cluster-hosts", "bare-hosts"])
@pytest.mark.slow
def test_torchrun_c10d_rendezvous_across_hosts(hosts: Hosts, tmp_path: Path, cluster_names: bool) -> None:
    procs = [
        hosts.start(i, torchrun(tmp_path / f"host{i}", *c10d(i, cluster_names)), cluster_names)
        for i in range(2)
    ]
    wait_ok(procs)
    # c10d may give either host rank 0: the checkpoint is wherever rank 0 ran, and only there.
    saved = [i for i in range(2) if (tmp_path / f"host{i}").exists()]
    assert len(saved) == 1
    if saved == [1]:
        (tmp_path / "host1").rename(tmp_path / "host0")
    assert_trained_and_saved_on_host0(tmp_path)


@pytest.mark.slow
def test_srun_variables_across_cluster_hosts(hosts: Hosts, tmp_path: Path) -> None:
    procs = []
    for i in range(2):
        env = {
            **clean_env(),
            "SLURM_PROCID": str(i),
            "SLURM_LOCALID": "0",
            "SLURM_NODEID": str(i),
            "SLURM_NTASKS": "2",
            "SLURM_JOB_ID": "4242",
            "SLURM_JOB_NODELIST": "node[01-02]",  # the master is node01, found by name
        }
        cmd = [sys.executable, "-m", "distrl.train", *TRAIN, "--run-dir", str(tmp_path / f"host{i}")]
        procs.append(hosts.start(i, [*cmd, "--distributed"], cluster_names=True, env=env))
    wait_ok(procs)
    assert_trained_and_saved_on_host0(tmp_path)


@pytest.mark.slow
def test_file_rendezvous_across_bare_hosts(hosts: Hosts, tmp_path: Path) -> None:
    shared = tmp_path / "shared"  # both hosts see this directory: the "network filesystem"
    shared.mkdir()
    procs = []
    for i in range(2):
        cmd = [
            sys.executable, "-m", "distrl", "train", *TRAIN, "--run-dir", str(tmp_path / f"host{i}"),
            "--num-nodes", "2", "--node-index", str(i), "--rendezvous-file", str(shared / "rendezvous"),
        ]  # fmt: skip
        procs.append(hosts.start(i, cmd, cluster_names=False))
    wait_ok(procs)
    assert_trained_and_saved_on_host0(tmp_path)


@pytest.mark.slow
def test_host_cut_off_mid_run_fails_the_other_host_within_the_timeout(hosts: Hosts, tmp_path: Path) -> None:
    timeout_s = 10
    static = [f"--master_addr={ADDRESSES[0]}", "--master_port=29500"]
    procs = []
    for i in range(2):
        cmd = torchrun(tmp_path / f"host{i}", f"--node_rank={i}", *static)
        cmd += ["--total-steps", "100000000", f"comm.timeout_s={timeout_s}"]
        procs.append(hosts.start(i, cmd, cluster_names=False))
    survivor = procs[0]
    metrics = tmp_path / "host0" / "metrics.jsonl"
    try:
        deadline = time.monotonic() + 120
        while not (metrics.is_file() and len(metrics.read_text().splitlines()) >= 3):
            assert time.monotonic() < deadline and survivor.poll() is None
            time.sleep(0.1)
        # The other host drops off the network: no reset, no FIN, only silence.
        result = _ip("-n", hosts.namespaces[1], "link", "set", hosts.links[1], "down")
        assert result.returncode == 0, result.stderr
        start = time.monotonic()
        _, stderr = survivor.communicate(timeout=timeout_s + 90)
        elapsed = time.monotonic() - start
    finally:
        kill_all(procs)
    assert survivor.returncode != 0
    assert elapsed < timeout_s + 30, f"took {elapsed:.0f} s"
    assert "another rank died, hung past comm.timeout_s or became unreachable" in stderr, stderr[-3000:]


def jax_launcher(run_dir: Path, node_rank: int) -> list[str]:
    return [
        sys.executable, "-m", "distrl.launch.jax", "--nnodes=2", "--nproc_per_node=1",
        f"--node_rank={node_rank}", f"--coordinator_address={ADDRESSES[0]}:29650",
        "-m", "distrl.train", "--config", str(CARTPOLE), "--run-dir", str(run_dir), "--distributed",
        "--ml-framework", "jax", "--total-steps", "2048", "train.stop_return=null",
        "log.tensorboard=false", "log.progress=false",
    ]  # fmt: skip


@pytest.mark.slow
def test_jax_launcher_across_cluster_hosts(hosts: Hosts, tmp_path: Path) -> None:
    """Cluster hosts only. JAX's CPU collectives (gloo) take their address from the hostname:
    jax's make_cpu_client calls make_gloo_tcp_collectives with no hostname and no interface, and
    neither jax nor jaxlib reads an environment variable for one (GLOO_SOCKET_IFNAME is torch's).
    On bare hosts each process advertises 127.0.0.1, so the coordinator (on the veth address)
    joins both hosts but the first collective fails after about 2.5 minutes: host 0 with
    "Gloo context initialization failed: [external/gloo/gloo/transport/tcp/pair.cc:152] timed out
    connecting: SO_ERROR: Connection refused, remote=[127.0.0.1]:PORT", host 1 with "... [external/
    gloo/gloo/transport/tcp/pair.h:311] Connect timeout [none]"; both launchers exit 1."""
    pytest.importorskip("jax", reason="the jax extra is installed by make test")
    procs = [hosts.start(i, jax_launcher(tmp_path / f"host{i}", i), cluster_names=True) for i in range(2)]
    wait_ok(procs)
    rows = [json.loads(line) for line in (tmp_path / "host0" / "metrics.jsonl").read_text().splitlines()]
    assert rows and all(row["ranks"] == 2 for row in rows) and rows[-1]["global_step"] == 2048
    assert_trained_and_saved_on_host0(tmp_path, steps=2048)


@pytest.mark.slow
def test_losing_a_host_the_run_goes_on_on_the_other_with_global_sizes_kept(
    hosts: Hosts, tmp_path: Path
) -> None:
    """torchrun's elastic agents with ``--nnodes=1:2``: the second host drops dead mid-run (its
    launcher and ranks killed); the first host's rank fails its collective, its agent starts
    again with the hosts left, and the run resumes on 1 rank from the newest checkpoint (in a run
    dir both hosts share), saying so in one line, and ends at its budget."""
    run_dir, total = tmp_path / "shared-run", 48 * 512
    procs = []
    for i in range(2):
        conf = c10d(i, cluster_names=False)
        conf[-1] += ",last_call_timeout=1"  # the hosts left go on without waiting for more
        cmd = [
            sys.executable, "-m", "torch.distributed.run", "--nnodes=1:2", "--nproc_per_node=1",
            "--max-restarts=2", *conf, "-m", "distrl.train", "--config", str(CARTPOLE),
            "--total-steps", str(total), "train.stop_return=null", "checkpoint.interval_steps=2048",
            "comm.timeout_s=20", "--run-dir", str(run_dir), "--distributed",
        ]  # fmt: skip
        procs.append(hosts.start(i, cmd, cluster_names=False))
    metrics = run_dir / "metrics.jsonl"
    try:
        deadline = time.monotonic() + 180
        while not (metrics.is_file() and len(metrics.read_text().splitlines()) >= 6):
            assert time.monotonic() < deadline and procs[0].poll() is None
            time.sleep(0.1)
        # The second host dies: every process in its network namespace (torchrun's agent gives
        # its ranks sessions of their own), at once.
        for pid in _ip("netns", "pids", hosts.namespaces[1]).stdout.split():
            os.kill(int(pid), signal.SIGKILL)
        _, stderr = procs[0].communicate(timeout=300)
    finally:
        kill_all(procs)
    assert procs[0].returncode == 0, stderr[-3000:]
    assert "distrl: going on with 1 rank(s) from a checkpoint of 2 (ranks lost or added since)" in stderr
    state = json.loads((ckpt.resolve_checkpoint(run_dir) / "state.json").read_text())
    assert state["world_size"] == 1 and state["global_step"] == total
    steps = [json.loads(line)["global_step"] for line in metrics.read_text().splitlines()]
    assert steps == list(range(512, total + 1, 512))  # the same global batch; no update twice


@contextlib.contextmanager
def ray_cluster(hosts: Hosts, tmp_path: Path, wrap_worker: Sequence[str] = ()) -> Iterator[tuple[str, dict]]:
    """A Ray head on host 0 and a worker node on host 1 (token authentication on), the worker's
    ``ray start`` run through ``wrap_worker``; (the head's address, the environment to join it)."""
    pytest.importorskip("ray", reason="the ray extra is installed by make test")
    token = tmp_path / "auth_token"
    token.write_text(secrets.token_hex(32))
    env = {**clean_env(), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    ray = [str(Path(sys.executable).with_name("ray")), "start", "--block", "--num-cpus=2", "--num-gpus=0"]
    head = f"{ADDRESSES[0]}:6379"
    temps = [Path(tempfile.mkdtemp(prefix=f"distrl-ray-h{i}-")) for i in range(2)]  # short: sockets
    starts = [
        [*ray, "--head", "--port=6379", "--include-dashboard=false"],
        [*wrap_worker, *ray, f"--address={head}"],
    ]
    nodes = []
    try:
        for i, start in enumerate(starts):  # one after the other, as Ray needs
            where = [f"--node-ip-address={ADDRESSES[i]}", f"--temp-dir={temps[i]}"]
            nodes.append(hosts.start(i, [*start, *where], cluster_names=False, env=env))
            _wait_for_ray_nodes(hosts, head, i + 1, env)
        yield head, env
    finally:
        kill_all(nodes)
        for temp in temps:
            shutil.rmtree(temp, ignore_errors=True)


def ray_train(hosts: Hosts, head: str, env: dict, run_dir: Path, *args: str) -> None:
    """``distrl train --launcher ray`` from host 0 on the two hosts' cluster, to its end."""
    train = [
        sys.executable, "-m", "distrl", "train", *args, "--launcher", "ray", "--ray-address", head,
        "--run-dir", str(run_dir), "log.progress=false", "cluster.num_nodes=2", "cluster.usage_every_s=0.5",
    ]  # fmt: skip
    wait_ok([hosts.start(0, train, cluster_names=False, env=env)])


def sampled_nodes(run_dir: Path, group: str) -> set[str]:
    """The hosts the driver found ``group``'s workers on (``workers.jsonl``)."""
    samples = [json.loads(line) for line in (run_dir / "workers.jsonl").read_text().splitlines()]
    return {sample["node"] for sample in samples if sample["worker"].split("-")[2] == group}


@dataclass
class RayOnTwoHosts:
    """A Ray cluster of a head on host 0 and a worker node on host 1 (``ray_cluster``)."""

    hosts: Hosts
    head: str
    env: dict[str, str]
    """The environment to join it."""
    data: Path
    """1500 logged rows on host 0; host 1's Ray node sees another 1000 at this path."""


@pytest.fixture(scope="module")
def ray_on_two_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayOnTwoHosts]:
    """The Ray cluster of the module's last tests (last: it stands until the module ends), built
    once: two hosts of its own, the worker node run in a mount namespace of its own with its part
    of a split data set mounted at the path of host 0's part (``data.layout=split``), which no
    other run reads."""
    pytest.importorskip("ray", reason="the ray extra is installed by make test")
    tmp = tmp_path_factory.mktemp("ray-on-two-hosts")
    with two_hosts(f"r{os.getpid() % 100000}") as hosts:
        data, part1 = tmp / "data", tmp / "part1"
        collect(data, 1500, 750, seed=0)
        collect(part1, 1000, 1000, seed=1)
        mount = 'mount --bind "$0" "$1" && shift && exec "$@"'
        mount_part1 = ["unshare", "--mount", "sh", "-c", mount, str(part1), str(data)]
        with ray_cluster(hosts, tmp, wrap_worker=mount_part1) as (head, env):
            yield RayOnTwoHosts(hosts, head, env, data)


@pytest.mark.slow
def test_ray_head_and_worker_node_on_two_hosts_run_env_workers_on_both(
    ray_on_two_hosts: RayOnTwoHosts, tmp_path: Path
) -> None:
    """The job's two nodes (``cluster.strategy`` SPREAD: one Ray node each) hold the learner with
    2 env workers and the third env worker, so each host steps envs."""
    cluster, run_dir = ray_on_two_hosts, tmp_path / "run"
    ray_train(
        cluster.hosts, cluster.head, cluster.env, run_dir, "--config", str(CARTPOLE),
        "--total-steps", "8192", "train.stop_return=null", "workers.env=3", "workers.cpus_per_env=0.5",
    )  # fmt: skip
    state = json.loads((ckpt.resolve_checkpoint(run_dir) / "state.json").read_text())
    assert state["global_step"] == 8192
    assert sampled_nodes(run_dir, "env") == set(ADDRESSES)  # env workers on both hosts


@pytest.mark.slow
def test_ray_mode_reads_each_hosts_own_part_under_split_layout(
    ray_on_two_hosts: RayOnTwoHosts, tmp_path: Path
) -> None:
    """``data.layout=split``: host 0 holds 1500 logged rows at ``data.path``, host 1 another 1000
    at the same path (its Ray node runs in a mount namespace of its own with its part mounted
    there). Either way each part is read once an epoch of 2500 rows at 64 rows per step:
    - one learner fed by a data worker on each host: ceil(1500 / 64) + ceil(1000 / 64) = 40 steps
      (had both workers read one part: 48 or 32 steps);
    - a learner on each host reading its host's part, 32 rows per step each: ceil(1500 / 32) = 47
      steps (had they divided one part, fewer rows)."""
    cluster = ray_on_two_hosts
    runs = {
        "data-workers": ["workers.data_per_node=1", "algo.gradient_steps=40"],
        "learners": ["workers.policy_per_node=1", "algo.gradient_steps=47"],
    }
    for name, overrides in runs.items():
        ray_train(
            cluster.hosts, cluster.head, cluster.env, tmp_path / name, "--config", str(OFFLINE),
            f"data.path={cluster.data}", "data.layout=split", "algo.batch_size=64", "train.total_steps=5000",
            "train.stop_return=null", "eval.cpe_every=0", "checkpoint.interval_steps=5000", *overrides,
        )  # fmt: skip
    for name in runs:
        rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        assert [(row["global_step"], row["epoch"]) for row in rows] == [(2500, 0), (5000, 1)], name
    assert sampled_nodes(tmp_path / "data-workers", "data") == set(ADDRESSES)


def _wait_for_ray_nodes(hosts: Hosts, address: str, count: int, env: dict[str, str]) -> None:
    """Until the Ray cluster at ``address`` has ``count`` alive nodes (asked from host 0)."""
    probe = (
        "import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); "
        "sys.exit(sum(n['Alive'] for n in ray.nodes()) < int(sys.argv[2]))"
    )
    deadline = time.monotonic() + 120
    while True:
        check = hosts.start(
            0, [sys.executable, "-c", probe, address, str(count)], cluster_names=False, env=env
        )
        _, stderr = check.communicate(timeout=120)
        if check.returncode == 0:
            return
        assert time.monotonic() < deadline, f"the Ray cluster did not reach {count} node(s): {stderr[-2000:]}"
        time.sleep(1)
