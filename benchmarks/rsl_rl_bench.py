"""distrl vs rsl_rl (the PPO library Isaac Lab trains with) on the same batched torch CartPole.

Both train ``examples/isaac_style_cartpole.py:IsaacStyleCartPole``: a user's env class written to
rsl_rl's VecEnv interface (``get_observations() -> {"policy": obs}``, ``step(actions [N, 1]) ->
(obs, rewards, dones, extras["time_outs"])``, a continuous action that pushes right when > 0),
with the dynamics of distrl's batched torch CartPole-v1.

* distrl trains the unwrapped class (``env.backend: torch``, ``env.id: examples.isaac_style_cartpole:
  IsaacStyleCartPole``) from ``configs/isaac_style_cartpole_ppo.yaml``: ``python -m distrl.train``,
  run from the repository root so that ``examples`` is importable.
* rsl_rl 5.5.1 (``OnPolicyRunner`` + ``PPO`` + ``MLPModel``) trains it through ``TensorDictEnv``, a
  few lines that turn the observation dict into ``tensordict.TensorDict(obs, batch_size=[num_envs])``
  (rsl_rl 5.x wants TensorDict observations): the analogue of Isaac Lab's ``RslRlVecEnvWrapper``.
  Its train_cfg is built from the same YAML (``rsl_rl_train_cfg``), so one file holds the
  hyperparameters of both. rsl_rl runs in its own virtual environment, ``benchmarks/.rslrl-venv``,
  created on first use: torch 2.13.0 first (the CPU wheel on local disk; otherwise pip fetches a
  CUDA build), then ``rsl-rl-lib==5.5.1`` (which brings tensordict and keeps that torch, checked),
  then distrl itself as an editable install with its declared dependencies (``pip install -e .``),
  because the env class imports distrl's torch CartPole and distrl's import chain needs them; an
  editable install follows the source as it changes and pins the same torch.

Measured side by side in one run, ``--repeats`` times interleaved, medians reported:

1. Throughput: env steps per second of the whole training loop (collect + returns + update) over a
   fixed number of updates, no early stop, one torch thread per process, at 4096 envs (Isaac Lab's
   size) and 256. Both are timed from the start of the training loop to the end of its last update,
   start-up excluded: distrl's own ``sps`` (last row of ``metrics.jsonl``), rsl_rl's
   ``runner.learn()`` timed around the call. The whole process's wall time is shown as well.
2. Time to solve under distrl's stopping rule (``train.stop_return``, ``stop_check_every``,
   ``stop_confirm_episodes``, ``eval.episodes``): every k updates a deterministic evaluation on
   seeds apart from ``eval.seed``'s, confirmed on more episodes when it reaches the target. rsl_rl
   gets the same rule from outside: ``runner.learn(num_learning_iterations=k)`` in chunks, and
   between chunks ``runner.get_inference_policy()`` is evaluated by distrl's own evaluation function
   (``distrl.eval.episodes.evaluate``: a separate IsaacStyleCartPole instance per batch of episodes, the
   same episode counts and seeds), so the two trainers are judged on the very same episodes. Time
   of the whole process from start (imports included) to a saved policy; then both saved policies
   get the same final evaluation (``eval.episodes`` = 10 deterministic episodes from ``eval.seed``),
   outside the timed part.

Equal: envs, steps per env per update, epochs, minibatch count, fixed lr, gamma, lambda, clip,
value-loss coefficient (distrl halves its squared error, so its 2.0 is rsl_rl's 1.0) and clipping,
entropy coefficient, max grad norm, initial action std (both learn a state-independent log std),
hidden sizes and activation, no observation normalisation, advantages normalised over the whole
rollout, Adam's eps, time-outs bootstrapped from V(s_t) (the interface has no final observation).
The values are Isaac Lab's CartPole settings with a fixed lr and without value-loss clipping: with
returns near 100 and no normalisation, clipping each value step to 0.2 stalls the critic (in a
trial rsl_rl's deterministic return peaked near 400, fell back to about 100 and reached 495 only
after 148 updates). Not equal, and printed with the results (``DIFFERENCES``): weight
initialisation, how the gradient norm is clipped, how minibatches are drawn, the Adam kernel, the
memory allocator's settings and the bookkeeping around the loop.

Usage: python benchmarks/rsl_rl_bench.py [--repeats 3] [--quick] [--only solve throughput] [--compile]
[--solve-envs N] [--solve-updates U] [--first-seed S]
(``--compile``: both trainers through ``torch.compile``, each by its own switch: distrl's
``train.compile`` compiles its PPO loss with the backward pass, rsl_rl's ``torch_compile_mode:
default`` its actor and critic; the compilation falls inside both timed loops.)
(``--quick``: one repeat and a few updates per throughput run, a smoke run of a couple of minutes.)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from cartpole_bench import CommandFailed, distrl_cmd, distrl_eval, ensure_venv, metrics_rows, run_timed

from distrl.config.run import RunConfig, load_config

if TYPE_CHECKING:  # only the rsl_rl venv has tensordict
    from tensordict import TensorDict

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "isaac_style_cartpole_ppo.yaml"
RSLRL_VENV = REPO / "benchmarks" / ".rslrl-venv"
TORCH_VERSION = "2.13.0"
RSL_RL_VERSION = "5.5.1"
WORKER = "rsl-rl-worker"
"""First argument that makes this file the rsl_rl side (run by the rsl_rl venv's Python)."""
RESULT_PREFIX = "RESULT "

THROUGHPUT_UPDATES = {4096: 40, 256: 200}
"""Updates per throughput run for each env count (about 2.6M and 0.8M env steps at 16 steps per
env; some 20 s each for rsl_rl on this machine)."""
QUICK_THROUGHPUT_UPDATES = {4096: 4, 256: 20}
QUICK_SOLVE_UPDATES = 8
"""``--quick`` caps the time-to-solve runs at this many updates: it checks the code paths, not learning."""

DIFFERENCES = [
    (
        "weight initialisation",
        "orthogonal (gain sqrt 2 hidden, 0.01 actor output, 1 critic output), zero biases",
        "PyTorch's default (Kaiming-uniform) for every layer",
    ),
    (
        "gradient clipping (same max norm)",
        "one norm over all parameters (actor, critic, log std)",
        "actor and critic clipped separately, each to the max norm",
    ),
    (
        "minibatches",
        "a fresh random split of the rollout every epoch",
        "one random split, reused by every epoch",
    ),
    ("Adam", "fused kernel", "PyTorch's default on the CPU (a loop over tensors); same lr, betas, eps"),
    (
        "memory allocator",
        "glibc's mmap and trim thresholds raised in the process (distrl.allocator): freed buffers reused",
        "glibc's defaults: large freed buffers go back to the kernel and fault in again",
    ),
    (
        "bookkeeping in the loop",
        "a metrics.jsonl row per update (losses, episode returns, timings); final checkpoint",
        "none (no log_dir: no episode statistics, TensorBoard or console log); policy saved at the end",
    ),
    (
        "env adapter",
        "distrl's rsl_rl-style VecEnv adapter (the 'policy' group)",
        "TensorDict wrapper (Isaac Lab's RslRlVecEnvWrapper analogue)",
    ),
]
"""(what, distrl, rsl_rl) for everything that could not be made the same."""


# ----------------------------------------------------------------------------- the shared config
def load_distrl_config(overrides: Sequence[str] = ()) -> RunConfig:
    """The benchmark's distrl config: ``CONFIG`` with dotted overrides."""
    return load_config(CONFIG, list(overrides))


def minibatch_count(cfg: RunConfig, num_envs: int) -> int:
    """distrl's minibatches per epoch for ``num_envs`` envs (one process), as its PPO computes it."""
    return cfg.algo.minibatches_per_epoch(cfg.algo.rollout_steps * num_envs)


def update_budget(cfg: RunConfig) -> int:
    """The updates ``train.total_steps`` allows at the config's envs."""
    return cfg.train.total_steps // (cfg.env.num_envs * cfg.algo.rollout_steps)


def size_overrides(cfg: RunConfig, num_envs: int) -> list[str]:
    """distrl overrides for ``num_envs`` envs with the config's minibatch count (its minibatch_size
    is a global sample count, so it shrinks with the envs)."""
    count = minibatch_count(cfg, cfg.env.num_envs)
    batch = cfg.algo.rollout_steps * num_envs
    if batch % count:
        sys.exit(
            f"{num_envs} envs x {cfg.algo.rollout_steps} steps do not split into {count} equal minibatches"
        )
    return [f"env.num_envs={num_envs}", f"algo.minibatch_size={batch // count}"]


def rsl_rl_train_cfg(cfg: RunConfig, num_envs: int) -> dict[str, Any]:
    """rsl_rl 5.x's train_cfg with distrl's hyperparameters; exits where the config asks for
    something rsl_rl cannot do the same way."""
    algo, model = cfg.algo, cfg.model
    unmappable = {
        "algo.anneal_lr must be false (rsl_rl has no linear decay; its schedule is 'fixed')": algo.anneal_lr,
        "algo.normalize_advantages must be true (rsl_rl always normalises)": not algo.normalize_advantages,
        "normalize.rewards must be false (rsl_rl has no reward scaling)": cfg.normalize.rewards,
        "normalize.observations must be set explicitly": cfg.normalize.observations is None,
        "algo.adam_eps must be 1e-8 (rsl_rl's Adam uses torch's default eps)": algo.adam_eps != 1e-8,
    }
    for message, broken in unmappable.items():
        if broken:
            sys.exit(f"{CONFIG.name}: {message}")
    mlp = {
        "class_name": "MLPModel",
        "hidden_dims": list(model.hidden_sizes),
        "activation": model.activation,
        "obs_normalization": cfg.normalize.observations,
    }
    # A learned state-independent log std, as in distrl's ActorCritic (rsl_rl's default learns the std).
    gaussian = {
        "class_name": "GaussianDistribution",
        "init_std": math.exp(model.init_log_std),
        "std_type": "log",
    }
    return {
        "num_steps_per_env": algo.rollout_steps,
        "save_interval": 10**9,  # no periodic saves (and none at all without a log dir)
        "obs_groups": {"actor": ["policy"], "critic": ["policy"]},
        "actor": {**mlp, "distribution_cfg": gaussian},
        "critic": mlp,
        "algorithm": {
            "class_name": "PPO",
            "num_learning_epochs": algo.update_epochs,
            "num_mini_batches": minibatch_count(cfg, num_envs),
            "clip_param": algo.clip_coef,
            "gamma": algo.gamma,
            "lam": algo.gae_lambda,
            "value_loss_coef": 0.5 * algo.value_coef,  # distrl's value loss is 0.5 * squared error
            "use_clipped_value_loss": algo.clip_value_loss,
            "entropy_coef": algo.entropy_coef,
            "learning_rate": algo.learning_rate,
            "schedule": "fixed",
            "max_grad_norm": algo.max_grad_norm,
            "normalize_advantage_per_mini_batch": False,  # over the whole rollout, as distrl
        },
        # distrl compiles its PPO loss, rsl_rl its actor and critic: each library's own switch.
        "torch_compile_mode": "default" if cfg.train.compile else None,
    }


# ----------------------------------------------------------------------------- the rsl_rl side
class TensorDictEnv:
    """rsl_rl's VecEnv interface over IsaacStyleCartPole with TensorDict observations: what Isaac
    Lab's ``RslRlVecEnvWrapper`` does for its envs. Duck-typed rather than a ``rsl_rl.env.VecEnv``
    subclass, because this file is also imported where rsl_rl is not installed."""

    def __init__(self, env: Any) -> None:
        from tensordict import TensorDict

        self._tensordict = TensorDict
        self.env = env
        self.num_envs = env.num_envs
        self.num_actions = env.num_actions
        self.max_episode_length = env.max_episode_length
        self.device = env.device
        self.cfg = env.cfg

    @property
    def episode_length_buf(self) -> torch.Tensor:
        return self.env.episode_length_buf

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        self.env.episode_length_buf = value

    def get_observations(self) -> TensorDict:
        return self._tensordict(self.env.get_observations(), batch_size=[self.num_envs])

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        obs, rewards, dones, extras = self.env.step(actions)
        return self._tensordict(obs, batch_size=[self.num_envs]), rewards, dones, extras


class TensorPolicy(torch.nn.Module):
    """rsl_rl's inference policy (TensorDict in, Gaussian mean out) as distrl's evaluation calls a
    policy: an observation tensor in, the env's action out."""

    def __init__(self, actor: torch.nn.Module) -> None:
        from tensordict import TensorDict

        super().__init__()
        self.actor = actor
        self._tensordict = TensorDict

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor(self._tensordict({"policy": obs}, batch_size=[obs.shape[0]]))


def rsl_rl_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Run in the rsl_rl venv: train (``throughput`` or ``solve``) or evaluate a saved policy."""
    sys.path.insert(0, str(REPO))  # examples.isaac_style_cartpole
    from rsl_rl.runners import OnPolicyRunner

    from distrl.eval.episodes import evaluate
    from distrl.runners.loop import STOP_CHECK_SEED_OFFSET  # the stop check's seeds, exactly
    from examples.isaac_style_cartpole import IsaacStyleCartPole

    torch.set_num_threads(1)
    torch.manual_seed(spec["seed"])
    cfg = load_distrl_config(spec["overrides"])
    env = TensorDictEnv(IsaacStyleCartPole(spec["num_envs"], device="cpu", seed=spec["seed"]))
    runner = OnPolicyRunner(env, spec["train_cfg"], log_dir=None, device="cpu")
    steps_per_update = env.num_envs * cfg.algo.rollout_steps

    def policy() -> TensorPolicy:
        return TensorPolicy(runner.get_inference_policy())

    if spec["mode"] == "eval":
        runner.load(spec["policy_path"])
        returns = evaluate(cfg, policy(), cfg.eval.episodes, cfg.eval.seed)
        return {"return_mean": statistics.mean(returns)}

    if spec["mode"] == "throughput":
        start = time.perf_counter()
        runner.learn(num_learning_iterations=spec["updates"])
        loop_s = time.perf_counter() - start
        return {"sps": spec["updates"] * steps_per_update / loop_s, "loop_s": loop_s}

    # solve: distrl's stop rule (runners/loop.py, _reached_stop_return) around runner.learn().
    every, target = cfg.train.stop_check_every, cfg.train.stop_return
    episodes, confirm = cfg.eval.episodes, cfg.train.stop_confirm_episodes
    seed = cfg.eval.seed + STOP_CHECK_SEED_OFFSET
    max_updates = math.ceil(cfg.train.total_steps / steps_per_update)
    updates, solved = 0, False
    while updates < max_updates and not solved:
        chunk = min(every, max_updates - updates)
        runner.learn(num_learning_iterations=chunk)
        updates += chunk
        if updates % every:
            continue
        total = sum(evaluate(cfg, policy(), episodes, seed))
        mean = total / episodes
        if mean >= target and confirm:
            total += sum(evaluate(cfg, policy(), confirm, seed + episodes))
            mean = total / (episodes + confirm)
        solved = mean >= target
    runner.save(spec["policy_path"])
    return {"updates": updates, "env_steps": updates * steps_per_update, "solved": solved}


# ----------------------------------------------------------------------------- running both
PARTS = ("solve", "throughput")


def ensure_rsl_rl() -> Path:
    """The rsl_rl venv's Python: torch first (the local CPU wheel), then rsl_rl, then distrl itself
    (the env class imports distrl's torch CartPole), with torch checked to have stayed as it was.
    distrl's editable install is refreshed when its dependencies grew since the venv was made."""
    distrl = ["-e", str(REPO)]
    python = ensure_venv(RSLRL_VENV, [f"rsl-rl-lib=={RSL_RL_VERSION}"], distrl)
    probe = [
        str(python),
        "-c",
        "import rsl_rl.runners, tensordict, torch, distrl.runners; print(torch.__version__)",
    ]
    if subprocess.run(probe, check=False, capture_output=True).returncode:
        subprocess.run([str(python), "-m", "pip", "install", "-q", *distrl], check=True)
    version = subprocess.run(probe, check=True, capture_output=True, text=True).stdout.strip()
    if not version.startswith(TORCH_VERSION):
        sys.exit(f"{RSLRL_VENV}: torch {version}, expected {TORCH_VERSION} (delete the venv and rerun)")
    return python


def run_rsl_rl(python: Path, spec: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    wall, stdout = run_timed([str(python), str(Path(__file__).resolve()), WORKER, json.dumps(spec)], REPO)
    results = [line for line in stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    return wall, json.loads(results[-1].removeprefix(RESULT_PREFIX))


def rsl_rl_spec(
    cfg: RunConfig, mode: str, num_envs: int, seed: int, overrides: list[str], **extra: Any
) -> dict[str, Any]:
    return {
        "mode": mode,
        "num_envs": num_envs,
        "seed": seed,
        "overrides": overrides,
        "train_cfg": rsl_rl_train_cfg(load_distrl_config(overrides), num_envs),
        **extra,
    }


def run_distrl(run_dir: Path, *args: str) -> tuple[float, dict[str, Any]]:
    """(process wall s, last metrics row) of a 1-rank distrl run of this benchmark's config, from
    the repository root (where ``examples`` imports)."""
    wall, _ = run_timed(distrl_cmd(1, run_dir, *args, config=CONFIG), REPO)
    return wall, metrics_rows(run_dir)[-1]


def throughput(
    tmp: Path, python: Path, cfg: RunConfig, repeats: int, updates: dict[int, int], extra: list[str]
) -> dict[str, list[dict]]:
    """Per (trainer, num_envs): one dict per repeat with loop env steps/s and process wall s;
    ``extra``: overrides for both trainers (``--compile``)."""
    runs: dict[str, list[dict]] = {}
    for _ in range(repeats):
        for num_envs, count in updates.items():
            overrides = [*size_overrides(cfg, num_envs), *extra]
            total_steps = count * num_envs * cfg.algo.rollout_steps
            run_dir = tmp / f"sps-{num_envs}"
            wall, last = run_distrl(
                run_dir, "--total-steps", str(total_steps), "train.stop_return=null", *overrides
            )
            if last["update"] != count:
                sys.exit(f"distrl made {last['update']} updates, expected {count}")
            runs.setdefault(f"distrl|{num_envs}", []).append({"sps": last["sps"], "wall": wall})
            spec = rsl_rl_spec(cfg, "throughput", num_envs, cfg.train.seed, overrides, updates=count)
            wall, result = run_rsl_rl(python, spec)
            runs.setdefault(f"rsl_rl|{num_envs}", []).append({"sps": result["sps"], "wall": wall})
    return runs


def time_to_solve(
    tmp: Path, python: Path, cfg: RunConfig, seeds: list[int], overrides: list[str]
) -> dict[str, list[dict]]:
    """Per trainer: one dict per seed with process wall s, updates, env steps, final eval return."""
    runs: dict[str, list[dict]] = {"distrl": [], "rsl_rl": []}
    num_envs = cfg.env.num_envs
    for seed in seeds:
        run_dir = tmp / f"solve-distrl-{seed}"
        wall, last = run_distrl(run_dir, "--seed", str(seed), *overrides)
        runs["distrl"].append(
            {
                "wall": wall,
                "updates": last["update"],
                "env_steps": last["global_step"],
                "solved": last.get("stop_check_return", -math.inf) >= cfg.train.stop_return,
                "eval": distrl_eval(run_dir),
            }
        )
        policy_path = str(tmp / f"solve-rsl_rl-{seed}.pt")
        spec = rsl_rl_spec(cfg, "solve", num_envs, seed, overrides, policy_path=policy_path)
        wall, result = run_rsl_rl(python, spec)
        _, evaluated = run_rsl_rl(python, {**spec, "mode": "eval"})
        runs["rsl_rl"].append({"wall": wall, **result, "eval": evaluated["return_mean"]})
    return runs


# ----------------------------------------------------------------------------- report
def table(header: list[str], rows: list[list[str]]) -> None:
    """Print a markdown table."""
    for cells in (header, ["---"] * len(header), *rows):
        print("| " + " | ".join(cells) + " |")


def per_run(values: list[float], fmt: str) -> str:
    return " / ".join(format(v, fmt) for v in values)


def median_of(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    names = [line.partition(":")[2].strip() for line in lines if line.startswith("model name")]
    return names[0] if names else platform.machine()


def print_setup(cfg: RunConfig) -> None:
    algo, model = cfg.algo, cfg.model
    print(f"\n## distrl vs rsl_rl {RSL_RL_VERSION}, IsaacStyleCartPole — `python {' '.join(sys.argv)}`\n")
    print(
        f"Machine: {os.cpu_count()} cores ({cpu_model()}), Python "
        f"{platform.python_version()}, torch {torch.__version__}, one torch thread per process.\n"
        f"Both: {algo.rollout_steps} steps per env, {algo.update_epochs} epochs x "
        f"{minibatch_count(cfg, cfg.env.num_envs)} minibatches, fixed lr {algo.learning_rate:g}, "
        f"gamma {algo.gamma}, lambda {algo.gae_lambda}, clip {algo.clip_coef}, value loss "
        f"{0.5 * algo.value_coef:g} x squared error ({'' if algo.clip_value_loss else 'not '}clipped), "
        f"entropy {algo.entropy_coef:g}, max grad norm {algo.max_grad_norm:g}, initial action std "
        f"{math.exp(model.init_log_std):g}, {model.hidden_sizes} {model.activation}, observation "
        f"normalisation {'on' if cfg.normalize.observations else 'off'}, advantages normalised per "
        f"rollout, Adam eps {algo.adam_eps:g}"
        f"{', both through torch.compile' if cfg.train.compile else ''}."
    )


def print_time_to_solve(cfg: RunConfig, seeds: list[int], solve: dict[str, list[dict]], quick: bool) -> None:
    train, evaluation = cfg.train, cfg.eval
    capped = f" (--quick: capped at {QUICK_SOLVE_UPDATES} updates; checks the code, not learning)"
    budget = update_budget(cfg)
    print(
        f"\n### Time to solve ({cfg.env.num_envs} envs, {budget} updates at most): whole process, "
        "start to saved policy; stop "
        f"once {evaluation.episodes} deterministic episodes every {train.stop_check_every} updates, "
        f"confirmed on {train.stop_confirm_episodes} more, average >= {train.stop_return:g}; then "
        f"{evaluation.episodes} deterministic episodes from seed {evaluation.seed} (not timed)"
        f"{capped if quick else ''}\n"
    )
    header = ["trainer", "seeds", "wall s per seed", "median wall s", "updates", "env steps (M)"]
    rows = [
        [
            name,
            str(seeds),
            per_run([r["wall"] for r in runs], ".1f"),
            f"{median_of(runs, 'wall'):.1f}",
            per_run([r["updates"] for r in runs], "d"),
            per_run([r["env_steps"] / 1e6 for r in runs], ".2f"),
            " / ".join("yes" if r["solved"] else "no" for r in runs),
            per_run([r["eval"] for r in runs], ".0f"),
        ]
        for name, runs in solve.items()
    ]
    table([*header, "solved", "eval returns"], rows)
    ratio = median_of(solve["distrl"], "wall") / median_of(solve["rsl_rl"], "wall")
    print(f"\ndistrl / rsl_rl median wall time to solve: **{ratio:.2f}x** (below 1: distrl faster)")


def print_throughput(repeats: int, updates: dict[int, int], tput: dict[str, list[dict]]) -> None:
    print(
        "\n### Throughput: env steps/s of the training loop (collect + returns + update, start-up "
        f"excluded), fixed updates, no early stop; medians of {repeats} interleaved runs\n"
    )
    header = ["envs", "updates", "trainer", "env steps/s per run", "median env steps/s"]
    rows = [
        [
            str(num_envs),
            str(count),
            name,
            per_run([r["sps"] for r in tput[f"{name}|{num_envs}"]], ".0f"),
            f"{median_of(tput[f'{name}|{num_envs}'], 'sps'):.0f}",
            f"{median_of(tput[f'{name}|{num_envs}'], 'wall'):.1f}",
        ]
        for num_envs, count in updates.items()
        for name in ("distrl", "rsl_rl")
    ]
    table([*header, "median process wall s"], rows)
    print()
    for num_envs in updates:
        ratio = median_of(tput[f"distrl|{num_envs}"], "sps") / median_of(tput[f"rsl_rl|{num_envs}"], "sps")
        print(f"{num_envs} envs: distrl / rsl_rl env steps/s: **{ratio:.2f}x**")


def print_differences() -> None:
    print("\n### What differs\n")
    table(["", "distrl", "rsl_rl"], [list(row) for row in DIFFERENCES])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeats", type=int, default=3, help="interleaved repeats (N seeds for time to solve)"
    )
    parser.add_argument("--first-seed", type=int, default=1, help="time to solve: seeds FIRST..FIRST+N-1")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: one repeat, a few updates per throughput run"
    )
    parser.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS), help="parts to run")
    parser.add_argument(
        "--solve-envs",
        type=int,
        help="envs for time to solve, both trainers (default: the config's); the minibatch count stays",
    )
    parser.add_argument(
        "--solve-updates", type=int, help="update budget for time to solve (default: the config's, 150)"
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="both trainers through torch.compile (distrl train.compile, rsl_rl torch_compile_mode)",
    )
    args = parser.parse_args()
    if args.quick:
        args.repeats = 1
    args.seeds = list(range(args.first_seed, args.first_seed + args.repeats))
    updates = QUICK_THROUGHPUT_UPDATES if args.quick else THROUGHPUT_UPDATES
    cfg = load_distrl_config()
    extra = ["train.compile=true"] if args.compile else []
    solve_envs = args.solve_envs or cfg.env.num_envs
    solve_updates = args.solve_updates or update_budget(cfg)
    if args.quick:
        solve_updates = QUICK_SOLVE_UPDATES
    solve_overrides = [
        *extra,
        *size_overrides(cfg, solve_envs),
        f"train.total_steps={solve_updates * solve_envs * cfg.algo.rollout_steps}",
    ]
    solve_cfg = load_distrl_config(solve_overrides)
    python = ensure_rsl_rl()
    print_setup(load_distrl_config(extra))
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        try:
            if "solve" in args.only:
                solve = time_to_solve(tmp, python, solve_cfg, args.seeds, solve_overrides)
                print_time_to_solve(solve_cfg, args.seeds, solve, args.quick)
            if "throughput" in args.only:
                tput = throughput(tmp, python, cfg, args.repeats, updates, extra)
                print_throughput(args.repeats, updates, tput)
        except CommandFailed as exc:
            sys.exit(str(exc))
    print_differences()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == WORKER:
        print(RESULT_PREFIX + json.dumps(rsl_rl_worker(json.loads(sys.argv[2]))), flush=True)
    else:
        main()
