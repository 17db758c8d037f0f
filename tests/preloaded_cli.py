"""``python -m distrl ARGS`` as a process forked from one that has already imported torch and distrl.

A fresh interpreter spends 2-3 s of a 2-core machine importing torch and distrl before the command
line does anything; the suite runs hundreds of them. This server pays that once: for each request
it forks a child that takes the request's working directory, environment, arguments and output
files, then runs ``distrl`` as ``-m`` would (``sys.path[0]`` the working directory, the request's
``PYTHONPATH`` in front). The child is a real process: its own pid, process group, exit status
(an uncaught exception prints its traceback and exits 1, as an interpreter does), stdout and
stderr. What it does not redo is what an interpreter does at start-up before ``distrl`` runs.

Protocol (one request at a time, JSON lines): the client writes ``{argv, cwd, processes}`` to
stdin, ``processes`` a list of ``{env, out, err}``, one child each (the ranks of a distributed run
differ only in their environment); the server answers ``{"pids": [...]}`` once the children run,
then ``{"codes": [...]}`` (a negative signal number for a killed child, as ``subprocess`` reports
it).
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import sys
from typing import Any

PRELOADED = ("torch", "torch._dynamo", "gymnasium", "distrl.cli", "distrl.entry", "distrl.runners.loop")
"""Imported before any fork (``torch._dynamo``: a learner's first optimizer imports it, a second
of start-up). Not Ray or JAX: both start threads that a fork would not carry."""


def become(request: dict[str, Any], process: dict[str, Any]) -> None:
    """Turn this forked child into ``python -m distrl ARGV`` started as the request and its entry
    of ``processes`` say."""
    os.setsid()  # its own process group: a timeout kills the child and whatever it started
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(process["env"])
    for fd, (path, flags) in enumerate(
        [(os.devnull, os.O_RDONLY), (process["out"], os.O_WRONLY), (process["err"], os.O_WRONLY)]
    ):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    extra = [p for p in process["env"].get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    sys.path[:1] = [os.getcwd(), *extra]
    importlib.invalidate_caches()  # files written since the server started must be importable
    sys.argv = ["-m", *request["argv"]]


def reply(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def serve() -> None:
    for module in PRELOADED:
        importlib.import_module(module)
    reply({"ready": 1})
    for line in sys.stdin:
        request = json.loads(line)
        pids = []
        for process in request["processes"]:
            pid = os.fork()
            if pid == 0:
                become(request, process)
                runpy.run_module("distrl", run_name="__main__", alter_sys=True)
                return  # the child's end: the interpreter exits as after ``python -m distrl``
            pids.append(pid)
        reply({"pids": pids})
        reply({"codes": [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]})


if __name__ == "__main__":
    serve()
