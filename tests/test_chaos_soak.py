"""The chaos soak's short version (``benchmarks/chaos_soak.py``, whose 30-minute runs give the
figures in BENCHMARKS.md): GRPO under Ray with a fault every few seconds, drawn from a seed
(a learner, a verifier, prompt or eval worker killed, a verifier stopped, the driver stopped and
resumed, the newest checkpoint cut short), until four faults of four kinds were injected (a count,
not a time: as many on a slow machine as on a fast one): every fault survived, every update and
every prompt trained once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import REPO, clean_env, run_python

CALL_TIMEOUT_S = 10
"""A worker call's deadline in the soak (the benchmark's runs: 20 s): a stopped verifier is named
a hang sooner, and the soak is shorter."""


@pytest.mark.slow
def test_a_short_chaos_soak_of_grpo_under_ray_survives_every_fault(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="the ray extra is installed by make test")
    out = tmp_path / "soak.json"
    result = run_python(
        str(REPO / "benchmarks" / "chaos_soak.py"), "--workload", "grpo-ray", "--faults", "4",
        "--minutes", "6", "--fault-every", "5", "--seed", "3",
        "--set", f"workers.call_timeout_s={CALL_TIMEOUT_S}", "--run-dir", str(tmp_path / "run"),
        "--out", str(out),
        timeout=900, env={k: v for k, v in clean_env().items() if not k.startswith("RAY_")},
    )  # fmt: skip  # its own local Ray, not the session's (whose token variables the session sets)
    assert result.returncode == 0, result.stderr[-3000:]
    soak = json.loads(out.read_text())
    kinds = {fault["kind"] for fault in soak["faults"]}
    assert soak["injected"] == 4 and len(kinds) == 4, soak["faults"]  # the first 4 of 7 kinds
    assert soak["survived"] == soak["injected"], soak["faults"]
    assert soak["every_update_once"] and soak["every_prompt_once"]
    for fault in soak["faults"]:
        if fault["kind"].startswith("sigstop"):  # a hang: named within workers.call_timeout_s
            assert fault["detected_s"] is not None and fault["detected_s"] < CALL_TIMEOUT_S + 15
        if fault["kind"].startswith("sigkill-") and fault["kind"] != "sigkill-learner":
            assert fault["steps_lost"] == 0  # a worker's work is done again, nothing lost
