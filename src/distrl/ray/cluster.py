"""The Ray instance a job runs on: a local one started for the job (dashboard and usage
statistics off, token authentication on, its sessions, logs and token in the run dir), or a
running cluster joined at an address; ``distrl status --run-dir`` finds a job's local one."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from distrl import extras
from distrl.config.sections import ClusterConfig
from distrl.errors import UserError
from distrl.extras import require_extra

RAY_JSON = "ray.json"
"""In the run dir while a local Ray instance runs the job: its address, token and namespace."""


RAY_TEMP_DIR_MAX_CHARS = 40
"""The longest temp dir path Ray's Unix sockets fit under (``<dir>/session_<date>_<time>_<pid>/
sockets/plasma_store``; a socket's path has at most 107 bytes)."""


@contextlib.contextmanager
def local_ray(cluster: ClusterConfig, run_dir: Path, namespace: str) -> Iterator[tuple[Any, str]]:
    """A local Ray instance for the job: dashboard and usage statistics off, token authentication
    on, its sessions, logs and token in ``cluster.ray_temp_dir`` or else ``<run_dir>/ray``
    (through a short link in the system's temp dir where that path is too long for Ray's Unix
    sockets). While it runs, ``<run_dir>/ray.json`` says where it listens and where its token is
    (``distrl status --run-dir``). Yields the ``ray`` module and a line saying so."""
    temp_dir = Path(cluster.ray_temp_dir).resolve() if cluster.ray_temp_dir else run_dir / "ray"
    for directory in (run_dir, temp_dir):
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(
                f"cannot write {directory} for the local Ray instance: {exc.strerror or exc}",
                code="ray-temp-dir-unwritable",
            ) from None
    token = _token_auth(temp_dir)
    ray = import_ray()  # after the auth variables: Ray reads them when it is imported
    # The local Ray's processes inherit the driver's environment: setting it here spares every
    # actor the per-job runtime env, which Ray starts fresh worker processes for (~0.3 s each).
    os.environ.update(worker_path())
    with contextlib.ExitStack() as cleanup:
        short = temp_dir
        if len(str(temp_dir)) > RAY_TEMP_DIR_MAX_CHARS:
            link_dir = Path(tempfile.mkdtemp(prefix="distrl-ray-"))
            cleanup.callback(shutil.rmtree, link_dir, ignore_errors=True)
            short = link_dir / "r"
            short.symlink_to(temp_dir, target_is_directory=True)
        ray.init(
            namespace=namespace,
            logging_level=logging.WARNING,
            include_dashboard=False,
            _temp_dir=str(short),
            log_to_driver=True,
        )
        cleanup.callback(ray.shutdown)  # first of all, when the job ends (a second call does nothing)
        where = run_dir / RAY_JSON
        where.write_text(
            json.dumps(
                {
                    "address": ray.get_runtime_context().gcs_address,
                    "token_path": str(token),
                    "namespace": namespace,
                }
            )
        )
        cleanup.callback(where.unlink, missing_ok=True)
        yield (
            ray,
            (
                f"distrl: started a local Ray instance (logs in {temp_dir}/session_latest/logs); "
                f"`distrl status --run-dir {run_dir}` shows the job's workers"
            ),
        )


def clear_run_dir(run_dir: Path) -> None:
    """``--overwrite`` under a local Ray: everything in the run dir but that Ray's own files."""
    for entry in run_dir.iterdir():
        if entry.name in ("ray", RAY_JSON):
            continue
        try:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except OSError as exc:
            raise UserError(
                f"--overwrite: cannot remove {entry}: {exc.strerror or exc}", code="run-dir-unremovable"
            ) from None


def local_job_cluster(run_dir: Path) -> tuple[str, str]:
    """The address and namespace of the local Ray instance a job in ``run_dir`` started, with its
    token set for Ray to read (``distrl status --run-dir``)."""
    where = run_dir / RAY_JSON
    try:
        cluster = json.loads(where.read_text())
        address, token, namespace = cluster["address"], cluster["token_path"], cluster["namespace"]
    except (OSError, ValueError, KeyError, TypeError):
        raise UserError(
            f"--run-dir {run_dir}: no job there runs its own local Ray instance ({RAY_JSON} is in the "
            "run dir while `distrl train --launcher ray` without --ray-address runs)",
            code="ray-run-dir-no-local-job",
        ) from None
    if (why := _unreachable(address)) is not None:  # the driver was killed and left the file
        raise UserError(
            f"--run-dir {run_dir}: the job's local Ray instance at {address} has ended ({why})",
            code="ray-local-job-ended",
        )
    _use_token(Path(token))
    return address, namespace


def _token_auth(temp_dir: Path) -> Path:
    """Token authentication for the local Ray instance about to start: the token in its temp dir
    (not the user's home), the mode and the token's path in the environment, which Ray reads
    when imported and its processes inherit. Returns the token's path."""
    token = temp_dir / "auth_token"
    if not token.exists():
        token.touch(mode=0o600)
        token.write_text(secrets.token_hex(32))
    _use_token(token)
    return token


def _use_token(token: Path) -> None:
    """Token authentication with ``token``, in the environment: Ray reads it when imported, and
    the processes it starts inherit it."""
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(token)


def join(ray: Any, address: str, namespace: str, **options: Any) -> None:
    # Ray itself retries an address where nothing listens for minutes: probe it first.
    why = _unreachable(address)
    try:
        if why is None:  # Ray's INFO lines would bury distrl's own (an error is one line)
            ray.init(address=address, namespace=namespace, logging_level=logging.WARNING, **options)
    except (ConnectionError, ray.exceptions.AuthenticationError) as exc:  # no cluster, a wrong token
        why = str(exc).splitlines()[0]
    if why is not None:
        raise UserError(
            f"--ray-address {address}: no Ray cluster answers there ({why}); start one "
            "(`ray start --head --port=6379`) or leave --ray-address out to start a local one",
            code="ray-address-unreachable",
        )


def _unreachable(address: str, timeout_s: float = 5.0) -> str | None:
    """Why nothing accepts a TCP connection at ``HOST:PORT``, or None (also for ``auto``, which
    Ray resolves itself, failing fast)."""
    host, _, port = address.rpartition(":")
    if address == "auto" or "://" in address:
        return None
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return None
    except ValueError:
        return f"{port!r} is not a port"
    except OSError as exc:
        return exc.strerror or str(exc)


def worker_path() -> dict[str, str]:
    """The job's workers import from where the driver runs (a user's own env classes) too."""
    paths = [os.getcwd(), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {"PYTHONPATH": os.pathsep.join(paths)}


def import_ray() -> Any:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # read when Ray is imported
    require_extra(*extras.RAY)
    import ray

    return ray
