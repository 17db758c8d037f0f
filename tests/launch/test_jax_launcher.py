"""``python -m distrl.launch.jax``: real launcher and worker processes (the workers need no JAX)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distrl.launch.jax import main
from distrl.launch.supervise import run_workers
from distrl.launch.topology import discover_topology
from tests.helpers import clean_env

RECORD_ENV = """
import json, os, sys
from pathlib import Path
seen = {k: v for k, v in os.environ.items() if k.startswith("JAX_") or k == "OMP_NUM_THREADS"}
path = Path(sys.argv[1]) / f"rank{os.environ['JAX_RANK']}.json"
path.write_text(json.dumps({"env": seen, "argv": sys.argv[2:]}))
"""

FAIL_ONE = """
import os, sys, time
from pathlib import Path
out = Path(sys.argv[1])
if os.environ["JAX_LOCAL_RANK"] == "1":
    (out / "sleeper.pid").write_text(str(os.getpid()))
    time.sleep(60)
while not (out / "sleeper.pid").exists():  # fail only once the sibling is surely running
    time.sleep(0.05)
sys.exit(7)
"""

STOP_ON_SIGNAL = """
import os, signal, sys, time
from pathlib import Path
out, rank = Path(sys.argv[1]), os.environ["JAX_LOCAL_RANK"]
def stop(signum, frame):
    with open(out / f"signals{rank}", "a") as f:
        f.write(signal.Signals(signum).name + "\\n")
    if rank == "0":
        time.sleep(1.0)  # still saving when rank 1 has exited: the launcher must wait, not kill
        (out / "saved0").write_text("")
    sys.exit(0 if rank == "0" else 75)
signal.signal(signal.SIGINT, stop)
signal.signal(signal.SIGTERM, stop)
(out / f"ready{rank}").write_text("")
if rank == "0" and "SIGNAL_THE_PARENT" in os.environ:  # once both are up
    while not (out / "ready1").exists():
        time.sleep(0.05)
    os.kill(os.getppid(), signal.Signals[os.environ["SIGNAL_THE_PARENT"]])
time.sleep(60)
"""


def launcher(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "distrl.launch.jax", *map(str, args)]


def write_program(directory: Path, name: str, source: str) -> Path:
    path = directory / name
    path.write_text(source)
    return path


SECOND_OF_TWO_NODES = [
    "--nnodes=2",
    "--nproc-per-node",
    "2",
    "--node-rank=1",
    "--coordinator-address=10.1.2.3:4567",
]
"""skrl's spellings, both ``--flag value`` and ``--flag=value``."""


@pytest.mark.parametrize(
    ("layout", "module", "node_rank", "num_nodes", "coordinator"),
    [
        (["--nproc_per_node=2"], True, 0, 1, ("127.0.0.1", "29650")),
        (SECOND_OF_TWO_NODES, False, 1, 2, ("10.1.2.3", "4567")),
    ],
    ids=["module-one-node-defaults", "script-second-of-two-nodes"],
)
def test_workers_get_their_jax_variables_and_the_arguments_verbatim(
    tmp_path: Path,
    layout: list[str],
    module: bool,
    node_rank: int,
    num_nodes: int,
    coordinator: tuple[str, str],
) -> None:
    program = write_program(tmp_path, "record_env.py", RECORD_ENV)
    # No JAX variable of the caller's (the session's compile cache), so every one seen is the launcher's.
    env = {k: v for k, v in clean_env().items() if not k.startswith("JAX_")} | {"PYTHONPATH": str(tmp_path)}
    del env["OMP_NUM_THREADS"]  # the launcher's default: 1
    worker_args = ["--config", "c.yaml", "--nnodes", "5", "-m", "x", "algo.gamma=0.9"]
    target = ["-m", "record_env"] if module else [program]
    cmd = launcher(*layout, *target, tmp_path, *worker_args)
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    for local_rank in range(2):
        rank = 2 * node_rank + local_rank
        record = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert record["argv"] == worker_args  # the launcher took none of them
        assert record["env"] == {
            "JAX_RANK": str(rank),
            "JAX_LOCAL_RANK": str(local_rank),
            "JAX_WORLD_SIZE": str(2 * num_nodes),
            "JAX_LOCAL_WORLD_SIZE": "2",
            "JAX_NODE_RANK": str(node_rank),
            "JAX_NUM_NODES": str(num_nodes),
            "JAX_COORDINATOR_ADDR": coordinator[0],
            "JAX_COORDINATOR_PORT": coordinator[1],
            "OMP_NUM_THREADS": "1",
        }
        topo = discover_topology(record["env"], require_launcher=True)
        assert (topo.launcher, topo.rank, topo.local_rank) == ("jax", rank, local_rank)
        assert (topo.node_rank, topo.num_nodes, topo.local_world_size) == (node_rank, num_nodes, 2)
        assert (topo.master_addr, topo.master_port) == (coordinator[0], int(coordinator[1]))


