"""The same seeds give the same metrics rows: short runs of the shipped configs at 1 and 2 ranks
and in Ray mode, their metrics.jsonl rows without the keys that measure time or the machine,
written to one JSON file; ``--compare`` checks two such files key by key (a refactor that
changes no behaviour changes no row).

    python benchmarks/metrics_parity.py --out before.json     # on the old commit
    python benchmarks/metrics_parity.py --out after.json --compare before.json

``--root DIR`` runs another checkout's code and configs (a ``git worktree`` of the old commit)
with this script's scenarios, from one virtual environment.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUIET = ["log.progress=false", "log.tensorboard=false", "train.stop_return=null"]
PATIENT = ["cluster.placement_timeout_s=300"]
"""Ray mode on a busy machine: its actors may take more than the default 30 s to start."""
REPLAY = ["train.total_steps=600", "algo.learning_starts=200"]
ENV_EACH = ["env.num_envs=2", "algo.gradient_steps=2"]
"""Two ranks of a replay config of one env: an env each, a gradient step per env step kept."""
SCENARIOS: dict[str, list[str]] = {
    "ppo, 1 rank": ["--config", "configs/cartpole_ppo.yaml", "train.total_steps=8192", *QUIET],
    "ppo, 2 ranks (torchrun)": ["--config", "configs/cartpole_ppo.yaml", "train.total_steps=8192", *QUIET],
    "dqn, 1 rank": ["--config", "configs/cartpole_dqn.yaml", "train.total_steps=4096", *QUIET],
    "dqn, 2 ranks (torchrun)": ["--config", "configs/cartpole_dqn.yaml", "train.total_steps=4096", *QUIET],
    "ppo, Ray mode (1 learner, 2 env workers)": [
        "--config", "configs/ray_small_cpu.yaml", "--launcher", "ray", "workers.eval=0", *PATIENT,
        "train.total_steps=8192", *QUIET,
    ],
    "a2c, 1 rank": ["--config", "configs/cartpole_a2c.yaml", "train.total_steps=4000", *QUIET],
    "appo, 1 rank": ["--config", "configs/cartpole_appo.yaml", "train.total_steps=8192", *QUIET],
    "sac, 1 rank": ["--config", "configs/pendulum_sac.yaml", *REPLAY, *QUIET],
    "sac, 2 ranks (torchrun)": ["--config", "configs/pendulum_sac.yaml", *REPLAY, *ENV_EACH, *QUIET],
    "sac, 2 ranks sharded (torchrun)": [
        "--config", "configs/pendulum_sac.yaml", *REPLAY, *ENV_EACH, "train.sharding=fsdp", *QUIET,
    ],
    "td3, 1 rank": ["--config", "configs/pendulum_td3.yaml", *REPLAY, *QUIET],
    "td3, 2 ranks (torchrun)": ["--config", "configs/pendulum_td3.yaml", *REPLAY, *ENV_EACH, *QUIET],
    "grpo, 1 rank": ["--config", "configs/grpo_small_cpu.yaml", "train.total_steps=1280", *QUIET],
    "grpo, 2 ranks (torchrun)": ["--config", "configs/grpo_small_cpu.yaml", "train.total_steps=1280", *QUIET],
    "grpo, Ray mode (1 learner, 2 verifier and 1 prompt workers)": [
        "--config", "configs/grpo_small_cpu.yaml", "--launcher", "ray", "train.total_steps=1280",
        *PATIENT, *QUIET,
    ],
}  # fmt: skip
"""IQL and offline DQN read a logged dataset, which a checkout does not hold: not among them."""
TWO_RANKS = "2 ranks"
MACHINE_KEYS = re.compile(r"time|per_s|sps|cpu|rss|memory|usage|slowest|_share")
"""Keys whose values depend on the clock or the machine, not on the training (--out keeps them,
--compare leaves them out)."""


def run(name: str, args: list[str], run_dir: Path, root: Path) -> list[dict[str, float]]:
    python = [sys.executable]
    if TWO_RANKS in name:
        python += ["-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
                   "--master_port=29533", "-m", "distrl.train", "--distributed"]  # fmt: skip
    else:
        python += ["-m", "distrl", "train"]
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    done = subprocess.run(
        [*python, *args, "--run-dir", str(run_dir)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise SystemExit(f"{name}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def training_keys(rows: list[dict]) -> list[dict]:
    """The rows without the keys that measure time or the machine."""
    return [{k: v for k, v in row.items() if not MACHINE_KEYS.search(k)} for row in rows]


def compare(before: dict[str, list[dict]], after: dict[str, list[dict]]) -> int:
    all_differences = 0
    for name in after.keys() - before.keys():
        print(f"{name}: {len(after[name])} rows, new (no run before to compare with)")
    for name, rows in before.items():
        theirs = after.get(name)
        if theirs is None:
            print(f"{name}: missing from the new run")
            all_differences += 1
            continue
        differences = 0
        if len(rows) != len(theirs):
            print(f"{name}: {len(rows)} rows before, {len(theirs)} after")
            differences += 1
        for index, (old, new) in enumerate(zip(training_keys(rows), training_keys(theirs), strict=False)):
            for key in sorted(old.keys() | new.keys()):
                if old.get(key) != new.get(key):
                    print(f"{name}: row {index} {key}: {old.get(key)!r} -> {new.get(key)!r}")
                    differences += 1
        if not differences:
            print(f"{name}: {len(rows)} rows, identical")
        all_differences += differences
    return 1 if all_differences else 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="JSON file of every scenario's rows")
    parser.add_argument("--compare", type=Path, help="an earlier --out file to compare with")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to run (default this one)")
    parser.add_argument("--only", help="run the scenarios whose name contains this")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="distrl-parity-") as temp:
        for index, (name, scenario) in enumerate(SCENARIOS.items()):
            if args.only and args.only not in name:
                continue
            config = args.root / scenario[scenario.index("--config") + 1]
            if not config.exists():  # an algorithm the old checkout lacks
                print(f"{name}: {config} does not exist; skipped", flush=True)
                continue
            results[name] = run(name, scenario, Path(temp) / f"run{index}", args.root.resolve())
            print(f"{name}: {len(results[name])} rows", flush=True)
    args.out.write_text(json.dumps(results, indent=1))
    if args.compare:
        return compare(json.loads(args.compare.read_text()), results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
