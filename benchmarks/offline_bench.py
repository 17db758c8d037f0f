"""Offline DQN from a large Parquet dataset: distrl on 1 and 2 ranks against d3rlpy, side by side.

Generates (once, cached in ``--data-dir``) two CartPole-shaped logged datasets in distrl's Parquet
schema, of ``--rows`` rows and of a tenth of that, synthesised with numpy rather than by stepping
an env: the benchmark measures the data path and the learner. Then, for each dataset, trains
  * distrl: ``distrl train --config configs/cartpole_offline_dqn.yaml --data DIR`` on 1 rank and
    on 2 ranks (torchrun), each rank streaming its own part of the files;
  * d3rlpy 2.8.1's (double) DQN with the same hyperparameters (``d3rlpy_offline_dqn.py``, in its
    own virtual environment: d3rlpy pins gymnasium 1.0.0), which loads the whole dataset into
    memory on every process; on 2 ranks with its DDP, each rank sampling half of every batch;
for the same number of gradient steps of the same global batch, online evaluation and the stop
check off. Reported: training samples per second after the first ``algo.gradient_steps`` steps
(one distrl iteration, left out for both as warm-up), the ratio to d3rlpy on one process, the
peak resident memory of every rank (``peak_rss.py``: the kernel's high-water mark of each rank's
process, as ``wait4`` reports it when the process ends) at both dataset sizes, d3rlpy's dataset
load time and each run's whole wall time. The contenders run interleaved ``--repeats`` times;
medians are shown.

Usage: python benchmarks/offline_bench.py [--rows 10000000] [--steps 5000] [--repeats 3]
       [--ranks 1 2] [--rows-per-file 250000] [--data-dir DIR] [--no-d3rlpy] [--json FILE]
d3rlpy is installed into DATA_DIR/d3rlpy-venv on first use (one pip command, torch pinned).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from distrl.config.run import RunConfig, load_config
from distrl.data.schema import SCHEMA
from distrl.io.metrics import METRICS_FILE

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from cartpole_bench import timed  # noqa: E402
from learning_bench import free_port  # noqa: E402

REPO = HERE.parent
CONFIG = REPO / "configs" / "cartpole_offline_dqn.yaml"
PEAK_RSS = HERE / "peak_rss.py"
D3RLPY_SCRIPT = HERE / "d3rlpy_offline_dqn.py"
D3RLPY_PACKAGES = ["torch==2.13.0", "d3rlpy==2.8.1", "pyarrow"]
"""One pip command: torch pinned in it, or pip fetches a multi-GB CUDA build for d3rlpy."""
OBS_DIM, NUM_ACTIONS = 4, 2
MEAN_EPISODE_LENGTH = 22
"""CartPole-v1's mean episode length under a random policy."""
ROW_GROUP_ROWS = 65_536
DATA_SEED = 0


@dataclass(frozen=True)
class Setup:
    """What every run shares."""

    steps: int
    """Gradient steps per run."""
    batch_size: int
    """Samples per gradient step, summed over ranks."""
    warmup_steps: int
    """Gradient steps left out of the timing: distrl's first iteration."""
    tmp: Path
    """Run dirs and per-rank memory records."""
    d3rlpy_python: Path | None
    """The Python of d3rlpy's virtual environment (None: d3rlpy not run)."""
    d3rlpy_hyper: dict[str, Any]
    """distrl's DQN settings in ``d3rlpy_offline_dqn.py``'s terms."""


@dataclass
class Run:
    """One training command's result."""

    contender: str
    ranks: int
    rows: int
    samples_per_s: float
    peak_rss_mib: list[float]
    """One value per rank."""
    wall_s: float
    """The whole command: start-up, loading and the final save included."""
    load_s: float | None = None
    """d3rlpy: reading the dataset into its MDPDataset (distrl streams, so has none)."""


@dataclass
class Summary(Run):
    """Medians over the repeats of one (contender, ranks, rows)."""

    repeats: list[float] = field(default_factory=list)
    """samples/s of every repeat, in run order."""