def test_a_failed_worker_stops_its_sibling_and_sets_the_exit_code(tmp_path: Path) -> None:
    program = write_program(tmp_path, "fail_one.py", FAIL_ONE)
    start = time.monotonic()
    cmd = launcher("--nproc_per_node=2", program, tmp_path)
    result = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=30, check=False)
    assert time.monotonic() - start < 15  # the sibling's 60 s sleep was cut short
    assert result.returncode == 7, result.stderr
    assert "distrl.launch.jax: local rank 0 exited with code 7; stopping the others" in result.stderr
    with pytest.raises(ProcessLookupError):
        os.kill(int((tmp_path / "sleeper.pid").read_text()), 0)


def test_sigterm_to_the_launcher_reaches_every_worker_once(tmp_path: Path) -> None:
    program = write_program(tmp_path, "stop_on_signal.py", STOP_ON_SIGNAL)
    cmd = launcher("--nproc_per_node=2", program, tmp_path)
    proc = subprocess.Popen(cmd, env=clean_env(), stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not all((tmp_path / f"ready{rank}").exists() for rank in range(2)):
            assert proc.poll() is None and time.monotonic() < deadline, "the workers never got ready"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)  # to the launcher only, not its process group
        _, stderr = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 75, stderr  # rank 1's code; rank 0 exited 0
    for rank in range(2):
        assert (tmp_path / f"signals{rank}").read_text() == "SIGTERM\n"
    assert (tmp_path / "saved0").exists()  # rank 0 finished while rank 1 had already exited


def test_bad_options_are_one_line_and_exit_code_2() -> None:
    cmd = launcher("--nnodes=2", "-m", "distrl.train", "--config", "c.yaml")
    result = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2
    assert result.stderr == (
        "distrl.launch.jax: error: --nnodes 2: give --coordinator_address HOST:PORT, "
        "an address of node 0 that every node can reach\n"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--nnodes=2", "--node_rank=2", "--coordinator_address=h:1", "-m", "m"],
            "--node_rank 2: must be in 0..1 for --nnodes 2",
        ),
        (["--nproc_per_node=0", "-m", "m"], "--nproc_per_node 0: must be at least 1"),
        (["--nnodes=0", "-m", "m"], "--nnodes 0: must be at least 1"),
        (
            ["--coordinator_address=h:http", "-m", "m"],
            "--coordinator_address 'h:http': port 'http' is not an integer",
        ),
        (["--coordinator_address=h", "-m", "m"], "--coordinator_address 'h': expected HOST:PORT"),
        (["--nnodes=two", "-m", "m"], "argument --nnodes: invalid int value: 'two'"),
        (["--nproc_per_node=2"], "no program to run: give -m MODULE [ARGS...] or SCRIPT [ARGS...]"),
        (["missing.py"], "missing.py: no such script (use -m for a module)"),
        (["--bogus", "-m", "m"], "unrecognized arguments: --bogus"),
    ],
)
def test_bad_options_messages(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err == f"distrl.launch.jax: error: {message}\n"


def test_a_worker_killed_by_a_signal_gives_128_plus_it_and_a_stubborn_sibling_is_killed() -> None:
    program = (
        "import os, signal, time\n"
        "if os.environ['ROLE'] == 'fail':\n"
        "    time.sleep(0.5)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "time.sleep(60)\n"
    )
    envs = [{**clean_env(), "ROLE": role} for role in ("fail", "stubborn")]
    start = time.monotonic()
    assert run_workers([sys.executable, "-c", program], envs, prog="test", stop_grace_s=0.5) == 128 + 9
    assert time.monotonic() - start < 10  # SIGKILL after the 0.5 s grace, not the 60 s sleep


def test_a_preempted_worker_lets_its_siblings_finish(tmp_path: Path) -> None:
    # Exit code 75: the ranks agreed to stop; the one still saving is waited for, not stopped.
    program = (
        "import os, sys, time\nif os.environ['ROLE'] == 'preempted':\n    sys.exit(75)\n"
        f"time.sleep(1.0)\nopen({str(tmp_path / 'saved')!r}, 'w').close()"
    )
    envs = [{**clean_env(), "ROLE": role} for role in ("preempted", "saving")]
    assert run_workers([sys.executable, "-c", program], envs, prog="test", stop_grace_s=0.2) == 75
    assert (tmp_path / "saved").exists()
