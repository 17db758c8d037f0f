"""Two real network hosts: Linux network namespaces joined by a veth pair, torchrun in each.

distrl must pick the veth interface for gloo by itself (inside a namespace the hostname resolves
to 127.0.0.1, and a peer on the other host would be refused).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from distrl.io import checkpoint as ckpt
from tests.helpers import CARTPOLE, clean_env

MASTER = "10.123.0.1"


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


@pytest.fixture
def two_hosts() -> Iterator[list[str]]:
    tag = os.getpid() % 100000
    hosts, links = [f"distrl{tag}h0", f"distrl{tag}h1"], [f"dv{tag}a", f"dv{tag}b"]
    created = _ip("netns", "add", hosts[0])
    if created.returncode != 0:
        print(f"network namespaces unavailable ({created.stderr.strip()}): skipping")
        pytest.skip(f"cannot create network namespaces: {created.stderr.strip()}")
    try:
        steps = [
            ("netns", "add", hosts[1]),
            ("link", "add", links[0], "type", "veth", "peer", "name", links[1]),
        ]
        for host, link, address in zip(hosts, links, (MASTER, "10.123.0.2"), strict=True):
            steps += [
                ("link", "set", link, "netns", host),
                ("-n", host, "addr", "add", f"{address}/24", "dev", link),
                ("-n", host, "link", "set", link, "up"),
                ("-n", host, "link", "set", "lo", "up"),
            ]
        for step in steps:
            result = _ip(*step)
            assert result.returncode == 0, f"ip {' '.join(step)}: {result.stderr}"
        yield hosts
    finally:
        for host in hosts:
            _ip("netns", "del", host)


def test_torchrun_across_two_hosts(two_hosts: list[str], tmp_path: Path) -> None:
    procs = []
    for node_rank, host in enumerate(two_hosts):
        cmd = [
            "ip", "netns", "exec", host, sys.executable, "-m", "torch.distributed.run",
            "--nnodes=2", f"--node_rank={node_rank}", "--nproc_per_node=1",
            f"--master_addr={MASTER}", "--master_port=29500",
            "-m", "distrl.train", "--config", str(CARTPOLE), "--run-dir", str(tmp_path / f"host{node_rank}"),
            "--total-steps", "4096", "train.stop_return=null", "--distributed",
        ]  # fmt: skip
        env = {k: v for k, v in clean_env().items() if not k.endswith("SOCKET_IFNAME")}
        procs.append(subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True))
    try:
        for proc in procs:
            _, stderr = proc.communicate(timeout=180)
            assert proc.returncode == 0, stderr[-3000:]
    finally:
        for proc in procs:
            proc.kill()
    state = json.loads((ckpt.resolve_checkpoint(tmp_path / "host0") / "state.json").read_text())
    assert state["world_size"] == 2 and state["global_step"] == 4096
    assert state["ranks"][0]["param_sha256"] == state["ranks"][1]["param_sha256"]
    assert not (tmp_path / "host1").exists()  # the checkpoint is on the rank-0 host only
