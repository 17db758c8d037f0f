"""One real Ray head for the whole test session (``ray_head``, registered in conftest.py) and
helpers to run ``distrl train --launcher ray`` against it."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from distrl.io import checkpoint as ckpt
from tests.helpers import CARTPOLE, distrl, free_port

HEAD_CPUS = 4
BUDGET = ["train.total_steps=4096", "train.stop_return=null", "checkpoint.interval_steps=4096"]
"""A short CartPole run with a checkpoint at its end."""


@dataclass(frozen=True)
class RayHead:
    """The session's Ray head: where it listens, and what a process needs to join it."""

    address: str
    env: dict[str, str]
    """The variables a process needs to join it: token authentication's two, no usage stats."""


@pytest.fixture(scope="session")
def ray_session_head() -> Iterator[RayHead]:
    """A Ray head on 127.0.0.1 with token authentication, for the whole session (skipped without
    the ray extra). The variables to join it are the head's alone: ``ray_head`` lends them to the
    tests that use it, one at a time."""
    pytest.importorskip("ray", reason="the ray extra is installed by make test")
    temp = Path(tempfile.mkdtemp(prefix="distrl-ray-test-"))  # short: Ray's Unix sockets live there
    token = temp / "auth_token"
    token.write_text(secrets.token_hex(32))
    env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token), "RAY_USAGE_STATS_ENABLED": "0"}
    port = free_port()
    ray_bin = str(Path(sys.executable).with_name("ray"))
    head = subprocess.Popen(
        [ray_bin, "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
         f"--num-cpus={HEAD_CPUS}", "--num-gpus=0", "--include-dashboard=false", f"--temp-dir={temp}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        # No draining on SIGTERM: it waits up to 30 s on a GCS that the same signal may have ended.
        env={**os.environ, **env, "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"},
    )  # fmt: skip
    address = f"127.0.0.1:{port}"
    try:
        _wait_for_head(address, env)
        yield RayHead(address, env)
    finally:
        head.terminate()
        head.wait(timeout=60)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture
def ray_head(ray_session_head: RayHead, monkeypatch: pytest.MonkeyPatch) -> str:
    """The session's Ray head's address. While the test runs, and only then, this process's
    environment carries the variables to join it, so the processes the test starts inherit them
    and no other test sees them."""
    for name, value in ray_session_head.env.items():
        monkeypatch.setenv(name, value)
    return ray_session_head.address


def _wait_for_head(address: str, env: dict[str, str]) -> None:
    probe = "import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); ray.shutdown()"
    deadline = time.monotonic() + 60
    while True:
        result = subprocess.run(
            [sys.executable, "-c", probe, address],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, **env},
        )
        if result.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the Ray head did not come up: {result.stderr[-2000:]}")
        time.sleep(1)


def ray_train(
    address: str, run_dir: Path, *overrides: str, config: Path = CARTPOLE
) -> subprocess.CompletedProcess:
    return distrl(
        "train", "--config", str(config), "--launcher", "ray", "--ray-address", address,
        "--run-dir", str(run_dir), "log.progress=false", "log.tensorboard=false", *overrides,
    )  # fmt: skip


def local_train(run_dir: Path, *overrides: str, config: Path = CARTPOLE) -> subprocess.CompletedProcess:
    """``ray_train``'s run in one process, without Ray: what Ray mode is compared with."""
    return distrl(
        "train", "--config", str(config), "--run-dir", str(run_dir), "log.progress=false",
        "log.tensorboard=false", *overrides,
    )  # fmt: skip


_KILLER = """
import pathlib, sys, time
import ray

address, metrics, group, rows, namespace = sys.argv[1:]
metrics, rows = pathlib.Path(metrics), int(rows)
ray.init(address=address, log_to_driver=False)
# A handle's class loads its module, and torch with it: seconds, which the run may not last.
import distrl.ray.data_workers, distrl.ray.env_workers, distrl.ray.eval_workers  # noqa
import distrl.ray.generation_workers  # noqa
print("connected", flush=True)
deadline = time.monotonic() + 300
while time.monotonic() < deadline:
    written = len(metrics.read_text().splitlines()) if metrics.exists() else 0
    if written >= rows:
        named = [
            a for a in ray.util.list_named_actors(all_namespaces=True)
            if a["namespace"] == namespace and f"-{group}-" in a["name"]
        ]
        if named:
            actor = ray.get_actor(named[0]["name"], namespace=named[0]["namespace"])
            ray.kill(actor, no_restart=False)  # as an OOM kill would: Ray restarts it
            print(named[0]["name"], written)
            break
    time.sleep(0.02)
"""


def ray_train_killing(
    address: str, run_dir: Path, group: str, after_rows: int, *overrides: str, config: Path = CARTPOLE
) -> tuple[subprocess.CompletedProcess, str]:
    """``ray_train`` (in a namespace of its own) while another Ray driver ``ray.kill``s the run's
    first ``group`` worker once ``after_rows`` metrics rows are written; the run and the killed
    actor's name with the rows written when it was killed ("" if the run ended first)."""
    namespace = f"test-{secrets.token_hex(4)}"
    metrics = str(run_dir / "metrics.jsonl")
    killer = subprocess.Popen(
        [sys.executable, "-c", _KILLER, address, metrics, group, str(after_rows), namespace],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        connected = killer.stdout.readline().strip()  # the run starts once the killer is ready
        assert connected == "connected", killer.communicate(timeout=60)[1][-3000:]
        result = ray_train(address, run_dir, "--namespace", namespace, *overrides, config=config)
    finally:
        killer.terminate()
        killed = killer.communicate(timeout=60)[0].strip()
    return result, killed


def metrics_rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def param_digests(run_dir: Path) -> list[str]:
    """Every rank's parameter digest in the run's newest checkpoint."""
    state = json.loads((ckpt.resolve_checkpoint(run_dir) / "state.json").read_text())
    return [rank["param_sha256"] for rank in state["ranks"]]


def env_steps_by_worker(run_dir: Path) -> list[int]:
    """Each env worker's env steps (its ``work_done``) in the driver's last sample of the run's
    ``workers.jsonl``, taken once the learners had ended; by worker name."""
    rows = map(json.loads, (run_dir / "workers.jsonl").read_text().splitlines())
    last = {row["worker"]: row for row in rows}
    return [last[name]["work_done"] for name in sorted(last) if "-env-" in name]


def final_row(run_dir: Path) -> dict:
    """The run's last metrics row."""
    return metrics_rows(run_dir)[-1]