# ----------------------------------------------------------------------------- the dataset
def list_column(matrix: np.ndarray) -> pa.ListArray:
    """Each row of a 2-D array as one list value."""
    rows, width = matrix.shape
    offsets = pa.array(np.arange(0, rows * width + 1, width, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(matrix.reshape(-1)))


def synthetic_transitions(rows: int, first_episode: int, rng: np.random.Generator) -> tuple[pa.Table, int]:
    """``rows`` CartPole-shaped transitions of a random logging policy in whole episodes (the last
    row ends one), and how many episodes they hold. Within an episode a row's next state is the
    following row's state, so d3rlpy, which stores episodes as state sequences, sees the same
    transitions as distrl; a terminal row's next state is never used by either learner."""
    states = rng.standard_normal((rows + 1, OBS_DIM), dtype=np.float32)
    terminal = rng.random(rows) < 1.0 / MEAN_EPISODE_LENGTH
    terminal[-1] = True
    episode = np.concatenate([[0], np.cumsum(terminal[:-1])])
    starts = np.flatnonzero(np.concatenate([[True], terminal[:-1]]))
    columns = {
        "mdp_id": pa.array(first_episode + episode).cast(pa.string()),
        "sequence_number": np.arange(rows) - starts[episode],
        "state_features": list_column(states[:-1]),
        "action": rng.integers(NUM_ACTIONS, size=rows),
        "action_probability": np.full(rows, 1.0 / NUM_ACTIONS),
        "reward": np.ones(rows),
        "next_state_features": list_column(states[1:]),
        "terminal": terminal,
        "possible_actions": list_column(np.ones((rows, NUM_ACTIONS), dtype=bool)),
        # As `distrl collect` writes them: no action is possible after the end of an episode.
        "possible_next_actions": list_column(np.repeat(~terminal[:, None], NUM_ACTIONS, axis=1)),
        "time_diff": np.ones(rows, dtype=np.int64),
    }
    return pa.table(columns, schema=SCHEMA), len(starts)


def dataset_rows(path: Path) -> int:
    return sum(pq.ParquetFile(file).metadata.num_rows for file in path.glob("*.parquet"))


def ensure_dataset(root: Path, rows: int, rows_per_file: int) -> Path:
    """The dataset of ``rows`` rows in files of ``rows_per_file`` (row groups of ROW_GROUP_ROWS),
    written once and reused; written under another name first, so a cut-off write is never used."""
    path = root / f"rows-{rows}-per-file-{rows_per_file}"
    if path.is_dir() and dataset_rows(path) == rows:
        return path
    staging = path.with_name(path.name + ".partial")
    for stale in (staging, path):
        shutil.rmtree(stale, ignore_errors=True)
    staging.mkdir(parents=True)
    start, episodes = time.perf_counter(), 0
    for index, first_row in enumerate(range(0, rows, rows_per_file)):
        rng = np.random.default_rng([DATA_SEED, index])
        table, file_episodes = synthetic_transitions(min(rows_per_file, rows - first_row), episodes, rng)
        pq.write_table(table, staging / f"part-{index:05d}.parquet", row_group_size=ROW_GROUP_ROWS)
        episodes += file_episodes
    staging.rename(path)
    print(f"wrote {path} ({rows:,} rows, {episodes:,} episodes) in {time.perf_counter() - start:.1f} s")
    return path


# ----------------------------------------------------------------------------- the contenders
def launcher(python: str, ranks: int) -> list[str]:
    """The command prefix that starts ``ranks`` processes of ``python`` (torchrun for more than 1)."""
    if ranks == 1:
        return [python]
    return [
        python, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc_per_node={ranks}",
        "--master_addr=127.0.0.1", f"--master_port={free_port()}",
    ]  # fmt: skip


def peak_rss_mib(rss_dir: Path, ranks: int) -> list[float]:
    return [json.loads((rss_dir / f"rank-{r}.json").read_text())["peak_rss_kib"] / 1024 for r in range(ranks)]


def fresh_dir(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def run_distrl(setup: Setup, data: Path, rows: int, ranks: int) -> Run:
    run_dir = setup.tmp / f"distrl-{ranks}"
    rss_dir = fresh_dir(setup.tmp / f"distrl-{ranks}-rss")
    samples = setup.steps * setup.batch_size
    args = [
        "--config", str(CONFIG), "--data", str(data), "--run-dir", str(run_dir), "--overwrite",
        "--total-steps", str(samples), "train.stop_return=null", "train.device=cpu",
        "log.tensorboard=false", "log.progress=false",
        # Only the final checkpoint, written after the last timed step (d3rlpy saves nothing).
        f"checkpoint.interval_steps={samples + 1}",
    ]  # fmt: skip
    cmd = [*launcher(sys.executable, ranks), str(PEAK_RSS), str(rss_dir), "-m", "distrl.train", *args]
    wall_s = timed(cmd + ["--distributed"] * (ranks > 1))
    rows_logged = [json.loads(line) for line in (run_dir / METRICS_FILE).read_text().splitlines()]
    first, last = rows_logged[0], rows_logged[-1]  # the first iteration is the warm-up
    samples_per_s = (last["global_step"] - first["global_step"]) / (last["time_s"] - first["time_s"])
    return Run("distrl", ranks, rows, samples_per_s, peak_rss_mib(rss_dir, ranks), wall_s)


def d3rlpy_hyperparameters(cfg: RunConfig) -> dict[str, Any]:
    """distrl's DQN settings for ``d3rlpy_offline_dqn.py``; those it has no counterpart for must be
    at values that change nothing."""
    algo = cfg.algo
    unmatched = {
        "algo.n_step": algo.n_step != 1,
        "algo.loss": algo.loss != "huber",
        "algo.tau": algo.tau != 1.0,
        "algo.anneal_lr": algo.anneal_lr,
    }
    if any(unmatched.values()):
        names = ", ".join(name for name, differs in unmatched.items() if differs)
        sys.exit(f"{CONFIG}: {names} not mapped to d3rlpy; this benchmark compares (double) DQN or CQL")
    return {
        "batch_size": algo.batch_size,
        "learning_rate": algo.learning_rate,
        "gamma": algo.gamma,
        "target_update_interval": algo.target_update_interval,
        "max_grad_norm": algo.max_grad_norm,
        "adam_eps": algo.adam_eps,
        "double_q": algo.double_q,
        "cql_alpha": algo.cql_alpha,
        "hidden_sizes": cfg.model.hidden_sizes,
        "activation": cfg.model.activation,
        "seed": cfg.train.seed,
    }


def ensure_d3rlpy(venv: Path) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip_install = [str(venv / "bin" / "pip"), "install", "-q", *D3RLPY_PACKAGES]
        pip = subprocess.run(pip_install, check=False, capture_output=True, text=True)
        if pip.returncode != 0:
            shutil.rmtree(venv)
            sys.exit(f"installing {' '.join(D3RLPY_PACKAGES)} failed:\n{pip.stderr[-3000:]}")
    return python


def run_d3rlpy(setup: Setup, data: Path, rows: int, ranks: int) -> Run:
    assert setup.d3rlpy_python is not None
    rss_dir = fresh_dir(setup.tmp / f"d3rlpy-{ranks}-rss")
    out = setup.tmp / f"d3rlpy-{ranks}.json"
    script = [
        str(D3RLPY_SCRIPT), "--data", str(data), "--out", str(out), "--steps", str(setup.steps),
        "--warmup-steps", str(setup.warmup_steps), "--hyper", json.dumps(setup.d3rlpy_hyper),
        "--algo", "cql" if setup.d3rlpy_hyper["cql_alpha"] > 0 else "dqn",
    ]  # fmt: skip
    wall_s = timed([*launcher(str(setup.d3rlpy_python), ranks), str(PEAK_RSS), str(rss_dir), *script])
    result = json.loads(out.read_text())
    if result["transitions"] != rows:  # every row must be a transition to d3rlpy too
        sys.exit(f"d3rlpy made {result['transitions']} transitions of {rows} rows")
    rss = peak_rss_mib(rss_dir, ranks)
    return Run("d3rlpy", ranks, rows, result["samples_per_s"], rss, wall_s, result["load_s"])


# ----------------------------------------------------------------------------- the report
def describe(run: Run) -> str:
    rss = " / ".join(f"{mib:.0f}" for mib in run.peak_rss_mib)
    load = f", load {run.load_s:.1f} s" if run.load_s is not None else ""
    return (f"{run.contender} x{run.ranks}, {run.rows:,} rows: {run.samples_per_s:.0f} samples/s, "
            f"peak RSS {rss} MiB, wall {run.wall_s:.1f} s{load}")  # fmt: skip


def summarise(runs: list[Run]) -> list[Summary]:
    groups: dict[tuple[str, int, int], list[Run]] = {}
    for run in runs:
        groups.setdefault((run.contender, run.ranks, run.rows), []).append(run)
    summaries = []
    # distrl and d3rlpy side by side for each size and rank count.
    for (contender, ranks, rows), group in sorted(groups.items(), key=lambda item: (item[0][2], item[0][1])):
        per_rank = [statistics.median(run.peak_rss_mib[r] for run in group) for r in range(ranks)]
        loads = [run.load_s for run in group if run.load_s is not None]
        summaries.append(
            Summary(
                contender, ranks, rows,
                samples_per_s=statistics.median(run.samples_per_s for run in group),
                peak_rss_mib=per_rank,
                wall_s=statistics.median(run.wall_s for run in group),
                load_s=statistics.median(loads) if loads else None,
                repeats=[run.samples_per_s for run in group],
            )
        )  # fmt: skip
    return summaries


def print_report(summaries: list[Summary], setup: Setup, repeats: int) -> None:
    reference = {s.rows: s.samples_per_s for s in summaries if s.contender == "d3rlpy" and s.ranks == 1}
    print(f"\n## Offline double DQN, {setup.steps} gradient steps of {setup.batch_size} samples (global), "
          f"medians of {repeats} interleaved runs")  # fmt: skip
    print("| contender | ranks | rows | samples/s | runs | / d3rlpy 1 process | peak RSS per rank (MiB) "
          "| d3rlpy load s | wall s |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for s in summaries:
        ratio = f"{s.samples_per_s / reference[s.rows]:.2f}x" if s.rows in reference else "–"
        rss = " / ".join(f"{mib:.0f}" for mib in s.peak_rss_mib)
        runs = " / ".join(f"{sps:.0f}" for sps in s.repeats)
        load = f"{s.load_s:.1f}" if s.load_s is not None else "– (streams)"
        print(f"| {s.contender} | {s.ranks} | {s.rows:,} | {s.samples_per_s:.0f} | {runs} | {ratio} | {rss} "
              f"| {load} | {s.wall_s:.1f} |")  # fmt: skip
    sizes = sorted({s.rows for s in summaries})
    if len(sizes) == 2:
        small, large = sizes
        print(f"\nPeak RSS per rank (largest rank), {large:,} rows / {small:,} rows:")
        by_key = {(s.contender, s.ranks, s.rows): max(s.peak_rss_mib) for s in summaries}
        for contender, ranks in sorted({(s.contender, s.ranks) for s in summaries}):
            growth = by_key[contender, ranks, large] / by_key[contender, ranks, small]
            print(f"  {contender} {ranks} rank{'s' * (ranks > 1)}: {growth:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="the large dataset (the small: a tenth)")
    parser.add_argument("--steps", type=int, default=5_000, help="gradient steps per run, every contender")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats (medians reported)")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rows-per-file", type=int, default=250_000, help="both datasets' file size")
    parser.add_argument("--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "distrl-offline-bench")
    parser.add_argument("--no-d3rlpy", action="store_true")
    parser.add_argument("--json", type=Path, help="write every run and the medians here")
    args = parser.parse_args()
    cfg = load_config(CONFIG)
    warmup_steps = cfg.algo.gradient_steps
    if args.steps <= warmup_steps or args.steps % warmup_steps:
        parser.error(f"--steps must be a multiple of algo.gradient_steps={warmup_steps} above it")
    # distrl deals out whole files when there are at least as many as ranks, else row groups: the
    # smaller dataset needs a file per rank too, or the two sizes would not be read alike.
    if args.rows // 10 < max(args.ranks) * args.rows_per_file:
        parser.error(f"--rows-per-file: the {args.rows // 10:,}-row dataset needs {max(args.ranks)} files")
    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}")
    datasets = {
        rows: ensure_dataset(args.data_dir, rows, args.rows_per_file) for rows in (args.rows // 10, args.rows)
    }
    d3rlpy_python = None if args.no_d3rlpy else ensure_d3rlpy(args.data_dir / "d3rlpy-venv")
    runs: list[Run] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        setup = Setup(
            args.steps,
            cfg.algo.batch_size,
            warmup_steps,
            Path(tmp_name),
            d3rlpy_python,
            d3rlpy_hyperparameters(cfg),
        )
        for _ in range(args.repeats):
            for rows, data in datasets.items():
                for ranks in args.ranks:
                    new = [run_distrl(setup, data, rows, ranks)]
                    if d3rlpy_python is not None:
                        new.append(run_d3rlpy(setup, data, rows, ranks))
                    for run in new:
                        print(f"  {describe(run)}", flush=True)
                    runs += new
    summaries = summarise(runs)
    print_report(summaries, setup, args.repeats)
    if args.json:
        settings = {
            "steps": setup.steps,
            "batch_size": setup.batch_size,
            "warmup_steps": setup.warmup_steps,
            "rows_per_file": args.rows_per_file,
            "row_group_rows": ROW_GROUP_ROWS,
            "d3rlpy_hyperparameters": setup.d3rlpy_hyper,
        }
        runs_and_medians = {"runs": [asdict(r) for r in runs], "medians": [asdict(s) for s in summaries]}
        args.json.write_text(json.dumps({"settings": settings, **runs_and_medians}, indent=1))


if __name__ == "__main__":
    main()
